//! zbus proxies for `org.vgpud1`, written from the documented contract (not generated from
//! the server's code), so the tests check what clients rely on.

use std::collections::{BTreeMap, HashMap};

use zbus::{proxy, OwnedObjectPath, Variant};

/// `org.vgpud1.Manager`.
#[proxy(
    interface = "org.vgpud1.Manager",
    default_service = "org.vgpud1",
    default_path = "/org/vgpud1"
)]
pub trait Manager {
    /// ListGpus() → a(sssso)
    fn list_gpus(&self) -> zbus::Result<Vec<(String, String, String, String, OwnedObjectPath)>>;
    /// ListTypes() → a(ssstuu)
    fn list_types(&self) -> zbus::Result<Vec<(String, String, String, u64, u32, u32)>>;
    /// ListDevices() → a(sssso)
    fn list_devices(&self) -> zbus::Result<Vec<(String, String, String, String, OwnedObjectPath)>>;
    /// CreateDevice(s, a{sv}) → (so)
    fn create_device(
        &self,
        r#type: &str,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<(String, OwnedObjectPath)>;
    /// RemoveDevice(s, a{sv})
    fn remove_device(&self, uuid: &str, options: HashMap<&str, Variant<'_>>) -> zbus::Result<()>;
    /// ModifyDevice(s, a{sv})
    fn modify_device(&self, uuid: &str, options: HashMap<&str, Variant<'_>>) -> zbus::Result<()>;
    /// StartDevice(s, a{sv})
    fn start_device(&self, uuid: &str, options: HashMap<&str, Variant<'_>>) -> zbus::Result<()>;
    /// StopDevice(s, a{sv})
    fn stop_device(&self, uuid: &str, options: HashMap<&str, Variant<'_>>) -> zbus::Result<()>;
    /// RenderDomain(s, as, a{sv}) → s
    fn render_domain(
        &self,
        name: &str,
        uuids: &[&str],
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<String>;
    /// AttachDevice(s, s, a{sv})
    fn attach_device(
        &self,
        uuid: &str,
        domain: &str,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<()>;
    /// GetCapacity(s, a{sv}) → u
    fn get_capacity(&self, r#type: &str, options: HashMap<&str, Variant<'_>>) -> zbus::Result<u32>;
    /// SetVfCount(s, u, a{sv}) → u
    fn set_vf_count(
        &self,
        gpu: &str,
        count: u32,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<u32>;
    /// SetHeterogeneousMode(s, b, a{sv})
    fn set_heterogeneous_mode(
        &self,
        gpu: &str,
        enabled: bool,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<()>;
    /// GetHostdevXml(s) → s
    fn get_hostdev_xml(&self, uuid: &str) -> zbus::Result<String>;
    /// RenderHostdevXml(s, a{sv}) → s
    fn render_hostdev_xml(
        &self,
        uuid: &str,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<String>;
    /// GpuDrift(s, s, s)
    #[zbus(signal)]
    fn gpu_drift(&self, gpu: String, event: String, detail: String) -> zbus::Result<()>;
    /// DeviceCreated(s, o)
    #[zbus(signal)]
    fn device_created(&self, uuid: String, path: OwnedObjectPath) -> zbus::Result<()>;
    /// DeviceDrift(s, s, s)
    #[zbus(signal)]
    fn device_drift(&self, uuid: String, event: String, detail: String) -> zbus::Result<()>;
    /// DeviceRemoved(s, o)
    #[zbus(signal)]
    fn device_removed(&self, uuid: String, path: OwnedObjectPath) -> zbus::Result<()>;
    /// Version
    #[zbus(property)]
    fn version(&self) -> zbus::Result<String>;
}

/// `org.vgpud1.Nvidia` at `/org/vgpud1/nvidia`.
#[proxy(
    interface = "org.vgpud1.Nvidia",
    default_service = "org.vgpud1",
    default_path = "/org/vgpud1/nvidia"
)]
pub trait Nvidia {
    /// ListMigProfiles(s) → a(uusutuua(uu)a(uu))
    #[allow(clippy::type_complexity)]
    fn list_mig_profiles(&self, gpu: &str) -> zbus::Result<Vec<MigProfileRow>>;
    /// SetMigMode(s, b, a{sv}) → (bb)
    fn set_mig_mode(
        &self,
        gpu: &str,
        enabled: bool,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<(bool, bool)>;
    /// CreateGpuInstance(s, s, a{sv}) → u
    fn create_gpu_instance(
        &self,
        gpu: &str,
        profile: &str,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<u32>;
    /// DestroyGpuInstance(s, u, a{sv})
    fn destroy_gpu_instance(
        &self,
        gpu: &str,
        id: u32,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<()>;
    /// SetScheduler(s, a{sv}) → a{sv}
    fn set_scheduler(
        &self,
        gpu: &str,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<HashMap<String, zbus::OwnedVariant>>;
    /// GetMetrics(s) → a{sv}
    fn get_metrics(&self, gpu_or_uuid: &str) -> zbus::Result<HashMap<String, zbus::OwnedVariant>>;
    /// Nvml
    #[zbus(property)]
    fn nvml(&self) -> zbus::Result<String>;
}

/// `org.vgpud1.Gpu`.
#[proxy(interface = "org.vgpud1.Gpu", default_service = "org.vgpud1")]
pub trait Gpu {
    /// Address
    #[zbus(property)]
    fn address(&self) -> zbus::Result<String>;
    /// Model
    #[zbus(property)]
    fn model(&self) -> zbus::Result<String>;
    /// VendorId
    #[zbus(property)]
    fn vendor_id(&self) -> zbus::Result<u16>;
    /// Driver
    #[zbus(property)]
    fn driver(&self) -> zbus::Result<String>;
    /// NumaNode
    #[zbus(property)]
    fn numa_node(&self) -> zbus::Result<i32>;
    /// IommuGroup
    #[zbus(property)]
    fn iommu_group(&self) -> zbus::Result<i32>;
    /// Devices
    #[zbus(property)]
    fn devices(&self) -> zbus::Result<Vec<OwnedObjectPath>>;

    #[zbus(property)]
    fn sharing_modes(&self) -> zbus::Result<Vec<String>>;

    #[zbus(property)]
    fn total_vfs(&self) -> zbus::Result<u32>;

    #[zbus(property)]
    fn num_vfs(&self) -> zbus::Result<u32>;

    #[zbus(property)]
    fn vfs(&self) -> zbus::Result<Vec<String>>;

    #[zbus(property)]
    fn heterogeneous_mode(&self) -> zbus::Result<bool>;

    /// MigMode (current, pending)
    #[zbus(property)]
    fn mig_mode(&self) -> zbus::Result<(bool, bool)>;

    /// GpuInstances: (id, profile id, profile, start, size, device)
    #[zbus(property)]
    #[allow(clippy::type_complexity)]
    fn gpu_instances(&self) -> zbus::Result<Vec<(u32, u32, String, u32, u32, String)>>;

    /// Scheduler
    #[zbus(property)]
    fn scheduler(&self) -> zbus::Result<HashMap<String, zbus::OwnedVariant>>;
}

/// A row of ListMigProfiles: id, index, name, slices, memory bytes, max, remaining,
/// placements, free placements.
pub type MigProfileRow = (
    u32,
    u32,
    String,
    u32,
    u64,
    u32,
    u32,
    Vec<(u32, u32)>,
    Vec<(u32, u32)>,
);

/// `org.vgpud1.Device`.
#[proxy(interface = "org.vgpud1.Device", default_service = "org.vgpud1")]
pub trait Device {
    /// Uuid
    #[zbus(property)]
    fn uuid(&self) -> zbus::Result<String>;
    /// Parent
    #[zbus(property)]
    fn parent(&self) -> zbus::Result<String>;
    /// TypeId
    #[zbus(property)]
    fn type_id(&self) -> zbus::Result<String>;
    /// TypeName
    #[zbus(property)]
    fn type_name(&self) -> zbus::Result<String>;
    /// Owner
    #[zbus(property)]
    fn owner(&self) -> zbus::Result<String>;
    /// IommuGroup
    #[zbus(property)]
    fn iommu_group(&self) -> zbus::Result<i32>;
    /// Attributes
    #[zbus(property)]
    fn attributes(&self) -> zbus::Result<BTreeMap<String, String>>;
    /// Active
    #[zbus(property)]
    fn active(&self) -> zbus::Result<bool>;
    /// Persistent
    #[zbus(property)]
    fn persistent(&self) -> zbus::Result<bool>;
    /// Autostart
    #[zbus(property)]
    fn autostart(&self) -> zbus::Result<bool>;
    /// Created
    #[zbus(property)]
    fn created(&self) -> zbus::Result<u64>;

    #[zbus(property)]
    fn kind(&self) -> zbus::Result<String>;

    #[zbus(property)]
    fn address(&self) -> zbus::Result<String>;

    #[zbus(property)]
    fn functions(&self) -> zbus::Result<Vec<(String, String)>>;

    #[zbus(property)]
    fn parent_gpu(&self) -> zbus::Result<OwnedObjectPath>;
}

/// A Device proxy that never caches, so every read asks the daemon.
pub async fn device_proxy(conn: &zbus::Connection, uuid: &str) -> DeviceProxy<'static> {
    let path = vgpud::dbus::paths::device_path(uuid);
    DeviceProxy::builder(conn)
        .path(path)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .expect("device proxy")
}

/// Boolean options.
pub fn bool_opts<'a>(pairs: &[(&'a str, bool)]) -> HashMap<&'a str, Variant<'a>> {
    pairs.iter().map(|(k, v)| (*k, Variant::from(*v))).collect()
}

/// Options for a call.
pub fn opts<'a>(pairs: &[(&'a str, &'a str)]) -> HashMap<&'a str, Variant<'a>> {
    pairs.iter().map(|(k, v)| (*k, Variant::from(*v))).collect()
}

/// A GPU's proxy that reads properties afresh on every get.
pub async fn gpu_proxy(conn: &zbus::Connection, address: &str) -> GpuProxy<'static> {
    GpuProxy::builder(conn)
        .path(vgpud::dbus::paths::gpu_path(address))
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .expect("gpu proxy")
}

/// The D-Bus error name of a failed call.
pub fn error_name(e: &zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(name, _, _) => name.to_string(),
        other => format!("not a method error: {other}"),
    }
}

/// The D-Bus error message of a failed call.
pub fn error_message(e: &zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(_, Some(msg), _) => msg.clone(),
        other => other.to_string(),
    }
}
