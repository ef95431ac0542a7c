//! `org.vgpud1.Manager` at `/org/vgpud1`. Each method checks its options, hands the work to
//! the engine on the blocking pool, and publishes the result: objects, signals, properties.

use std::sync::Arc;

use zbus::object_server::SignalEmitter;
use zbus::{interface, Connection, ObjectPath, ObjectServer, OwnedObjectPath};

use super::error::{Error, Result};
use super::options::{OptionReader, Options};
use super::{export_device, gpu_sriov_changed, paths, unexport_device};
use crate::engine::{CreateRequest, Engine, EngineError, HostdevOptions, ModifyRequest, Policy};
use crate::libvirt::{AttachOptions, Change, LibvirtOps};
use crate::xml;

/// The manager object.
pub struct Manager {
    pub(super) engine: Arc<Engine>,
    pub(super) libvirt: Arc<dyn LibvirtOps>,
}

/// How many engine calls run at once. Calls on different GPUs run in parallel up to this
/// many; more would only make threads fight over the CPU and the disk under a storm (a
/// thousand calls would otherwise be a thousand threads). Waiting calls queue in arrival
/// order (the semaphore is fair), which keeps first come, first served.
const ENGINE_CALLS: usize = 16;

/// Runs engine work on the blocking pool: sysfs writes block, and calls on different GPUs
/// must run in parallel.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::result::Result<T, EngineError> + Send + 'static,
) -> Result<T> {
    static SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(ENGINE_CALLS);
    let _slot = SLOTS
        .acquire()
        .await
        .map_err(|e| Error::Failed(format!("internal: {e}")))?;
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(Error::from),
        Err(e) => Err(Error::Failed(format!("internal task failed: {e}"))),
    }
}

impl Manager {
    /// AttachDevice and DetachDevice: on the blocking pool (libvirt calls block), then the
    /// device's Owner changes.
    async fn attachment(
        &self,
        change: Change,
        uuid: String,
        domain: String,
        options: Options,
        server: &ObjectServer,
    ) -> Result<()> {
        let method = match change {
            Change::Attach => "AttachDevice",
            Change::Detach => "DetachDevice",
        };
        let opts = attach_options(method, options)?;
        let (engine, libvirt) = (self.engine.clone(), self.libvirt.clone());
        let task = tokio::task::spawn_blocking(move || {
            crate::libvirt::change(&engine, &*libvirt, &uuid, &domain, opts, change)
        });
        let info = match task.await {
            Ok(r) => r.map_err(Error::from)?,
            Err(e) => return Err(Error::Failed(format!("internal task failed: {e}"))),
        };
        super::device_changed(server, &info.uuid).await;
        Ok(())
    }
}

const CREATE_OPTIONS: &[&str] = &[
    "parent",
    "uuid",
    "owner",
    "params",
    "persistent",
    "autostart",
    "force",
    "policy",
    "numa_node",
];
const CAPACITY_OPTIONS: &[&str] = &["parent", "numa_node"];
const MODIFY_OPTIONS: &[&str] = &["persistent", "autostart"];
const VF_COUNT_OPTIONS: &[&str] = &["persistent"];
const ATTACH_OPTIONS: &[&str] = &["live", "config"];
const RENDER_OPTIONS: &[&str] = &[
    "template",
    "uuid",
    "memory_mib",
    "vcpus",
    "disk",
    "network",
    "uefi",
    "graphics",
    "display",
];

/// The domain's hostdevs of one device: an mdev; the VF of an SR-IOV vGPU (unmanaged: it
/// stays on the NVIDIA driver); every function of a passthrough device (unmanaged: vgpud
/// bound them to vfio-pci), the function asked for first.
fn domain_devices(
    dev: crate::engine::DeviceInfo,
    display: bool,
) -> std::result::Result<Vec<xml::DomainDevice>, EngineError> {
    use crate::model::DeviceKind;
    let pci = |address: String, dev: &crate::engine::DeviceInfo| xml::DomainDevice::Pci {
        uuid: dev.uuid.clone(),
        address,
        managed: false,
        type_id: dev.type_id.clone(),
        parent: dev.parent.clone(),
    };
    match dev.kind {
        DeviceKind::Mdev => Ok(vec![xml::DomainDevice::Mdev {
            uuid: dev.uuid,
            type_id: dev.type_id,
            type_name: dev.type_name,
            parent: dev.parent,
            display,
        }]),
        DeviceKind::SriovVgpu => Ok(vec![pci(dev.held_vf()?, &dev)]),
        DeviceKind::Passthrough => Ok(dev
            .passthrough_functions()
            .into_iter()
            .map(|a| pci(a, &dev))
            .collect()),
    }
}

/// The "policy" option: "pack" or "spread".
fn policy_option(opts: &mut OptionReader) -> Result<Option<Policy>> {
    match opts.string("policy")? {
        Some(p) => Ok(Some(Policy::parse(&p)?)),
        None => Ok(None),
    }
}

/// The "numa_node" option (u).
fn numa_option(opts: &mut OptionReader, method: &str) -> Result<Option<u32>> {
    match opts.unsigned("numa_node")? {
        Some(n) => u32::try_from(n).map(Some).map_err(|_| {
            Error::InvalidArgument(format!(
                "option \"numa_node\" of {method} is {n}, too large"
            ))
        }),
        None => Ok(None),
    }
}

fn attach_options(method: &'static str, options: Options) -> Result<AttachOptions> {
    let mut opts = OptionReader::new(method, options);
    let parsed = AttachOptions {
        live: opts.boolean("live")?,
        config: opts.boolean("config")?,
    };
    opts.finish(ATTACH_OPTIONS)?;
    Ok(parsed)
}
const HOSTDEV_OPTIONS: &[&str] = &["display", "ramfb", "guest_bus"];

#[interface(name = "org.vgpud1.Manager")]
impl Manager {
    /// Every GPU: PCI address, model name, driver, sharing modes offered (comma-separated),
    /// object path.
    #[zbus(out_args("gpus"))]
    async fn list_gpus(&self) -> Vec<(String, String, String, String, OwnedObjectPath)> {
        self.engine
            .list_gpus()
            .into_iter()
            .map(|g| {
                let modes: Vec<String> = g.sharing_modes.iter().map(|m| m.to_string()).collect();
                let path = paths::gpu_path(&g.address);
                (g.address, g.model, g.driver, modes.join(","), path)
            })
            .collect()
    }

    /// Every type of every GPU: parent address, type id, type name, framebuffer in bytes (0 if
    /// unknown), max instances (0 if unknown), available instances now.
    #[zbus(out_args("types"))]
    async fn list_types(&self) -> Result<Vec<(String, String, String, u64, u32, u32)>> {
        let engine = self.engine.clone();
        let types = blocking(move || engine.list_types()).await?;
        Ok(types
            .into_iter()
            .map(|(parent, t)| {
                let fb = t.framebuffer_bytes();
                let max = t.max_instances();
                (parent, t.id, t.name, fb, max, t.available_instances)
            })
            .collect())
    }

    /// Every device, also those created or defined by other tools, active or not: uuid,
    /// parent address, type id, owner tag, object path. Each Device object says whether it is
    /// Active, Persistent and Autostart.
    #[zbus(out_args("devices"))]
    async fn list_devices(
        &self,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<Vec<(String, String, String, String, OwnedObjectPath)>> {
        let engine = self.engine.clone();
        // Devices made or removed by other tools show up here at once, yet a storm of list
        // calls costs at most one look at the host per 100 ms.
        let changes =
            blocking(move || engine.poll_if_older(std::time::Duration::from_millis(100))).await?;
        super::publish(conn, &self.engine, changes).await;
        Ok(self
            .engine
            .list_devices()
            .into_iter()
            .map(|d| {
                let path = paths::device_path(&d.uuid);
                (d.uuid, d.parent, d.type_id, d.owner, path)
            })
            .collect())
    }

    /// Creates a device of `type` (an id, a name, or a name without the vendor prefix, any
    /// case). Options: "parent" (s) pins the GPU, "uuid" (s) asks for a UUID, "owner" (s) a
    /// free tag, "params" (s) NVIDIA `vgpu_params`, "persistent" (b, default true) keeps an
    /// mdevctl definition so the device survives reboots, "autostart" (b, default: as
    /// persistent) starts it whenever its GPU appears.
    #[zbus(out_args("uuid", "path"))]
    async fn create_device(
        &self,
        r#type: String,
        options: Options,
        #[zbus(object_server)] server: &ObjectServer,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<(String, OwnedObjectPath)> {
        let mut opts = OptionReader::new("CreateDevice", options);
        let persistent = opts.boolean("persistent")?.unwrap_or(true);
        let req = CreateRequest {
            type_query: r#type,
            parent: opts.string("parent")?,
            uuid: opts.string("uuid")?,
            owner: opts.string("owner")?.unwrap_or_default(),
            params: opts.string("params")?,
            persistent,
            autostart: opts.boolean("autostart")?.unwrap_or(persistent),
            force: opts.boolean("force")?.unwrap_or(false),
            policy: policy_option(&mut opts)?,
            numa_node: numa_option(&mut opts, "CreateDevice")?,
        };
        opts.finish(CREATE_OPTIONS)?;
        let engine = self.engine.clone();
        let info = blocking(move || engine.create_device(&req)).await?;
        let path = export_device(server, &self.engine, &info).await?;
        Manager::device_created(&emitter, &info.uuid, path.as_ref()).await?;
        Ok((info.uuid, path))
    }

    /// How many more devices of a type the host can take now under the vendors' rules, so a
    /// broker can plan a storm before it starts. Options: "parent" (s) counts one GPU,
    /// "numa_node" (u) the GPUs on one NUMA node.
    #[zbus(out_args("count"))]
    async fn get_capacity(&self, r#type: String, options: Options) -> Result<u32> {
        let mut opts = OptionReader::new("GetCapacity", options);
        let req = CreateRequest {
            type_query: r#type,
            parent: opts.string("parent")?,
            numa_node: numa_option(&mut opts, "GetCapacity")?,
            persistent: false,
            autostart: false,
            ..CreateRequest::default()
        };
        opts.finish(CAPACITY_OPTIONS)?;
        req.validate().map_err(Error::from)?;
        let engine = self.engine.clone();
        blocking(move || engine.capacity(&req)).await
    }

    /// Removes a device by UUID: stops it if active and deletes its definition and record.
    /// No options are defined yet.
    async fn remove_device(
        &self,
        uuid: String,
        options: Options,
        #[zbus(object_server)] server: &ObjectServer,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<()> {
        OptionReader::new("RemoveDevice", options).finish(&[])?;
        let engine = self.engine.clone();
        let info = blocking(move || engine.remove_device(&uuid)).await?;
        let path = unexport_device(server, &info).await?;
        Manager::device_removed(&emitter, &info.uuid, path.as_ref()).await?;
        Ok(())
    }

    /// Changes how a device persists. Options: "persistent" (b) writes or drops its mdevctl
    /// definition, "autostart" (b) whether it starts whenever its GPU appears.
    async fn modify_device(
        &self,
        uuid: String,
        options: Options,
        #[zbus(object_server)] server: &ObjectServer,
    ) -> Result<()> {
        let mut opts = OptionReader::new("ModifyDevice", options);
        let req = ModifyRequest {
            persistent: opts.boolean("persistent")?,
            autostart: opts.boolean("autostart")?,
        };
        opts.finish(MODIFY_OPTIONS)?;
        let engine = self.engine.clone();
        let info = blocking(move || engine.modify_device(&uuid, &req)).await?;
        super::device_changed(server, &info.uuid).await;
        Ok(())
    }

    /// Starts a defined device that is not active, from its definition. No options yet.
    async fn start_device(
        &self,
        uuid: String,
        options: Options,
        #[zbus(object_server)] server: &ObjectServer,
    ) -> Result<()> {
        OptionReader::new("StartDevice", options).finish(&[])?;
        let engine = self.engine.clone();
        let info = blocking(move || engine.start_device(&uuid)).await?;
        super::device_changed(server, &info.uuid).await;
        super::gpu_devices_changed(server, &info.parent).await;
        Ok(())
    }

    /// Stops an active device and keeps its definition (a device without one is removed).
    /// No options yet.
    async fn stop_device(
        &self,
        uuid: String,
        options: Options,
        #[zbus(object_server)] server: &ObjectServer,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<()> {
        OptionReader::new("StopDevice", options).finish(&[])?;
        let engine = self.engine.clone();
        let info = blocking(move || engine.stop_device(&uuid)).await?;
        if info.persistent {
            super::device_changed(server, &info.uuid).await;
        } else {
            let path = unexport_device(server, &info).await?;
            Manager::device_removed(&emitter, &info.uuid, path.as_ref()).await?;
        }
        Ok(())
    }

    /// Attaches a device to a libvirt domain; the device's owner becomes the domain. A
    /// device owned by another domain is refused. Options: "live" (b) and "config" (b),
    /// by default whatever the domain's state allows.
    async fn attach_device(
        &self,
        uuid: String,
        domain: String,
        options: Options,
        #[zbus(object_server)] server: &ObjectServer,
    ) -> Result<()> {
        self.attachment(Change::Attach, uuid, domain, options, server)
            .await
    }

    /// Detaches a device from the libvirt domain that owns it; the device is then free.
    /// Options as AttachDevice.
    async fn detach_device(
        &self,
        uuid: String,
        domain: String,
        options: Options,
        #[zbus(object_server)] server: &ObjectServer,
    ) -> Result<()> {
        self.attachment(Change::Detach, uuid, domain, options, server)
            .await
    }

    /// A complete VDI domain for the devices `uuids` (the first drives the display), from a
    /// template. Options: "template" (s, default "vdi"; user templates live in
    /// etc/vgpud/templates/NAME.xml), "uuid" (s) the domain UUID, "memory_mib" (u or t,
    /// default 4096), "vcpus" (u, default 2), "disk" (s) an image path, "network" (s) a
    /// libvirt network, "uefi" (b), "graphics" (s: "vnc" or "spice", default "vnc"),
    /// "display" (b, default true) whether the first vGPU drives the display.
    #[zbus(out_args("xml"))]
    async fn render_domain(
        &self,
        name: String,
        uuids: Vec<String>,
        options: Options,
    ) -> Result<String> {
        let mut opts = OptionReader::new("RenderDomain", options);
        let template = opts.string("template")?.unwrap_or_else(|| "vdi".into());
        let graphics = match opts.string("graphics")?.as_deref() {
            None | Some("vnc") => xml::Graphics::Vnc,
            Some("spice") => xml::Graphics::Spice,
            Some(other) => {
                return Err(Error::InvalidArgument(format!(
                    "graphics {:?} is neither \"vnc\" nor \"spice\"",
                    other.chars().take(32).collect::<String>()
                )))
            }
        };
        let display = opts.boolean("display")?.unwrap_or(true);
        let memory_mib = opts.unsigned("memory_mib")?.unwrap_or(4096);
        let vcpus = u32::try_from(opts.unsigned("vcpus")?.unwrap_or(2))
            .map_err(|_| Error::InvalidArgument("vcpus is too large".into()))?;
        let domain = xml::VdiDomain {
            name,
            uuid: opts.string("uuid")?,
            memory_mib,
            vcpus,
            disk: opts.string("disk")?,
            network: opts.string("network")?,
            uefi: opts.boolean("uefi")?.unwrap_or(false),
            graphics,
            devices: Vec::new(),
        };
        opts.finish(RENDER_OPTIONS)?;
        let engine = self.engine.clone();
        blocking(move || {
            let mut domain = domain;
            for (i, uuid) in uuids.iter().enumerate() {
                let uuid = crate::engine::parse_uuid(uuid)?;
                let dev = engine.device(&uuid).ok_or_else(|| {
                    EngineError::NotFound(format!("no device {uuid} on this host"))
                })?;
                domain
                    .devices
                    .extend(domain_devices(dev, display && i == 0)?);
            }
            let store = xml::TemplateStore::new(Some(engine.host().etc("vgpud/templates")));
            xml::render_domain(&store, &template, &domain).map_err(|e| match e {
                xml::XmlError::UnknownTemplate { .. } => EngineError::NotFound(e.to_string()),
                xml::XmlError::Template { .. }
                | xml::XmlError::TemplateFile { .. }
                | xml::XmlError::UnknownVariable { .. }
                | xml::XmlError::UnsupportedName { .. }
                | xml::XmlError::UnknownInsert { .. }
                | xml::XmlError::Fragment { .. }
                | xml::XmlError::Write { .. } => EngineError::Xml {
                    uuid: domain.name.clone(),
                    message: e.to_string(),
                },
                other => EngineError::InvalidArgument(other.to_string()),
            })
        })
        .await
    }

    /// Enables `count` SR-IOV virtual functions on GPU `gpu` (0 disables them) and returns how
    /// many are enabled now. NVIDIA GPUs go through NVIDIA's `sriov-manage` (all VFs or
    /// none); others through `sriov_numvfs` with the kernel's rules. Options: "persistent" (b,
    /// default true) sets the count again at boot, before any device is restored.
    #[zbus(out_args("num_vfs"))]
    async fn set_vf_count(
        &self,
        gpu: String,
        count: u32,
        options: Options,
        #[zbus(object_server)] server: &ObjectServer,
    ) -> Result<u32> {
        let mut opts = OptionReader::new("SetVfCount", options);
        let persistent = opts.boolean("persistent")?.unwrap_or(true);
        opts.finish(VF_COUNT_OPTIONS)?;
        let engine = self.engine.clone();
        let address = gpu.clone();
        let now = blocking(move || engine.set_vf_count(&address, count, persistent)).await?;
        gpu_sriov_changed(server, &gpu).await;
        Ok(now)
    }

    /// Turns NVIDIA's heterogeneous (mixed-size) vGPU mode of GPU `gpu` on or off (`nvidia-smi
    /// vgpu -shm`): vGPUs of different framebuffer sizes on one GPU, each at a placement, with
    /// the lower maxima of that mode. The GPU must have its VFs enabled and run no vGPU.
    /// Options: "persistent" (b, default true) sets it again at boot, after the VFs and before
    /// any vGPU.
    async fn set_heterogeneous_mode(
        &self,
        gpu: String,
        enabled: bool,
        options: Options,
        #[zbus(object_server)] server: &ObjectServer,
    ) -> Result<()> {
        let mut opts = OptionReader::new("SetHeterogeneousMode", options);
        let persistent = opts.boolean("persistent")?.unwrap_or(true);
        opts.finish(VF_COUNT_OPTIONS)?;
        let engine = self.engine.clone();
        let address = gpu.clone();
        blocking(move || engine.set_heterogeneous(&address, enabled, persistent)).await?;
        gpu_sriov_changed(server, &gpu).await;
        Ok(())
    }

    /// The libvirt `<hostdev>` element for a device.
    #[zbus(out_args("xml"))]
    async fn get_hostdev_xml(&self, uuid: String) -> Result<String> {
        self.engine
            .hostdev_xml(&uuid, &HostdevOptions::default())
            .map_err(Error::from)
    }

    /// The libvirt `<hostdev>` element with options: "display" (b) and "ramfb" (b) for
    /// mdevs; "guest_bus" (u) for the guest PCI bus of a passthrough device's functions
    /// (default 1 for a multi-function device). A passthrough device of several functions
    /// gives one `<hostdev>` per function, one after the other.
    #[zbus(out_args("xml"))]
    async fn render_hostdev_xml(&self, uuid: String, options: Options) -> Result<String> {
        let mut opts = OptionReader::new("RenderHostdevXml", options);
        let guest_bus = match opts.unsigned("guest_bus")? {
            Some(b) => Some(u8::try_from(b).map_err(|_| {
                Error::InvalidArgument(format!(
                    "option \"guest_bus\" of RenderHostdevXml is {b}; a PCI bus is 0 to 255"
                ))
            })?),
            None => None,
        };
        let hostdev = HostdevOptions {
            display: opts.boolean("display")?,
            ramfb: opts.boolean("ramfb")?,
            guest_bus,
        };
        opts.finish(HOSTDEV_OPTIONS)?;
        self.engine
            .hostdev_xml(&uuid, &hostdev)
            .map_err(Error::from)
    }

    /// vgpud's version.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    /// Whether the kernel side effects are simulated (`--simulate`).
    #[zbus(property(emits_changed_signal = "const"))]
    async fn simulated(&self) -> bool {
        self.engine.host().is_simulated()
    }

    /// A device was created (by vgpud, or found created by another tool).
    #[zbus(signal)]
    pub(super) async fn device_created(
        emitter: &SignalEmitter<'_>,
        uuid: &str,
        path: ObjectPath<'_>,
    ) -> zbus::Result<()>;

    /// Something happened to a device behind vgpud's back: `event` is
    /// `removed-externally`, `stopped-externally`, `repaired`, `repair-failed` or `adopted`.
    #[zbus(signal)]
    pub(super) async fn device_drift(
        emitter: &SignalEmitter<'_>,
        uuid: &str,
        event: &str,
        detail: &str,
    ) -> zbus::Result<()>;

    /// A device was removed (by vgpud, or found gone).
    #[zbus(signal)]
    pub(super) async fn device_removed(
        emitter: &SignalEmitter<'_>,
        uuid: &str,
        path: ObjectPath<'_>,
    ) -> zbus::Result<()>;
}
