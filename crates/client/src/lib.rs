//! The one client of vgpud's D-Bus API, `org.vgpud1`: raw proxies of every interface
//! ([`proxy`]), typed rows ([`model`]), the errors as an enum ([`Error`]), options
//! ([`Options`]) and the signal stream ([`Event`]). The libvirt hook, the tests, the
//! benchmarks, the real-kernel driver and vgpuctl all use it.

pub mod error;
pub mod model;
pub mod paths;
pub mod proxy;
pub mod tree;

use std::collections::BTreeMap;

use futures_util::StreamExt;
use zbus::{Connection, OwnedObjectPath, Variant};

pub use error::{Error, ErrorClass, Result};
pub use model::*;
pub use proxy::{DeviceProxy, GpuProxy, LayoutsProxy, ManagerProxy, NvidiaProxy, Opts};
pub use tree::Tree;

/// The bus name vgpud owns.
pub const BUS_NAME: &str = "org.vgpud1";

/// An option value of a call's `a{sv}`.
#[derive(Debug, Clone, PartialEq)]
pub enum OptionValue {
    /// `s`
    Str(String),
    /// `b`
    Bool(bool),
    /// `u`
    U32(u32),
    /// `t`
    U64(u64),
    /// `i`
    I32(i32),
}

/// The options of a call (`a{sv}`), built up by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options(Vec<(String, OptionValue)>);

impl Options {
    /// No options.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds a string option.
    pub fn str(mut self, key: &str, value: impl Into<String>) -> Self {
        self.0.push((key.into(), OptionValue::Str(value.into())));
        self
    }
    /// Adds a string option if there is one.
    pub fn str_opt(self, key: &str, value: Option<impl Into<String>>) -> Self {
        match value {
            Some(v) => self.str(key, v),
            None => self,
        }
    }
    /// Adds a boolean option.
    pub fn bool(mut self, key: &str, value: bool) -> Self {
        self.0.push((key.into(), OptionValue::Bool(value)));
        self
    }
    /// Adds a boolean option if there is one.
    pub fn bool_opt(self, key: &str, value: Option<bool>) -> Self {
        match value {
            Some(v) => self.bool(key, v),
            None => self,
        }
    }
    /// Adds a `u` option.
    pub fn u32(mut self, key: &str, value: u32) -> Self {
        self.0.push((key.into(), OptionValue::U32(value)));
        self
    }
    /// Adds a `u` option if there is one.
    pub fn u32_opt(self, key: &str, value: Option<u32>) -> Self {
        match value {
            Some(v) => self.u32(key, v),
            None => self,
        }
    }
    /// Adds a `t` option.
    pub fn u64(mut self, key: &str, value: u64) -> Self {
        self.0.push((key.into(), OptionValue::U64(value)));
        self
    }
    /// Adds an `i` option.
    pub fn i32(mut self, key: &str, value: i32) -> Self {
        self.0.push((key.into(), OptionValue::I32(value)));
        self
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// The options as the proxies send them.
    pub fn to_opts(&self) -> Opts<'_> {
        self.0
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    OptionValue::Str(s) => Variant::from(s.as_str()),
                    OptionValue::Bool(b) => Variant::from(*b),
                    OptionValue::U32(n) => Variant::from(*n),
                    OptionValue::U64(n) => Variant::from(*n),
                    OptionValue::I32(n) => Variant::from(*n),
                };
                (k.as_str(), v)
            })
            .collect()
    }
}

/// Which bus to reach vgpud on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusChoice {
    /// The system bus (`DBUS_SYSTEM_BUS_ADDRESS` is honoured).
    System,
    /// The session bus.
    Session,
    /// A bus address (`unix:path=...`).
    Address(String),
    /// The system bus of another host, `[USER@]HOST`, over ssh and systemd-stdio-bridge (as
    /// `busctl -H` reaches it).
    Host(String),
}

/// The longest `[USER@]HOST` taken.
pub const MAX_HOST_LEN: usize = 255;

/// The D-Bus address that reaches the system bus of `host` (`[USER@]HOST`) as `busctl -H`
/// does: `ssh -xT -- HOST systemd-stdio-bridge`, run by the client (`unixexec:`). A host that
/// is empty, too long, or has a byte no host or user name has, is `InvalidArgument`.
pub fn ssh_address(host: &str) -> Result<String> {
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"-_.@:[]%".contains(&b);
    if host.is_empty() || host.len() > MAX_HOST_LEN || !host.bytes().all(plain) {
        return Err(Error::InvalidArgument(format!(
            "{:?} is not [USER@]HOST (letters, digits and -_.@:[]%, at most {MAX_HOST_LEN} bytes)",
            host.chars().take(64).collect::<String>()
        )));
    }
    // D-Bus address values escape every byte but [-0-9A-Za-z_/.\*] as %XX.
    let escaped: String = host
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_/.\\*".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02x}")
            }
        })
        .collect();
    Ok(format!(
        "unixexec:path=ssh,argv1=-xT,argv2=--,argv3={escaped},argv4=systemd-stdio-bridge"
    ))
}

/// A connection to vgpud with a proxy of each singleton interface.
#[derive(Clone)]
pub struct Client {
    conn: Connection,
    manager: ManagerProxy<'static>,
    nvidia: NvidiaProxy<'static>,
    layouts: LayoutsProxy<'static>,
}

/// One notice from vgpud: a signal, decoded.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    /// `DeviceCreated`.
    DeviceCreated {
        /// UUID.
        uuid: String,
        /// Object.
        path: String,
    },
    /// `DeviceRemoved`.
    DeviceRemoved {
        /// UUID.
        uuid: String,
        /// Object.
        path: String,
    },
    /// `DeviceDrift`: something happened behind vgpud's back.
    DeviceDrift {
        /// UUID.
        uuid: String,
        /// `removed-externally`, `repaired`, ...
        kind: String,
        /// Detail.
        detail: String,
    },
    /// `DeviceReclaimed`: a device's lease ran out; it is removed.
    DeviceReclaimed {
        /// UUID.
        uuid: String,
        /// Why (the domain, its state, how long).
        reason: String,
    },
    /// `GpuDrift`: a GPU instance another tool made or destroyed.
    GpuDrift {
        /// GPU.
        gpu: String,
        /// `gpu-instance-created-externally`, ...
        kind: String,
        /// Detail.
        detail: String,
    },
    /// `PropertiesChanged` of a GPU or device object.
    PropertiesChanged {
        /// Object.
        path: String,
        /// Interface.
        interface: String,
        /// The changed properties and their new values.
        changed: BTreeMap<String, serde_json::Value>,
    },
}

impl Event {
    /// Decodes a signal of vgpud's; `None` for one that is not an event above.
    pub fn from_message(msg: &zbus::Message) -> Option<Event> {
        let header = msg.header();
        let member = header.member()?.as_str().to_string();
        let interface = header.interface()?.as_str().to_string();
        let path = header.path()?.as_str().to_string();
        let body = msg.body();
        match (interface.as_str(), member.as_str()) {
            ("org.vgpud1.Manager", "DeviceCreated") => {
                let (uuid, path): (String, OwnedObjectPath) = body.deserialize().ok()?;
                Some(Event::DeviceCreated {
                    uuid,
                    path: path.to_string(),
                })
            }
            ("org.vgpud1.Manager", "DeviceRemoved") => {
                let (uuid, path): (String, OwnedObjectPath) = body.deserialize().ok()?;
                Some(Event::DeviceRemoved {
                    uuid,
                    path: path.to_string(),
                })
            }
            ("org.vgpud1.Manager", "DeviceDrift") => {
                let (uuid, kind, detail): (String, String, String) = body.deserialize().ok()?;
                Some(Event::DeviceDrift { uuid, kind, detail })
            }
            ("org.vgpud1.Manager", "DeviceReclaimed") => {
                let (uuid, reason): (String, String) = body.deserialize().ok()?;
                Some(Event::DeviceReclaimed { uuid, reason })
            }
            ("org.vgpud1.Manager", "GpuDrift") => {
                let (gpu, kind, detail): (String, String, String) = body.deserialize().ok()?;
                Some(Event::GpuDrift { gpu, kind, detail })
            }
            ("org.freedesktop.DBus.Properties", "PropertiesChanged") => {
                let (iface, changed, _invalidated): (String, proxy::Dict, Vec<String>) =
                    body.deserialize().ok()?;
                Some(Event::PropertiesChanged {
                    path,
                    interface: iface,
                    changed: model::dict_to_json(&changed),
                })
            }
            _ => None,
        }
    }
}

impl Client {
    /// Connects to vgpud on a bus.
    pub async fn connect(bus: &BusChoice) -> Result<Self> {
        let conn = match bus {
            BusChoice::System => Connection::system().await?,
            BusChoice::Session => Connection::session().await?,
            BusChoice::Address(a) => {
                zbus::connection::Builder::address(a.as_str())
                    .build()
                    .await?
            }
            BusChoice::Host(h) => {
                zbus::connection::Builder::address(ssh_address(h)?.as_str())
                    .build()
                    .await?
            }
        };
        Self::from_connection(conn).await
    }

    /// A client over an existing connection.
    pub async fn from_connection(conn: Connection) -> Result<Self> {
        Ok(Client {
            manager: ManagerProxy::new(&conn).await?,
            nvidia: NvidiaProxy::new(&conn).await?,
            layouts: LayoutsProxy::new(&conn).await?,
            conn,
        })
    }

    /// The connection.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
    /// The raw `org.vgpud1.Manager` proxy.
    pub fn manager(&self) -> &ManagerProxy<'static> {
        &self.manager
    }
    /// The raw `org.vgpud1.Nvidia` proxy.
    pub fn nvidia(&self) -> &NvidiaProxy<'static> {
        &self.nvidia
    }
    /// The raw `org.vgpud1.Layouts` proxy.
    pub fn layouts(&self) -> &LayoutsProxy<'static> {
        &self.layouts
    }

    /// A GPU object's proxy that reads every property afresh.
    pub async fn gpu_proxy(&self, address: &str) -> Result<GpuProxy<'static>> {
        gpu_proxy(&self.conn, address).await
    }
    /// A device object's proxy that reads every property afresh.
    pub async fn device_proxy(&self, uuid: &str) -> Result<DeviceProxy<'static>> {
        device_proxy(&self.conn, uuid).await
    }

    /// `ListGpus`.
    pub async fn list_gpus(&self) -> Result<Vec<GpuSummary>> {
        Ok(self
            .manager
            .list_gpus()
            .await?
            .into_iter()
            .map(|(address, model, driver, modes, path)| GpuSummary {
                address,
                model,
                driver,
                sharing_modes: modes
                    .split(',')
                    .filter(|m| !m.is_empty())
                    .map(String::from)
                    .collect(),
                path: path.to_string(),
            })
            .collect())
    }

    /// `ListTypes`.
    pub async fn list_types(&self) -> Result<Vec<TypeSummary>> {
        Ok(self
            .manager
            .list_types()
            .await?
            .into_iter()
            .map(
                |(gpu, id, name, framebuffer, max_instances, available)| TypeSummary {
                    gpu,
                    id,
                    name,
                    framebuffer,
                    max_instances,
                    available,
                },
            )
            .collect())
    }

    /// `ListDevices`.
    pub async fn list_devices(&self) -> Result<Vec<DeviceSummary>> {
        Ok(self
            .manager
            .list_devices()
            .await?
            .into_iter()
            .map(|(uuid, gpu, type_id, owner, path)| DeviceSummary {
                uuid,
                gpu,
                type_id,
                owner,
                path: path.to_string(),
            })
            .collect())
    }

    /// Every GPU and device object with all its properties, in one call
    /// (`ObjectManager.GetManagedObjects` on `/org/vgpud1`).
    pub async fn tree(&self) -> Result<Tree> {
        tree::read(&self.conn).await
    }

    /// Every property of a GPU object, in one call (`Properties.GetAll`).
    pub async fn gpu(&self, address: &str) -> Result<GpuDetails> {
        tree::gpu(&self.conn, address).await
    }

    /// Every property of a device object, in one call (`Properties.GetAll`). A malformed UUID
    /// is `InvalidArgument`, as [`device_proxy`] answers it.
    pub async fn device(&self, uuid: &str) -> Result<DeviceDetails> {
        check_uuid(uuid)?;
        tree::device(&self.conn, uuid).await
    }

    /// `CreateDevice`: the new device's UUID and object.
    pub async fn create_device(&self, ty: &str, options: &Options) -> Result<(String, String)> {
        let (uuid, path) = self.manager.create_device(ty, options.to_opts()).await?;
        Ok((uuid, path.to_string()))
    }
    /// `RemoveDevice`.
    pub async fn remove_device(&self, uuid: &str, options: &Options) -> Result<()> {
        Ok(self.manager.remove_device(uuid, options.to_opts()).await?)
    }
    /// `StartDevice`.
    pub async fn start_device(&self, uuid: &str, options: &Options) -> Result<()> {
        Ok(self.manager.start_device(uuid, options.to_opts()).await?)
    }
    /// `StopDevice`.
    pub async fn stop_device(&self, uuid: &str, options: &Options) -> Result<()> {
        Ok(self.manager.stop_device(uuid, options.to_opts()).await?)
    }
    /// `ModifyDevice`.
    pub async fn modify_device(&self, uuid: &str, options: &Options) -> Result<()> {
        Ok(self.manager.modify_device(uuid, options.to_opts()).await?)
    }
    /// `AttachDevice`.
    pub async fn attach_device(&self, uuid: &str, domain: &str, options: &Options) -> Result<()> {
        Ok(self
            .manager
            .attach_device(uuid, domain, options.to_opts())
            .await?)
    }
    /// `DetachDevice`.
    pub async fn detach_device(&self, uuid: &str, domain: &str, options: &Options) -> Result<()> {
        Ok(self
            .manager
            .detach_device(uuid, domain, options.to_opts())
            .await?)
    }
    /// `RenderDomain`: the domain XML.
    pub async fn render_domain(
        &self,
        name: &str,
        uuids: &[&str],
        options: &Options,
    ) -> Result<String> {
        Ok(self
            .manager
            .render_domain(name, uuids, options.to_opts())
            .await?)
    }
    /// `GetHostdevXml`.
    pub async fn hostdev_xml(&self, uuid: &str) -> Result<String> {
        Ok(self.manager.get_hostdev_xml(uuid).await?)
    }
    /// `RenderHostdevXml`.
    pub async fn render_hostdev_xml(&self, uuid: &str, options: &Options) -> Result<String> {
        Ok(self
            .manager
            .render_hostdev_xml(uuid, options.to_opts())
            .await?)
    }
    /// `GetCapacity`.
    pub async fn capacity(&self, ty: &str, options: &Options) -> Result<u32> {
        Ok(self.manager.get_capacity(ty, options.to_opts()).await?)
    }
    /// `GetDemand`: a type's demand per step, oldest first.
    pub async fn demand(&self, ty: &str, options: &Options) -> Result<Vec<proxy::DemandRow>> {
        Ok(self.manager.get_demand(ty, options.to_opts()).await?)
    }
    /// `GetForecast`: the last week (start, forecast, actual), the hours ahead (start,
    /// forecast) and the last week's error as JSON values in key order.
    #[allow(clippy::type_complexity)]
    pub async fn forecast(
        &self,
        ty: &str,
        options: &Options,
    ) -> Result<(
        Vec<(u64, f64, f64)>,
        Vec<(u64, f64)>,
        BTreeMap<String, serde_json::Value>,
    )> {
        let (week, ahead, error) = self.manager.get_forecast(ty, options.to_opts()).await?;
        Ok((week, ahead, model::dict_to_json(&error)))
    }
    /// `GetTypeInfo`, as JSON values in key order.
    pub async fn type_info(
        &self,
        ty: &str,
        options: &Options,
    ) -> Result<BTreeMap<String, serde_json::Value>> {
        let d = self.manager.get_type_info(ty, options.to_opts()).await?;
        Ok(model::dict_to_json(&d))
    }
    /// `SetVfCount`: how many VFs are enabled now.
    pub async fn set_vf_count(&self, gpu: &str, count: u32, options: &Options) -> Result<u32> {
        Ok(self
            .manager
            .set_vf_count(gpu, count, options.to_opts())
            .await?)
    }
    /// `SetHeterogeneousMode`.
    pub async fn set_heterogeneous_mode(
        &self,
        gpu: &str,
        enabled: bool,
        options: &Options,
    ) -> Result<()> {
        Ok(self
            .manager
            .set_heterogeneous_mode(gpu, enabled, options.to_opts())
            .await?)
    }
    /// The `Version` property.
    pub async fn version(&self) -> Result<String> {
        Ok(self.manager.version().await?)
    }
    /// The `Simulated` property.
    pub async fn simulated(&self) -> Result<bool> {
        Ok(self.manager.simulated().await?)
    }

    /// `ListMigProfiles`.
    pub async fn mig_profiles(&self, gpu: &str) -> Result<Vec<MigProfile>> {
        Ok(self
            .nvidia
            .list_mig_profiles(gpu)
            .await?
            .into_iter()
            .map(MigProfile::from)
            .collect())
    }
    /// `SetMigMode`: (current, pending).
    pub async fn set_mig_mode(
        &self,
        gpu: &str,
        enabled: bool,
        options: &Options,
    ) -> Result<(bool, bool)> {
        Ok(self
            .nvidia
            .set_mig_mode(gpu, enabled, options.to_opts())
            .await?)
    }
    /// `CreateGpuInstance`: the instance's id.
    pub async fn create_gpu_instance(
        &self,
        gpu: &str,
        profile: &str,
        options: &Options,
    ) -> Result<u32> {
        Ok(self
            .nvidia
            .create_gpu_instance(gpu, profile, options.to_opts())
            .await?)
    }
    /// `DestroyGpuInstance`.
    pub async fn destroy_gpu_instance(&self, gpu: &str, id: u32, options: &Options) -> Result<()> {
        Ok(self
            .nvidia
            .destroy_gpu_instance(gpu, id, options.to_opts())
            .await?)
    }
    /// `SetScheduler`: `applied`, `rm_pvmrl`, `modprobe_file`, `note`.
    pub async fn set_scheduler(
        &self,
        gpu: &str,
        options: &Options,
    ) -> Result<BTreeMap<String, serde_json::Value>> {
        let d = self.nvidia.set_scheduler(gpu, options.to_opts()).await?;
        Ok(model::dict_to_json(&d))
    }
    /// `GetMetrics` of a GPU or a vGPU device.
    pub async fn metrics(&self, gpu_or_uuid: &str) -> Result<BTreeMap<String, serde_json::Value>> {
        let d = self.nvidia.get_metrics(gpu_or_uuid).await?;
        Ok(model::dict_to_json(&d))
    }
    /// The `Nvml` property: `available`, or why not.
    pub async fn nvml(&self) -> Result<String> {
        Ok(self.nvidia.nvml().await?)
    }

    /// `ListLayouts`.
    pub async fn list_layouts(&self) -> Result<Vec<LayoutSummary>> {
        Ok(self
            .layouts
            .list_layouts()
            .await?
            .into_iter()
            .map(|(name, description)| LayoutSummary { name, description })
            .collect())
    }
    /// `ApplyLayout`; with `dry_run`, the plan only.
    pub async fn apply_layout(&self, name: &str, dry_run: bool) -> Result<Vec<LayoutStep>> {
        let opts = Options::new().bool("dry_run", dry_run);
        Ok(self
            .layouts
            .apply_layout(name, opts.to_opts())
            .await?
            .into_iter()
            .map(|(status, gpu, action, subject, detail)| LayoutStep {
                status,
                gpu,
                action,
                subject,
                detail,
            })
            .collect())
    }
    /// `DiffLayout`.
    pub async fn diff_layout(&self, name: &str) -> Result<Vec<LayoutDiff>> {
        Ok(self
            .layouts
            .diff_layout(name)
            .await?
            .into_iter()
            .map(|(gpu, item, wanted, actual)| LayoutDiff {
                gpu,
                item,
                wanted,
                actual,
            })
            .collect())
    }

    /// vgpud's signals as [`Event`]s, from now until the stream is dropped.
    pub async fn events(
        &self,
    ) -> Result<std::pin::Pin<Box<dyn futures_util::Stream<Item = Event> + Send>>> {
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .sender(BUS_NAME)
            .path_namespace("/org/vgpud1")
            .build()?;
        let stream =
            zbus::MessageStream::for_match_rule(rule, &self.conn, std::num::NonZeroUsize::new(256))
                .await?;
        Ok(Box::pin(stream.filter_map(|m| async move {
            m.ok().and_then(|m| Event::from_message(&m))
        })))
    }
}

/// A GPU object's proxy that reads every property afresh.
pub async fn gpu_proxy(conn: &Connection, address: &str) -> Result<GpuProxy<'static>> {
    Ok(GpuProxy::builder(conn)
        .path(paths::gpu_path(address))
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?)
}

/// A device object's proxy that reads every property afresh.
///
/// A malformed UUID is `InvalidArgument`, as vgpud's methods answer it, not the bus's
/// `UnknownObject` of a path nobody serves.
pub async fn device_proxy(conn: &Connection, uuid: &str) -> Result<DeviceProxy<'static>> {
    check_uuid(uuid)?;
    Ok(DeviceProxy::builder(conn)
        .path(paths::device_path(uuid))
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?)
}

/// Options of string values, as the proxies send them (for tests and quick calls).
pub fn str_opts<'a>(pairs: &[(&'a str, &'a str)]) -> Opts<'a> {
    pairs.iter().map(|(k, v)| (*k, Variant::from(*v))).collect()
}

/// Options of boolean values, as the proxies send them.
pub fn bool_opts<'a>(pairs: &[(&'a str, bool)]) -> Opts<'a> {
    pairs.iter().map(|(k, v)| (*k, Variant::from(*v))).collect()
}

/// A UUID as vgpud takes it (8-4-4-4-12 hexadecimal digits), or vgpud's `InvalidArgument`.
fn check_uuid(uuid: &str) -> Result<()> {
    let b = uuid.as_bytes();
    let ok = b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        });
    if ok {
        Ok(())
    } else {
        let shown: String = uuid.chars().take(48).collect();
        Err(Error::InvalidArgument(format!(
            "{shown:?} is not a UUID (8-4-4-4-12 hexadecimal digits)"
        )))
    }
}
