//! `org.vgpud1.Manager` at `/org/vgpud1`. Each method checks its options, hands the work to
//! the engine on the blocking pool, and publishes the result: objects, signals, properties.

use std::collections::HashMap;
use std::sync::Arc;

use zbus::message::Header;
use zbus::object_server::SignalEmitter;
use zbus::{interface, ObjectPath, OwnedObjectPath, OwnedVariant, Variant};

use super::access::{self, Access};
use super::limits;

use super::error::{Error, Result};
use super::options::{OptionReader, Options};
use super::{paths, Publisher};
use crate::engine::{
    with_cause, Cause, CreateRequest, Engine, EngineError, HostdevOptions, ModifyRequest, Policy,
    TypeInfo,
};
use crate::libvirt::{AttachOptions, Change, LibvirtOps};
use crate::metrics::cpu::{measure, Part::EngineCalls};
use crate::xml;

/// The manager object.
pub struct Manager {
    pub(super) engine: Arc<Engine>,
    pub(super) libvirt: Arc<dyn LibvirtOps>,
    pub(super) publisher: Arc<Publisher>,
    pub(super) access: Arc<Access>,
}

/// How many engine calls run at once. Calls on different GPUs run in parallel up to this
/// many; more would only make threads fight over the CPU and the disk under a storm (a
/// thousand calls would otherwise be a thousand threads). Waiting calls queue in arrival
/// order (the semaphore is fair), which keeps first come, first served.
const ENGINE_CALLS: usize = 16;

/// Runs engine work on the blocking pool: sysfs writes block, and calls on different GPUs
/// must run in parallel.
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::result::Result<T, EngineError> + Send + 'static,
) -> Result<T> {
    static SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(ENGINE_CALLS);
    let mut place = crate::metrics::QueuePlace::wait();
    let _slot = SLOTS
        .acquire()
        .await
        .map_err(|e| Error::Failed(format!("internal: {e}")))?;
    place.run();
    match tokio::task::spawn_blocking(move || measure(EngineCalls, f)).await {
        Ok(r) => r.map_err(Error::from),
        Err(e) => Err(Error::Failed(format!("internal task failed: {e}"))),
    }
}

impl Manager {
    /// Runs one call of `method`, counting it in the metrics by its outcome (the D-Bus
    /// error name, or ok) with its latency.
    pub(super) async fn track<T>(
        &self,
        method: &'static str,
        call: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let started = std::time::Instant::now();
        let result = call.await;
        crate::metrics::counters().call(
            method,
            result.as_ref().err().map(|e| e.name()),
            started.elapsed().as_secs_f64(),
        );
        result
    }

    /// The one door of every method: the arguments are within their size limits (checked
    /// first, before anything else is done for the call), then the caller must hold the
    /// method's polkit action. (The call holds a slot of its caller's calls in flight from
    /// before it got here: [`access::dispatch_limit`].)
    pub(super) async fn admit(
        &self,
        header: &Header<'_>,
        method: &'static str,
        strings: &[(&str, &str, usize)],
        options: Option<&Options>,
    ) -> Result<Cause> {
        for (what, value, max) in strings {
            limits::string(method, what, value, *max)?;
        }
        if let Some(o) = options {
            limits::options(method, o)?;
        }
        let caller = self.access.caller(header).await;
        let admitted = self.access.admit(header, &caller, method).await;
        let cause = Cause {
            method: method.to_string(),
            uid: caller.uid,
            pid: caller.pid,
            unit: caller.unit,
        };
        if let Err(e) = &admitted {
            if access::action_of(method) != access::Action::Read {
                crate::audit::refused(&cause, "", e.name(), &e.message());
            }
        }
        admitted.map(|_| cause)
    }

    /// Runs engine work that changes state, then publishes what it changed before the reply
    /// goes out (also when it failed part-way), so a client that has the reply finds the
    /// objects as they are and has been sent their signals.
    /// The events it sends carry `cause`; a failure is logged in the audit log with `what`
    /// (the device or GPU the call was about).
    pub(super) async fn changing<T: Send + 'static>(
        &self,
        cause: Cause,
        what: &str,
        f: impl FnOnce() -> std::result::Result<T, EngineError> + Send + 'static,
    ) -> Result<T> {
        let audit = cause.clone();
        let engine = self.engine.clone();
        let result = blocking(move || with_cause(cause, || engine.events().batch(f))).await;
        self.publisher.catch_up().await;
        if let Err(e) = &result {
            crate::audit::refused(&audit, what, e.name(), &e.message());
        }
        result
    }

    /// AttachDevice and DetachDevice: on the blocking pool (libvirt calls block), then the
    /// device's Owner changes.
    async fn attachment(
        &self,
        cause: Cause,
        change: Change,
        uuid: String,
        domain: String,
        options: Options,
    ) -> Result<()> {
        let method = match change {
            Change::Attach => "AttachDevice",
            Change::Detach => "DetachDevice",
        };
        let opts = attach_options(method, options)?;
        let (engine, libvirt) = (self.engine.clone(), self.libvirt.clone());
        let audit = cause.clone();
        let device = uuid.clone();
        let task = tokio::task::spawn_blocking(move || {
            measure(EngineCalls, || {
                with_cause(cause, || {
                    crate::libvirt::change(&engine, &*libvirt, &uuid, &domain, opts, change)
                })
            })
        });
        let result = match task.await {
            Ok(r) => r.map(|_| ()).map_err(Error::from),
            Err(e) => Err(Error::Failed(format!("internal task failed: {e}"))),
        };
        self.publisher.catch_up().await;
        if let Err(e) = &result {
            crate::audit::refused(&audit, &device, e.name(), &e.message());
        }
        result
    }
}

const CREATE_OPTIONS: &[&str] = &[
    "create_instance",
    "parent",
    "uuid",
    "owner",
    "params",
    "persistent",
    "autostart",
    "force",
    "policy",
    "numa_node",
    "exist_ok",
    "lease_s",
    "pool",
];
const CAPACITY_OPTIONS: &[&str] = &["parent", "numa_node"];
const TYPE_INFO_OPTIONS: &[&str] = &["parent"];
const DEMAND_OPTIONS: &[&str] = &["from", "to", "step"];
const FORECAST_OPTIONS: &[&str] = &["hours"];
const MODIFY_OPTIONS: &[&str] = &["persistent", "autostart"];
const VF_COUNT_OPTIONS: &[&str] = &["persistent", "force"];
const PERSISTENT_OPTIONS: &[&str] = &["persistent"];

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

/// The "policy" option: "pack", "spread" or "least-busy".
fn policy_option(opts: &mut OptionReader) -> Result<Option<Policy>> {
    match opts.string("policy")? {
        Some(p) => Ok(Some(Policy::parse(&p)?)),
        None => Ok(None),
    }
}

/// The "numa_node" option (any integer type).
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
    /// Every GPU: address, model, driver, sharing modes (comma-separated), object.
    #[zbus(out_args("gpus"))]
    async fn list_gpus(
        &self,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<(String, String, String, String, OwnedObjectPath)>> {
        self.track("ListGpus", async {
            self.admit(&header, "ListGpus", &[], None).await?;
            Ok(self
                .engine
                .list_gpus()
                .into_iter()
                .map(|g| {
                    let modes: Vec<String> =
                        g.sharing_modes.iter().map(|m| m.to_string()).collect();
                    let path = paths::gpu_path(&g.address);
                    (g.address, g.model, g.driver, modes.join(","), path)
                })
                .collect())
        })
        .await
    }

    /// Every type of every GPU: GPU, id, name, framebuffer bytes, max and available now.
    #[zbus(out_args("types"))]
    async fn list_types(
        &self,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<(String, String, String, u64, u32, u32)>> {
        self.track("ListTypes", async {
            self.admit(&header, "ListTypes", &[], None).await?;
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
        })
        .await
    }

    /// Every device, also other tools' (active or defined): uuid, GPU, type, owner, object.
    #[zbus(out_args("devices"))]
    async fn list_devices(
        &self,
        #[zbus(header)] header: Header<'_>,
    ) -> Result<Vec<(String, String, String, String, OwnedObjectPath)>> {
        self.track("ListDevices", async {
            self.admit(&header, "ListDevices", &[], None).await?;
            // From memory: devices made or removed by other tools are known from their
            // uevents (see `daemon::uevents`), never looked for here.
            self.publisher.catch_up().await;
            Ok(self
                .engine
                .list_devices()
                .into_iter()
                .map(|d| {
                    let path = paths::device_path(&d.uuid);
                    (d.uuid, d.parent, d.type_id, d.owner, path)
                })
                .collect())
        })
        .await
    }

    /// Makes a device of a type (id or name). Options: parent, uuid, owner, params,
    /// persistent, autostart, force, policy, numa_node, exist_ok, create_instance, lease_s,
    /// pool (hand out one of its spares when it has one).
    #[zbus(out_args("uuid", "path"))]
    async fn create_device(
        &self,
        #[zbus(header)] header: Header<'_>,
        r#type: String,
        options: Options,
    ) -> Result<(String, OwnedObjectPath)> {
        self.track("CreateDevice", async {
            let cause = self
                .admit(
                    &header,
                    "CreateDevice",
                    &[("type", &r#type, limits::NAME)],
                    Some(&options),
                )
                .await?;
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
                exist_ok: opts.boolean("exist_ok")?.unwrap_or(false),
                create_instance: opts.boolean("create_instance")?.unwrap_or(true),
                lease_s: opts.unsigned("lease_s")?,
                pool: opts.string("pool")?,
                stocking_pool: false,
            };
            opts.finish(CREATE_OPTIONS)?;
            let engine = self.engine.clone();
            let info = self
                .changing(cause, "", move || engine.create_device(&req))
                .await?;
            let path = paths::device_path(&info.uuid);
            Ok((info.uuid, path))
        })
        .await
    }

    /// How many more of a type fit now. Options: parent, numa_node.
    #[zbus(out_args("count"))]
    async fn get_capacity(
        &self,
        #[zbus(header)] header: Header<'_>,
        r#type: String,
        options: Options,
    ) -> Result<u32> {
        self.track("GetCapacity", async {
            self.admit(
                &header,
                "GetCapacity",
                &[("type", &r#type, limits::NAME)],
                Some(&options),
            )
            .await?;
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
        })
        .await
    }

    /// A type's demand per step: start, requests, warm, cold, refused, released. Options:
    /// from, to, step.
    #[zbus(out_args("rows"))]
    async fn get_demand(
        &self,
        #[zbus(header)] header: Header<'_>,
        r#type: String,
        options: Options,
    ) -> Result<Vec<(u64, u32, u32, u32, u32, u32)>> {
        self.track("GetDemand", async {
            self.admit(
                &header,
                "GetDemand",
                &[("type", &r#type, limits::NAME)],
                Some(&options),
            )
            .await?;
            let mut opts = OptionReader::new("GetDemand", options);
            let now = crate::persist::now_unix();
            let to = opts.unsigned("to")?.unwrap_or(now);
            let from = opts
                .unsigned("from")?
                .unwrap_or_else(|| to.saturating_sub(7 * 24 * 3600));
            let step = opts.unsigned("step")?.unwrap_or(3600);
            opts.finish(DEMAND_OPTIONS)?;
            let engine = self.engine.clone();
            let (_, rows) = blocking(move || engine.demand_of(&r#type, from, to, step)).await?;
            Ok(rows
                .into_iter()
                .map(|(at, c)| (at, c.requests, c.warm, c.cold, c.refused, c.released))
                .collect())
        })
        .await
    }

    /// A type's forecast of requests per hour: the last week (start, forecast, actual), the
    /// hours ahead (start, forecast), the error and the refill's lead time the forecast
    /// pools are sized for. Option: hours.
    #[zbus(out_args("last_week", "ahead", "error"))]
    async fn get_forecast(
        &self,
        #[zbus(header)] header: Header<'_>,
        r#type: String,
        options: Options,
    ) -> Result<(
        Vec<(u64, f64, f64)>,
        Vec<(u64, f64)>,
        HashMap<String, OwnedVariant>,
    )> {
        self.track("GetForecast", async {
            self.admit(
                &header,
                "GetForecast",
                &[("type", &r#type, limits::NAME)],
                Some(&options),
            )
            .await?;
            let mut opts = OptionReader::new("GetForecast", options);
            let hours = opts.unsigned("hours")?.unwrap_or(24);
            opts.finish(FORECAST_OPTIONS)?;
            let engine = self.engine.clone();
            let now = crate::persist::now_unix();
            let view = blocking(move || engine.forecast_of(&r#type, now, hours)).await?;
            let a = view.accuracy;
            let mut error: HashMap<String, OwnedVariant> = HashMap::new();
            error.insert(
                "mean_abs_error".into(),
                OwnedVariant::from(a.mean_abs_error),
            );
            error.insert("requests".into(), OwnedVariant::from(a.actual));
            error.insert("hours".into(), OwnedVariant::from(a.hours as u32));
            if let Some(r) = a.relative {
                error.insert("relative_error".into(), OwnedVariant::from(r));
            }
            if let Some(lead) = self.engine.hand_outs().lead() {
                error.insert(
                    "refill_lead_s".into(),
                    OwnedVariant::from(lead.as_secs_f64()),
                );
            }
            Ok((view.last_week, view.ahead, error))
        })
        .await
    }

    /// A type's details (description, framebuffer, heads, class, placements...). Option: parent.
    #[zbus(out_args("info"))]
    async fn get_type_info(
        &self,
        #[zbus(header)] header: Header<'_>,
        r#type: String,
        options: Options,
    ) -> Result<HashMap<String, OwnedVariant>> {
        self.track("GetTypeInfo", async {
            self.admit(
                &header,
                "GetTypeInfo",
                &[("type", &r#type, limits::NAME)],
                Some(&options),
            )
            .await?;
            let mut opts = OptionReader::new("GetTypeInfo", options);
            let req = CreateRequest {
                type_query: r#type,
                parent: opts.string("parent")?,
                ..CreateRequest::default()
            };
            opts.finish(TYPE_INFO_OPTIONS)?;
            req.validate().map_err(Error::from)?;
            let engine = self.engine.clone();
            let info = blocking(move || engine.type_info(&req)).await?;
            type_info_dict(&info)
        })
        .await
    }

    /// Stops a device and deletes its definition and record.
    async fn remove_device(
        &self,
        #[zbus(header)] header: Header<'_>,
        uuid: String,
        options: Options,
    ) -> Result<()> {
        self.track("RemoveDevice", async {
            let cause = self
                .admit(
                    &header,
                    "RemoveDevice",
                    &[("uuid", &uuid, limits::UUID)],
                    Some(&options),
                )
                .await?;
            OptionReader::new("RemoveDevice", options).finish(&[])?;
            let engine = self.engine.clone();
            self.changing(cause, &uuid.clone(), move || engine.remove_device(&uuid))
                .await
                .map(drop)
        })
        .await
    }

    /// Options: persistent (b), autostart (b).
    async fn modify_device(
        &self,
        #[zbus(header)] header: Header<'_>,
        uuid: String,
        options: Options,
    ) -> Result<()> {
        self.track("ModifyDevice", async {
            let cause = self
                .admit(
                    &header,
                    "ModifyDevice",
                    &[("uuid", &uuid, limits::UUID)],
                    Some(&options),
                )
                .await?;
            let mut opts = OptionReader::new("ModifyDevice", options);
            let req = ModifyRequest {
                persistent: opts.boolean("persistent")?,
                autostart: opts.boolean("autostart")?,
            };
            opts.finish(MODIFY_OPTIONS)?;
            let engine = self.engine.clone();
            self.changing(cause, &uuid.clone(), move || {
                engine.modify_device(&uuid, &req)
            })
            .await
            .map(drop)
        })
        .await
    }

    /// Starts a defined device from its definition.
    async fn start_device(
        &self,
        #[zbus(header)] header: Header<'_>,
        uuid: String,
        options: Options,
    ) -> Result<()> {
        self.track("StartDevice", async {
            let cause = self
                .admit(
                    &header,
                    "StartDevice",
                    &[("uuid", &uuid, limits::UUID)],
                    Some(&options),
                )
                .await?;
            OptionReader::new("StartDevice", options).finish(&[])?;
            let engine = self.engine.clone();
            self.changing(cause, &uuid.clone(), move || engine.start_device(&uuid))
                .await
                .map(drop)
        })
        .await
    }

    /// Stops a device and keeps its definition (removes a transient one).
    async fn stop_device(
        &self,
        #[zbus(header)] header: Header<'_>,
        uuid: String,
        options: Options,
    ) -> Result<()> {
        self.track("StopDevice", async {
            let cause = self
                .admit(
                    &header,
                    "StopDevice",
                    &[("uuid", &uuid, limits::UUID)],
                    Some(&options),
                )
                .await?;
            OptionReader::new("StopDevice", options).finish(&[])?;
            let engine = self.engine.clone();
            self.changing(cause, &uuid.clone(), move || engine.stop_device(&uuid))
                .await
                .map(drop)
        })
        .await
    }

    /// Attaches a device to a libvirt domain, which becomes its owner. Options: live, config.
    async fn attach_device(
        &self,
        #[zbus(header)] header: Header<'_>,
        uuid: String,
        domain: String,
        options: Options,
    ) -> Result<()> {
        self.track("AttachDevice", async {
            let cause = self
                .admit(
                    &header,
                    "AttachDevice",
                    &[
                        ("uuid", &uuid, limits::UUID),
                        ("domain", &domain, limits::NAME),
                    ],
                    Some(&options),
                )
                .await?;
            self.attachment(cause, Change::Attach, uuid, domain, options)
                .await
        })
        .await
    }

    /// Detaches a device from its domain. Options: live, config.
    async fn detach_device(
        &self,
        #[zbus(header)] header: Header<'_>,
        uuid: String,
        domain: String,
        options: Options,
    ) -> Result<()> {
        self.track("DetachDevice", async {
            let cause = self
                .admit(
                    &header,
                    "DetachDevice",
                    &[
                        ("uuid", &uuid, limits::UUID),
                        ("domain", &domain, limits::NAME),
                    ],
                    Some(&options),
                )
                .await?;
            self.attachment(cause, Change::Detach, uuid, domain, options)
                .await
        })
        .await
    }

    /// A VDI domain for the devices. Options: template, uuid, memory_mib, vcpus, disk,
    /// network, uefi, graphics, display.
    #[zbus(out_args("xml"))]
    async fn render_domain(
        &self,
        #[zbus(header)] header: Header<'_>,
        name: String,
        uuids: Vec<String>,
        options: Options,
    ) -> Result<String> {
        self.track("RenderDomain", async {
            self.admit(
                &header,
                "RenderDomain",
                &[("name", &name, limits::NAME)],
                Some(&options),
            )
            .await?;
            limits::strings("RenderDomain", "uuids", &uuids, limits::UUIDS, limits::UUID)?;
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
        })
        .await
    }

    /// Enables count SR-IOV VFs (0 disables); returns how many are on. Options: persistent;
    /// force (enable the VFs of an NVIDIA GPU also when that destroys its GPU instances).
    #[zbus(out_args("num_vfs"))]
    async fn set_vf_count(
        &self,
        #[zbus(header)] header: Header<'_>,
        gpu: String,
        count: u32,
        options: Options,
    ) -> Result<u32> {
        self.track("SetVfCount", async {
            let cause = self
                .admit(
                    &header,
                    "SetVfCount",
                    &[("gpu", &gpu, limits::NAME)],
                    Some(&options),
                )
                .await?;
            let mut opts = OptionReader::new("SetVfCount", options);
            let persistent = opts.boolean("persistent")?.unwrap_or(true);
            let force = opts.boolean("force")?.unwrap_or(false);
            opts.finish(VF_COUNT_OPTIONS)?;
            let engine = self.engine.clone();
            self.changing(cause, &gpu.clone(), move || {
                engine.set_vf_count_with(&gpu, count, persistent, force)
            })
            .await
        })
        .await
    }

    /// NVIDIA mixed-size vGPU mode on or off. Option: persistent.
    async fn set_heterogeneous_mode(
        &self,
        #[zbus(header)] header: Header<'_>,
        gpu: String,
        enabled: bool,
        options: Options,
    ) -> Result<()> {
        self.track("SetHeterogeneousMode", async {
            let cause = self
                .admit(
                    &header,
                    "SetHeterogeneousMode",
                    &[("gpu", &gpu, limits::NAME)],
                    Some(&options),
                )
                .await?;
            let mut opts = OptionReader::new("SetHeterogeneousMode", options);
            let persistent = opts.boolean("persistent")?.unwrap_or(true);
            opts.finish(PERSISTENT_OPTIONS)?;
            let engine = self.engine.clone();
            self.changing(cause, &gpu.clone(), move || {
                engine.set_heterogeneous(&gpu, enabled, persistent)
            })
            .await
        })
        .await
    }

    /// The device's libvirt hostdev element(s).
    #[zbus(out_args("xml"))]
    async fn get_hostdev_xml(
        &self,
        #[zbus(header)] header: Header<'_>,
        uuid: String,
    ) -> Result<String> {
        self.track("GetHostdevXml", async {
            self.admit(
                &header,
                "GetHostdevXml",
                &[("uuid", &uuid, limits::UUID)],
                None,
            )
            .await?;
            self.engine
                .hostdev_xml(&uuid, &HostdevOptions::default())
                .map_err(Error::from)
        })
        .await
    }

    /// The hostdev element(s) with options: display, ramfb, guest_bus.
    #[zbus(out_args("xml"))]
    async fn render_hostdev_xml(
        &self,
        #[zbus(header)] header: Header<'_>,
        uuid: String,
        options: Options,
    ) -> Result<String> {
        self.track("RenderHostdevXml", async {
            self.admit(
                &header,
                "RenderHostdevXml",
                &[("uuid", &uuid, limits::UUID)],
                Some(&options),
            )
            .await?;
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
        })
        .await
    }

    /// vgpud's version.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    /// Whether the host is simulated.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn simulated(&self) -> bool {
        self.engine.host().is_simulated()
    }

    /// A device appeared (made by vgpud or found).
    #[zbus(signal)]
    pub(super) async fn device_created(
        emitter: &SignalEmitter<'_>,
        uuid: &str,
        path: ObjectPath<'_>,
    ) -> zbus::Result<()>;

    /// A change behind vgpud's back: removed-externally, stopped-externally,
    /// started-externally, repaired, repair-failed or adopted.
    #[zbus(signal)]
    pub(super) async fn device_drift(
        emitter: &SignalEmitter<'_>,
        uuid: &str,
        event: &str,
        detail: &str,
    ) -> zbus::Result<()>;

    /// A device's lease ran out; DeviceRemoved follows.
    #[zbus(signal)]
    pub(super) async fn device_reclaimed(
        emitter: &SignalEmitter<'_>,
        uuid: &str,
        reason: &str,
    ) -> zbus::Result<()>;

    /// A change to a GPU behind vgpud's back: gpu-instance-created-externally or
    /// gpu-instance-destroyed-externally.
    #[zbus(signal)]
    pub(super) async fn gpu_drift(
        emitter: &SignalEmitter<'_>,
        gpu: &str,
        event: &str,
        detail: &str,
    ) -> zbus::Result<()>;

    /// A device is gone.
    #[zbus(signal)]
    pub(super) async fn device_removed(
        emitter: &SignalEmitter<'_>,
        uuid: &str,
        path: ObjectPath<'_>,
    ) -> zbus::Result<()>;
}

/// GetTypeInfo's answer: every field the type has, by name.
fn type_info_dict(info: &TypeInfo) -> Result<HashMap<String, OwnedVariant>> {
    let mut out: Vec<(&str, Variant<'_>)> = vec![
        ("id", info.id.as_str().into()),
        ("name", info.name.as_str().into()),
        ("description", info.description.as_str().into()),
        ("device_api", info.device_api.as_str().into()),
        ("gpus", info.gpus.clone().into()),
        ("available", info.available.into()),
    ];
    let mut put = |key: &'static str, value: Option<Variant<'static>>| {
        if let Some(v) = value {
            out.push((key, v));
        }
    };
    put("framebuffer", info.framebuffer.map(Variant::from));
    put("heads", info.heads.map(Variant::from));
    put(
        "max_resolution",
        info.max_resolution
            .map(|(w, h)| Variant::from(format!("{w}x{h}"))),
    );
    put("frame_rate_limit", info.frame_rate_limit.map(Variant::from));
    put("max_instances", info.max_instances.map(Variant::from));
    put("series", info.series.map(|c| Variant::from(c.to_string())));
    put("class", info.class.map(Variant::from));
    put("license", info.license.map(Variant::from));
    put(
        "placement_size_gib",
        info.placement.map(|(size, _)| Variant::from(size)),
    );
    put("placements", info.placement.map(|(_, n)| Variant::from(n)));
    if let Some(g) = &info.gvtg {
        put("low_gm_mib", g.low_gm_mib.map(Variant::from));
        put("high_gm_mib", g.high_gm_mib.map(Variant::from));
        put("fences", g.fences.map(Variant::from));
        put("weight", g.weight.map(Variant::from));
    }
    owned_dict(out)
}

/// A dictionary answer (`a{sv}`) from named values.
pub(super) fn owned_dict(
    entries: Vec<(&str, Variant<'_>)>,
) -> Result<HashMap<String, OwnedVariant>> {
    entries
        .into_iter()
        .map(|(k, v)| {
            let owned = OwnedVariant::try_from(v)
                .map_err(|e| Error::Failed(format!("internal: encoding {k}: {e}")))?;
            Ok((k.to_string(), owned))
        })
        .collect()
}
