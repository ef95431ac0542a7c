//! The device plugin service of one resource, and the state all of them share: vgpud's
//! client, each resource's listing, and the refresh that follows vgpud's signals.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use tokio::sync::{watch, Mutex, Notify};
use tonic::{Request, Response, Status};
use vgpud_client::{Client, Options};

use crate::config::{Config, Mode};
use crate::inventory::{self, Kind, Listing, Memory, Resource};
use crate::naming;
use crate::pb::deviceplugin as dp;

/// Most containers in one `Allocate` or `GetPreferredAllocation`.
pub const MAX_CONTAINERS: usize = 16;
/// Most device IDs in one container's request (and in a preferred allocation's lists).
pub const MAX_IDS: usize = 256;

/// A failed device plugin call, naming the operation and the device.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The request is over a limit or malformed.
    #[error("{op}: {why}")]
    Invalid {
        /// The call.
        op: &'static str,
        /// What is wrong.
        why: String,
    },
    /// The ID is not one this resource advertises.
    #[error("{op} {id}: not a device of {resource}")]
    UnknownId {
        /// The call.
        op: &'static str,
        /// The device ID.
        id: String,
        /// The resource.
        resource: String,
    },
    /// vgpud refused or failed.
    #[error("{op} {id} ({uuid}): {source}")]
    Vgpud {
        /// The call.
        op: &'static str,
        /// The device ID.
        id: String,
        /// The vgpud device.
        uuid: String,
        /// vgpud's answer.
        source: Box<vgpud_client::Error>,
    },
    /// The device exists but cannot be handed out.
    #[error("{op} {id} ({uuid}): {why}")]
    Unusable {
        /// The call.
        op: &'static str,
        /// The device ID.
        id: String,
        /// The vgpud device.
        uuid: String,
        /// Why.
        why: String,
    },
}

impl From<PluginError> for Status {
    fn from(e: PluginError) -> Status {
        let msg = e.to_string();
        match &e {
            PluginError::Invalid { .. } => Status::invalid_argument(msg),
            PluginError::UnknownId { .. } => Status::not_found(msg),
            PluginError::Vgpud { source, .. } => match **source {
                vgpud_client::Error::NoCapacity(_) => Status::resource_exhausted(msg),
                vgpud_client::Error::Busy(_) => Status::unavailable(msg),
                vgpud_client::Error::NotFound(_) => Status::not_found(msg),
                vgpud_client::Error::AccessDenied(_) => Status::permission_denied(msg),
                _ => Status::internal(msg),
            },
            PluginError::Unusable { .. } => Status::failed_precondition(msg),
        }
    }
}

/// One resource's mutable state.
pub struct ResourceState {
    /// What is remembered across refreshes.
    pub memory: Memory,
    /// The advertised devices, for every ListAndWatch stream.
    pub tx: watch::Sender<Vec<dp::Device>>,
}

/// What every resource's service shares.
pub struct Shared {
    /// vgpud.
    pub client: Client,
    /// The configuration.
    pub config: Config,
    /// The resolved resources.
    pub resources: Vec<Resource>,
    /// Their states, in the same order.
    pub states: Vec<Mutex<ResourceState>>,
    /// Wakes the refresh task.
    pub refresh: Notify,
}

impl Shared {
    /// The shared state of `resources`, each advertising nothing yet.
    pub fn new(client: Client, config: Config, resources: Vec<Resource>) -> Arc<Self> {
        let states = resources
            .iter()
            .map(|_| {
                Mutex::new(ResourceState {
                    memory: Memory::default(),
                    tx: watch::channel(Vec::new()).0,
                })
            })
            .collect();
        Arc::new(Shared {
            client,
            config,
            resources,
            states,
            refresh: Notify::new(),
        })
    }

    /// Reads vgpud's objects and capacity once and publishes every resource's listing that
    /// changed.
    pub async fn refresh_now(&self) -> Result<(), vgpud_client::Error> {
        let tree = self.client.tree().await?;
        for (r, state) in self.resources.iter().zip(&self.states) {
            let cap = match r.mode {
                Mode::OnDemand => inventory::capacity(&self.client, &tree, r).await,
                Mode::Pool => Default::default(),
            };
            let mut st = state.lock().await;
            let listing = inventory::listing(r, &tree, &cap, &st.memory);
            let devices = inventory::to_devices(&listing);
            st.memory.last = listing;
            st.tx.send_if_modified(|cur| {
                if *cur == devices {
                    false
                } else {
                    tracing::info!(resource = %r.name, devices = devices.len(),
                        healthy = devices.iter().filter(|d| d.health == "Healthy").count(),
                        "advertising");
                    *cur = devices;
                    true
                }
            });
        }
        Ok(())
    }

    /// The current listing of resource `i`.
    pub async fn listing(&self, i: usize) -> Listing {
        self.states[i].lock().await.memory.last.clone()
    }
}

/// The device plugin service of one resource.
pub struct Plugin {
    /// Shared state.
    pub shared: Arc<Shared>,
    /// Which resource.
    pub index: usize,
}

impl Plugin {
    fn resource(&self) -> &Resource {
        &self.shared.resources[self.index]
    }

    /// One container's devices: made (on demand) or looked up (pool); the vgpud UUID,
    /// address and IOMMU group of each.
    async fn container(
        &self,
        ids: &[String],
    ) -> Result<dp::ContainerAllocateResponse, PluginError> {
        let r = self.resource();
        let listing = self.shared.listing(self.index).await;
        let mut addresses = Vec::new();
        let mut groups = BTreeSet::new();
        for id in ids {
            let uuid = match r.mode {
                Mode::OnDemand => {
                    let n =
                        naming::on_demand_slot(&r.type_id, id, r.max_devices).ok_or_else(|| {
                            PluginError::UnknownId {
                                op: "Allocate",
                                id: id.clone(),
                                resource: r.name.clone(),
                            }
                        })?;
                    let uuid = naming::on_demand_uuid(&r.name, n);
                    let mut opts = Options::new()
                        .str("uuid", uuid.clone())
                        .bool("exist_ok", true)
                        .bool("persistent", false)
                        .str("owner", self.shared.config.owner.clone());
                    if let Some(e) = listing.get(id).filter(|e| e.numa >= 0 && !e.made) {
                        opts = opts.u32("numa_node", e.numa.unsigned_abs());
                    }
                    // A device made for an Allocate that fails later is ours all the same:
                    // reclaimed once no pod holds it.
                    self.shared
                        .client
                        .create_device(&r.type_id, &opts)
                        .await
                        .map_err(|source| PluginError::Vgpud {
                            op: "Allocate",
                            id: id.clone(),
                            uuid: uuid.clone(),
                            source: Box::new(source),
                        })?;
                    self.shared.states[self.index]
                        .lock()
                        .await
                        .memory
                        .allocated
                        .insert(id.clone());
                    uuid
                }
                Mode::Pool => {
                    let e = listing.get(id).ok_or_else(|| PluginError::UnknownId {
                        op: "Allocate",
                        id: id.clone(),
                        resource: r.name.clone(),
                    })?;
                    if !e.healthy {
                        return Err(PluginError::Unusable {
                            op: "Allocate",
                            id: id.clone(),
                            uuid: e.uuid.clone(),
                            why: "unhealthy (gone or inactive)".into(),
                        });
                    }
                    self.shared.states[self.index]
                        .lock()
                        .await
                        .memory
                        .allocated
                        .insert(id.clone());
                    e.uuid.clone()
                }
            };
            let d =
                self.shared
                    .client
                    .device(&uuid)
                    .await
                    .map_err(|source| PluginError::Vgpud {
                        op: "Allocate",
                        id: id.clone(),
                        uuid: uuid.clone(),
                        source: Box::new(source),
                    })?;
            let unusable = |why: &str| PluginError::Unusable {
                op: "Allocate",
                id: id.clone(),
                uuid: uuid.clone(),
                why: why.into(),
            };
            if d.iommu_group < 0 {
                return Err(unusable("no IOMMU group"));
            }
            groups.insert(d.iommu_group);
            match r.kind {
                Kind::Mdev => addresses.push(d.uuid),
                Kind::Pci if d.address.is_empty() => return Err(unusable("no PCI address")),
                Kind::Pci => addresses.push(d.address),
            }
        }
        let mut devices = vec![vfio_spec("/dev/vfio/vfio".into())];
        devices.extend(groups.iter().map(|g| vfio_spec(format!("/dev/vfio/{g}"))));
        Ok(dp::ContainerAllocateResponse {
            envs: [(
                r.env_var(),
                naming::env_value(addresses.iter().map(String::as_str)),
            )]
            .into_iter()
            .collect(),
            devices,
            ..Default::default()
        })
    }
}

/// A VFIO node for the container, read-write (and mknod, as KubeVirt's own PCI plugin gives:
/// `"mrw"`, pkg/virt-handler/device-manager/pci_device.go).
fn vfio_spec(path: String) -> dp::DeviceSpec {
    dp::DeviceSpec {
        container_path: path.clone(),
        host_path: path,
        permissions: "mrw".into(),
    }
}

fn check_ids(op: &'static str, ids: &[String]) -> Result<(), PluginError> {
    if ids.len() > MAX_IDS {
        return Err(PluginError::Invalid {
            op,
            why: format!("{} device IDs, at most {MAX_IDS}", ids.len()),
        });
    }
    if let Some(id) = ids.iter().find(|id| id.len() > naming::MAX_ID_LEN) {
        return Err(PluginError::Invalid {
            op,
            why: format!(
                "a device ID of {} bytes, at most {}",
                id.len(),
                naming::MAX_ID_LEN
            ),
        });
    }
    Ok(())
}

fn check_containers(op: &'static str, n: usize) -> Result<(), PluginError> {
    if n > MAX_CONTAINERS {
        return Err(PluginError::Invalid {
            op,
            why: format!("{n} containers, at most {MAX_CONTAINERS}"),
        });
    }
    Ok(())
}

type DeviceStream = Pin<Box<dyn Stream<Item = Result<dp::ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl dp::device_plugin_server::DevicePlugin for Plugin {
    async fn get_device_plugin_options(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<dp::DevicePluginOptions>, Status> {
        Ok(Response::new(options()))
    }

    type ListAndWatchStream = DeviceStream;

    // tonic's API fixes the error type of the stream's items: `Status`.
    #[allow(clippy::result_large_err)]
    async fn list_and_watch(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let rx = self.shared.states[self.index].lock().await.tx.subscribe();
        let stream = tokio_stream::wrappers::WatchStream::new(rx)
            .map(|devices| Ok(dp::ListAndWatchResponse { devices }));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_preferred_allocation(
        &self,
        req: Request<dp::PreferredAllocationRequest>,
    ) -> Result<Response<dp::PreferredAllocationResponse>, Status> {
        const OP: &str = "GetPreferredAllocation";
        let req = req.into_inner();
        check_containers(OP, req.container_requests.len())?;
        let listing = self.shared.listing(self.index).await;
        let mut container_responses = Vec::new();
        for c in &req.container_requests {
            check_ids(OP, &c.available_device_i_ds)?;
            check_ids(OP, &c.must_include_device_i_ds)?;
            let size = usize::try_from(c.allocation_size)
                .map_err(|_| PluginError::Invalid {
                    op: OP,
                    why: format!("allocation size {}", c.allocation_size),
                })?
                .min(MAX_IDS);
            container_responses.push(dp::ContainerPreferredAllocationResponse {
                device_i_ds: inventory::preferred(
                    &listing,
                    &c.available_device_i_ds,
                    &c.must_include_device_i_ds,
                    size,
                ),
            });
        }
        Ok(Response::new(dp::PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        req: Request<dp::AllocateRequest>,
    ) -> Result<Response<dp::AllocateResponse>, Status> {
        let req = req.into_inner();
        check_containers("Allocate", req.container_requests.len())?;
        for c in &req.container_requests {
            check_ids("Allocate", &c.devices_ids)?;
        }
        let mut container_responses = Vec::new();
        let mut result = Ok(());
        for c in &req.container_requests {
            match self.container(&c.devices_ids).await {
                Ok(r) => container_responses.push(r),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        // "The Device plugin should send a ListAndWatch update and fail the Allocation
        // request" (api.proto): the listing follows what was made or refused.
        self.shared.refresh.notify_one();
        if let Err(e) = result {
            tracing::warn!(resource = %self.resource().name, error = %e, "Allocate refused");
            return Err(e.into());
        }
        Ok(Response::new(dp::AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<dp::PreStartContainerRequest>,
    ) -> Result<Response<dp::PreStartContainerResponse>, Status> {
        Ok(Response::new(dp::PreStartContainerResponse {}))
    }
}

/// The options registered and answered: no PreStartContainer, GetPreferredAllocation yes.
pub fn options() -> dp::DevicePluginOptions {
    dp::DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    }
}
