//! The raw zbus proxies of `org.vgpud1`, one per interface, written from the documented
//! contract (`dbus/org.vgpud1.xml`, docs/api.md), not from the server's code: what they
//! expect is what every client may rely on. [`crate::Client`] wraps them with typed rows
//! and errors; tests use them directly to send exactly the wire types they mean to.

use std::collections::{BTreeMap, HashMap};

use zbus::{proxy, OwnedObjectPath, OwnedVariant, Variant};

/// Options of a call, as sent: `a{sv}`.
pub type Opts<'a> = HashMap<&'a str, Variant<'a>>;

/// A row of `ListGpus`: address, model, driver, sharing modes (comma-separated), object.
pub type GpuRow = (String, String, String, String, OwnedObjectPath);
/// A row of `ListTypes`: GPU, type id, type name, framebuffer bytes, max, available.
pub type TypeRow = (String, String, String, u64, u32, u32);
/// A row of `ListDevices`: uuid, GPU, type id, owner, object.
pub type DeviceRow = (String, String, String, String, OwnedObjectPath);
/// A row of `GetDemand`: start (Unix seconds), requests, warm, cold, refused, released.
pub type DemandRow = (u64, u32, u32, u32, u32, u32);
/// A row of `ListMigProfiles`: id, index, name, slices, memory bytes, max, remaining,
/// placements, free placements (start, size).
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
/// An element of `GpuInstances`: id, profile id, profile, placement start, size, device.
pub type GpuInstanceRow = (u32, u32, String, u32, u32, String);
/// A row of `ApplyLayout`: status, GPU, action, subject, detail.
pub type LayoutStepRow = (String, String, String, String, String);
/// A row of `DiffLayout`: GPU, item, wanted, actual.
pub type LayoutDiffRow = (String, String, String, String);
/// A dictionary answer (`a{sv}`).
pub type Dict = HashMap<String, OwnedVariant>;

/// `org.vgpud1.Manager` at `/org/vgpud1`.
#[proxy(
    interface = "org.vgpud1.Manager",
    default_service = "org.vgpud1",
    default_path = "/org/vgpud1"
)]
pub trait Manager {
    /// ListGpus() → a(sssso)
    fn list_gpus(&self) -> zbus::Result<Vec<GpuRow>>;
    /// ListTypes() → a(ssstuu)
    fn list_types(&self) -> zbus::Result<Vec<TypeRow>>;
    /// ListDevices() → a(sssso)
    fn list_devices(&self) -> zbus::Result<Vec<DeviceRow>>;
    /// CreateDevice(s type, a{sv} options) → (s uuid, o path)
    fn create_device(
        &self,
        r#type: &str,
        options: Opts<'_>,
    ) -> zbus::Result<(String, OwnedObjectPath)>;
    /// GetCapacity(s type, a{sv} options) → u
    fn get_capacity(&self, r#type: &str, options: Opts<'_>) -> zbus::Result<u32>;
    /// GetTypeInfo(s type, a{sv} options) → a{sv}
    fn get_type_info(&self, r#type: &str, options: Opts<'_>) -> zbus::Result<Dict>;
    /// GetDemand(s type, a{sv} options) → a(tuuuuu): (start, requests, warm, cold, refused,
    /// released) per step.
    fn get_demand(&self, r#type: &str, options: Opts<'_>) -> zbus::Result<Vec<DemandRow>>;
    /// GetForecast(s type, a{sv} options) → (a(tdd) last_week, a(td) ahead, a{sv} error)
    fn get_forecast(
        &self,
        r#type: &str,
        options: Opts<'_>,
    ) -> zbus::Result<(Vec<(u64, f64, f64)>, Vec<(u64, f64)>, Dict)>;
    /// RemoveDevice(s uuid, a{sv} options)
    fn remove_device(&self, uuid: &str, options: Opts<'_>) -> zbus::Result<()>;
    /// ModifyDevice(s uuid, a{sv} options)
    fn modify_device(&self, uuid: &str, options: Opts<'_>) -> zbus::Result<()>;
    /// StartDevice(s uuid, a{sv} options)
    fn start_device(&self, uuid: &str, options: Opts<'_>) -> zbus::Result<()>;
    /// StopDevice(s uuid, a{sv} options)
    fn stop_device(&self, uuid: &str, options: Opts<'_>) -> zbus::Result<()>;
    /// AttachDevice(s uuid, s domain, a{sv} options)
    fn attach_device(&self, uuid: &str, domain: &str, options: Opts<'_>) -> zbus::Result<()>;
    /// DetachDevice(s uuid, s domain, a{sv} options)
    fn detach_device(&self, uuid: &str, domain: &str, options: Opts<'_>) -> zbus::Result<()>;
    /// RenderDomain(s name, as uuids, a{sv} options) → s
    fn render_domain(&self, name: &str, uuids: &[&str], options: Opts<'_>) -> zbus::Result<String>;
    /// SetVfCount(s gpu, u count, a{sv} options) → u
    fn set_vf_count(&self, gpu: &str, count: u32, options: Opts<'_>) -> zbus::Result<u32>;
    /// SetHeterogeneousMode(s gpu, b enabled, a{sv} options)
    fn set_heterogeneous_mode(
        &self,
        gpu: &str,
        enabled: bool,
        options: Opts<'_>,
    ) -> zbus::Result<()>;
    /// GetHostdevXml(s uuid) → s
    fn get_hostdev_xml(&self, uuid: &str) -> zbus::Result<String>;
    /// RenderHostdevXml(s uuid, a{sv} options) → s
    fn render_hostdev_xml(&self, uuid: &str, options: Opts<'_>) -> zbus::Result<String>;
    /// DeviceCreated(s uuid, o path)
    #[zbus(signal)]
    fn device_created(&self, uuid: String, path: OwnedObjectPath) -> zbus::Result<()>;
    /// DeviceRemoved(s uuid, o path)
    #[zbus(signal)]
    fn device_removed(&self, uuid: String, path: OwnedObjectPath) -> zbus::Result<()>;
    /// DeviceReclaimed(s uuid, s reason): a device's lease ran out; DeviceRemoved follows.
    #[zbus(signal)]
    fn device_reclaimed(&self, uuid: String, reason: String) -> zbus::Result<()>;
    /// DeviceDrift(s uuid, s event, s detail)
    #[zbus(signal)]
    fn device_drift(&self, uuid: String, event: String, detail: String) -> zbus::Result<()>;
    /// GpuDrift(s gpu, s event, s detail)
    #[zbus(signal)]
    fn gpu_drift(&self, gpu: String, event: String, detail: String) -> zbus::Result<()>;
    /// Simulated: whether the host is vgpud's simulator.
    #[zbus(property)]
    fn simulated(&self) -> zbus::Result<bool>;
    /// Version: vgpud's version.
    #[zbus(property)]
    fn version(&self) -> zbus::Result<String>;
}

/// `org.vgpud1.Nvidia` at `/org/vgpud1/nvidia`: MIG, the vGPU scheduler, telemetry.
#[proxy(
    interface = "org.vgpud1.Nvidia",
    default_service = "org.vgpud1",
    default_path = "/org/vgpud1/nvidia"
)]
pub trait Nvidia {
    /// ListMigProfiles(s gpu) → a(uusutuua(uu)a(uu))
    fn list_mig_profiles(&self, gpu: &str) -> zbus::Result<Vec<MigProfileRow>>;
    /// SetMigMode(s gpu, b enabled, a{sv} options) → (bb)
    fn set_mig_mode(
        &self,
        gpu: &str,
        enabled: bool,
        options: Opts<'_>,
    ) -> zbus::Result<(bool, bool)>;
    /// CreateGpuInstance(s gpu, s profile, a{sv} options) → u
    fn create_gpu_instance(&self, gpu: &str, profile: &str, options: Opts<'_>)
        -> zbus::Result<u32>;
    /// DestroyGpuInstance(s gpu, u id, a{sv} options)
    fn destroy_gpu_instance(&self, gpu: &str, id: u32, options: Opts<'_>) -> zbus::Result<()>;
    /// SetScheduler(s gpu, a{sv} options) → a{sv}
    fn set_scheduler(&self, gpu: &str, options: Opts<'_>) -> zbus::Result<Dict>;
    /// GetMetrics(s gpu_or_uuid) → a{sv}
    fn get_metrics(&self, gpu_or_uuid: &str) -> zbus::Result<Dict>;
    /// Nvml: `available`, or why not.
    #[zbus(property)]
    fn nvml(&self) -> zbus::Result<String>;
}

/// `org.vgpud1.Layouts` at `/org/vgpud1/layouts`: declarative layouts
/// (`etc/vgpud/layouts/NAME.toml`).
#[proxy(
    interface = "org.vgpud1.Layouts",
    default_service = "org.vgpud1",
    default_path = "/org/vgpud1/layouts"
)]
pub trait Layouts {
    /// ListLayouts() → a(ss): name, description.
    fn list_layouts(&self) -> zbus::Result<Vec<(String, String)>>;
    /// ApplyLayout(s name, a{sv} options) → a(sssss): status, GPU, action, subject, detail.
    fn apply_layout(&self, name: &str, options: Opts<'_>) -> zbus::Result<Vec<LayoutStepRow>>;
    /// DiffLayout(s name) → a(ssss): GPU, item, wanted, actual.
    fn diff_layout(&self, name: &str) -> zbus::Result<Vec<LayoutDiffRow>>;
}

/// `org.vgpud1.Gpu` at `/org/vgpud1/gpu/<escaped address>`.
#[proxy(interface = "org.vgpud1.Gpu", default_service = "org.vgpud1")]
pub trait Gpu {
    /// Address: the PCI address.
    #[zbus(property)]
    fn address(&self) -> zbus::Result<String>;
    /// Model: the model name.
    #[zbus(property)]
    fn model(&self) -> zbus::Result<String>;
    /// VendorId: the PCI vendor.
    #[zbus(property)]
    fn vendor_id(&self) -> zbus::Result<u16>;
    /// DeviceId: the PCI device id.
    #[zbus(property)]
    fn device_id(&self) -> zbus::Result<u16>;
    /// Driver: the bound driver.
    #[zbus(property)]
    fn driver(&self) -> zbus::Result<String>;
    /// IommuGroup (-1: none).
    #[zbus(property)]
    fn iommu_group(&self) -> zbus::Result<i32>;
    /// NumaNode (-1: none).
    #[zbus(property)]
    fn numa_node(&self) -> zbus::Result<i32>;
    /// SharingModes: `mdev`, `sriov-vgpu`, `sriov-vf`, `passthrough`.
    #[zbus(property)]
    fn sharing_modes(&self) -> zbus::Result<Vec<String>>;
    /// Types: the type ids the GPU offers.
    #[zbus(property)]
    fn types(&self) -> zbus::Result<Vec<String>>;
    /// Devices: the objects of the GPU's devices.
    #[zbus(property)]
    fn devices(&self) -> zbus::Result<Vec<OwnedObjectPath>>;
    /// TotalVfs: `sriov_totalvfs`.
    #[zbus(property)]
    fn total_vfs(&self) -> zbus::Result<u32>;
    /// NumVfs: VFs enabled.
    #[zbus(property)]
    fn num_vfs(&self) -> zbus::Result<u32>;
    /// Vfs: the VFs' addresses.
    #[zbus(property)]
    fn vfs(&self) -> zbus::Result<Vec<String>>;
    /// HeterogeneousMode: mixed-size vGPUs.
    #[zbus(property)]
    fn heterogeneous_mode(&self) -> zbus::Result<bool>;
    /// MigMode: (current, pending).
    #[zbus(property)]
    fn mig_mode(&self) -> zbus::Result<(bool, bool)>;
    /// GpuInstances: (id, profile id, profile, start, size, device).
    #[zbus(property)]
    fn gpu_instances(&self) -> zbus::Result<Vec<GpuInstanceRow>>;
    /// Scheduler: `policy`, `arr`, `timeslice_ms`, `avg_factor`, `frequency_hz`.
    #[zbus(property)]
    fn scheduler(&self) -> zbus::Result<Dict>;
}

/// `org.vgpud1.Device` at `/org/vgpud1/device/<escaped uuid>`.
#[proxy(interface = "org.vgpud1.Device", default_service = "org.vgpud1")]
pub trait Device {
    /// Uuid.
    #[zbus(property)]
    fn uuid(&self) -> zbus::Result<String>;
    /// Kind: `mdev`, `sriov-vgpu`, `passthrough`.
    #[zbus(property)]
    fn kind(&self) -> zbus::Result<String>;
    /// Parent: the mdev parent, VF or GPU.
    #[zbus(property)]
    fn parent(&self) -> zbus::Result<String>;
    /// ParentGpu: the physical GPU's object.
    #[zbus(property)]
    fn parent_gpu(&self) -> zbus::Result<OwnedObjectPath>;
    /// Address: the VF of an active SR-IOV vGPU, the function passed through.
    #[zbus(property)]
    fn address(&self) -> zbus::Result<String>;
    /// Functions: a passthrough device's functions and the driver each goes back to.
    #[zbus(property)]
    fn functions(&self) -> zbus::Result<Vec<(String, String)>>;
    /// TypeId.
    #[zbus(property)]
    fn type_id(&self) -> zbus::Result<String>;
    /// TypeName.
    #[zbus(property)]
    fn type_name(&self) -> zbus::Result<String>;
    /// Owner: a free tag, the libvirt domain once attached.
    #[zbus(property)]
    fn owner(&self) -> zbus::Result<String>;
    /// IommuGroup (-1: none).
    #[zbus(property)]
    fn iommu_group(&self) -> zbus::Result<i32>;
    /// Attributes: the mdev's attributes (`nvidia/vgpu_params`).
    #[zbus(property)]
    fn attributes(&self) -> zbus::Result<BTreeMap<String, String>>;
    /// Active: exists on the host now.
    #[zbus(property)]
    fn active(&self) -> zbus::Result<bool>;
    /// Persistent: defined across reboots.
    #[zbus(property)]
    fn persistent(&self) -> zbus::Result<bool>;
    /// Autostart: started when its GPU appears.
    #[zbus(property)]
    fn autostart(&self) -> zbus::Result<bool>;
    /// Created: Unix seconds.
    #[zbus(property)]
    fn created(&self) -> zbus::Result<u64>;
}
