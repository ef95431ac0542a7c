//! The per-GPU and per-device objects. They hold only their key and read everything else from
//! the engine, so a property is never stale.

use std::collections::BTreeMap;
use std::sync::Arc;

use zbus::{interface, OwnedObjectPath};

use super::paths;
use crate::engine::Engine;

/// `org.vgpud1.Gpu` at `/org/vgpud1/gpu/<escaped address>`.
pub struct GpuObject {
    pub(super) engine: Arc<Engine>,
    pub(super) address: String,
}

impl GpuObject {
    fn field<T: Default>(&self, f: impl FnOnce(&crate::model::Gpu) -> T) -> T {
        self.engine.with_gpu(&self.address, f).unwrap_or_default()
    }
}

fn opt_i32(v: Option<u32>) -> i32 {
    v.and_then(|n| i32::try_from(n).ok()).unwrap_or(-1)
}

#[interface(name = "org.vgpud1.Gpu")]
impl GpuObject {
    /// PCI address (or sysfs name of a non-PCI parent such as `mtty`).
    #[zbus(property(emits_changed_signal = "const"))]
    async fn address(&self) -> String {
        self.address.clone()
    }

    /// Marketing name where known.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn model(&self) -> String {
        self.field(|g| g.model.clone())
    }

    /// PCI vendor id, 0 for non-PCI parents.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn vendor_id(&self) -> u16 {
        self.field(|g| g.vendor_id)
    }

    /// PCI device id, 0 for non-PCI parents.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn device_id(&self) -> u16 {
        self.field(|g| g.device_id)
    }

    /// Bound kernel driver.
    #[zbus(property)]
    async fn driver(&self) -> String {
        self.field(|g| g.driver.clone())
    }

    /// IOMMU group, -1 if none.
    #[zbus(property)]
    async fn iommu_group(&self) -> i32 {
        opt_i32(self.field(|g| g.iommu_group))
    }

    /// NUMA node, -1 if unknown.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn numa_node(&self) -> i32 {
        opt_i32(self.field(|g| g.numa_node))
    }

    /// SR-IOV virtual functions the GPU can have (`sriov_totalvfs`), 0 without SR-IOV.
    #[zbus(property)]
    async fn total_vfs(&self) -> u32 {
        self.field(|g| g.sriov.as_ref().map_or(0, |s| s.total_vfs))
    }

    /// SR-IOV virtual functions enabled now (`sriov_numvfs`).
    #[zbus(property)]
    async fn num_vfs(&self) -> u32 {
        self.field(|g| g.sriov.as_ref().map_or(0, |s| s.num_vfs))
    }

    /// Whether the GPU is in NVIDIA's heterogeneous (mixed-size) vGPU mode.
    #[zbus(property)]
    async fn heterogeneous_mode(&self) -> bool {
        self.engine.is_heterogeneous(&self.address)
    }

    /// MIG mode, current and pending (false, false without MIG).
    #[zbus(property)]
    async fn mig_mode(&self) -> (bool, bool) {
        self.field(|g| {
            g.nvidia
                .as_ref()
                .and_then(|n| n.mig)
                .map_or((false, false), |m| (m.current, m.pending))
        })
    }

    /// GPU instances: id, profile id, profile, placement start and size, device using it.
    #[zbus(property)]
    async fn gpu_instances(&self) -> Vec<(u32, u32, String, u32, u32, String)> {
        self.field(|g| {
            g.nvidia
                .as_ref()
                .map(|n| {
                    n.gpu_instances
                        .iter()
                        .map(|v| {
                            let i = &v.instance;
                            let p = i.placement;
                            (
                                i.id,
                                i.profile_id,
                                v.profile.clone(),
                                p.start,
                                p.size,
                                v.device.clone(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default()
        })
    }

    /// vGPU scheduler: policy, arr, timeslice_ms, avg_factor, frequency_hz (empty: unknown).
    #[zbus(property)]
    async fn scheduler(&self) -> BTreeMap<String, zbus::OwnedVariant> {
        let state = self.field(|g| g.nvidia.as_ref().and_then(|n| n.scheduler));
        let mut out = BTreeMap::new();
        if let Some(s) = state {
            let mut put = |k: &str, v: zbus::Variant<'_>| {
                if let Ok(v) = zbus::OwnedVariant::try_from(v) {
                    out.insert(k.to_string(), v);
                }
            };
            put("policy", s.policy.name().into());
            put("arr", s.arr.into());
            put("timeslice_ms", s.timeslice_ms.into());
            put("avg_factor", s.avg_factor.into());
            put("frequency_hz", s.frequency_hz.into());
        }
        out
    }

    /// Addresses of the enabled virtual functions, in VF order.
    #[zbus(property)]
    async fn vfs(&self) -> Vec<String> {
        self.field(|g| g.sriov.as_ref().map(|s| s.vfs.clone()).unwrap_or_default())
    }

    /// Ways this GPU can be shared: `mdev`, `sriov-vgpu` (NVIDIA vGPU on VFs), `sriov-vf`
    /// (VFs given whole), `passthrough`.
    #[zbus(property)]
    async fn sharing_modes(&self) -> Vec<String> {
        self.field(|g| g.sharing_modes.iter().map(|m| m.to_string()).collect())
    }

    /// Ids of the device types this GPU offers.
    #[zbus(property)]
    async fn types(&self) -> Vec<String> {
        self.field(|g| g.types.iter().map(|t| t.id.clone()).collect())
    }

    /// Device objects on this GPU.
    #[zbus(property)]
    async fn devices(&self) -> Vec<OwnedObjectPath> {
        self.engine
            .map_devices_of(&self.address, |d| paths::device_path(&d.uuid))
    }
}

/// `org.vgpud1.Device` at `/org/vgpud1/device/<escaped uuid>`.
pub struct DeviceObject {
    pub(super) engine: Arc<Engine>,
    pub(super) uuid: String,
}

impl DeviceObject {
    fn field<T: Default>(&self, f: impl FnOnce(&crate::engine::DeviceInfo) -> T) -> T {
        self.engine.with_device(&self.uuid, f).unwrap_or_default()
    }
}

#[interface(name = "org.vgpud1.Device")]
impl DeviceObject {
    /// The device's UUID.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn uuid(&self) -> String {
        self.uuid.clone()
    }

    /// Address of the parent GPU.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn parent(&self) -> String {
        self.field(|d| d.parent.clone())
    }

    /// Object of the parent GPU (the physical GPU where the parent is one of its VFs).
    #[zbus(property(emits_changed_signal = "const"))]
    async fn parent_gpu(&self) -> OwnedObjectPath {
        paths::gpu_path(&self.engine.gpu_of_parent(&self.field(|d| d.parent.clone())))
    }

    /// What the device is: `mdev`, `sriov-vgpu` (an NVIDIA vGPU on a VF) or `passthrough`.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn kind(&self) -> String {
        self.field(|d| d.kind.as_str().to_string())
    }

    /// The PCI function the device is: the VF of an SR-IOV vGPU while active, the function
    /// passed through; empty for mdevs.
    #[zbus(property)]
    async fn address(&self) -> String {
        self.field(|d| d.address.clone().unwrap_or_default())
    }

    /// A passthrough device's functions on vfio-pci, each with the driver it goes back to
    /// (empty when it had none).
    #[zbus(property(emits_changed_signal = "const"))]
    async fn functions(&self) -> Vec<(String, String)> {
        self.field(|d| {
            d.functions
                .iter()
                .map(|f| (f.address.clone(), f.driver.clone().unwrap_or_default()))
                .collect()
        })
    }

    /// Type id (`nvidia-259`).
    #[zbus(property(emits_changed_signal = "const"))]
    async fn type_id(&self) -> String {
        self.field(|d| d.type_id.clone())
    }

    /// Type name (`GRID RTX6000-4Q`).
    #[zbus(property(emits_changed_signal = "const"))]
    async fn type_name(&self) -> String {
        self.field(|d| d.type_name.clone())
    }

    /// Free tag given at creation; empty for devices created by other tools.
    #[zbus(property)]
    async fn owner(&self) -> String {
        self.field(|d| d.owner.clone())
    }

    /// IOMMU group the kernel gave the device, -1 if none.
    #[zbus(property)]
    async fn iommu_group(&self) -> i32 {
        opt_i32(self.field(|d| d.iommu_group))
    }

    /// Vendor attributes (`nvidia/vgpu_params`): the device's while active, the
    /// definition's otherwise.
    #[zbus(property)]
    async fn attributes(&self) -> BTreeMap<String, String> {
        self.field(|d| d.attributes.clone())
    }

    /// The device exists on the host now.
    #[zbus(property)]
    async fn active(&self) -> bool {
        self.field(|d| d.active)
    }

    /// The device has a persistent (mdevctl) definition and survives reboots.
    #[zbus(property)]
    async fn persistent(&self) -> bool {
        self.field(|d| d.persistent)
    }

    /// The device is started whenever its parent appears.
    #[zbus(property)]
    async fn autostart(&self) -> bool {
        self.field(|d| d.autostart)
    }

    /// When vgpud created the device (seconds since the Unix epoch); 0 if another tool did.
    #[zbus(property)]
    async fn created(&self) -> u64 {
        self.field(|d| d.created)
    }
}
