//! The domain types vgpud reasons about: GPUs, the device types they offer, and devices.
//! Nothing here touches the host or the bus.

use std::collections::BTreeMap;
use std::fmt;

pub use vgpud_catalog::{VENDOR_AMD, VENDOR_INTEL, VENDOR_NVIDIA};

/// A way a GPU can be shared with guests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SharingMode {
    /// Mediated devices (NVIDIA legacy vGPU, Intel GVT-g, sample drivers), on the GPU itself
    /// or on its SR-IOV virtual functions (NVIDIA Ampere).
    Mdev,
    /// NVIDIA vGPU on SR-IOV virtual functions through the vendor-specific VFIO framework
    /// (Ada, Hopper, Blackwell; vGPU 17+): a type is written to a VF's
    /// `nvidia/current_vgpu_type`.
    SriovVgpu,
    /// SR-IOV virtual functions a guest gets whole (AMD MxGPU, Intel SR-IOV).
    SriovVf,
    /// The whole GPU moved to vfio-pci for one guest.
    Passthrough,
}

impl SharingMode {
    /// The name used on the bus.
    pub fn as_str(self) -> &'static str {
        match self {
            SharingMode::Mdev => "mdev",
            SharingMode::SriovVgpu => "sriov-vgpu",
            SharingMode::SriovVf => "sriov-vf",
            SharingMode::Passthrough => "passthrough",
        }
    }
}

/// What a device is on the host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviceKind {
    /// A mediated device (`sys/bus/mdev/devices/<uuid>`).
    #[default]
    Mdev,
    /// An NVIDIA vGPU type written to an SR-IOV virtual function; vgpud's UUID is its handle.
    SriovVgpu,
    /// A PCI function (a whole GPU with its other functions, or a VF) bound to vfio-pci.
    Passthrough,
}

impl DeviceKind {
    /// The name used on the bus and in vgpud's records.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceKind::Mdev => "mdev",
            DeviceKind::SriovVgpu => "sriov-vgpu",
            DeviceKind::Passthrough => "passthrough",
        }
    }
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The type name a passthrough device is created with.
pub const PASSTHROUGH_TYPE: &str = "passthrough";

/// A PCI function vgpud moved to vfio-pci, and the driver it had before.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MovedFunction {
    /// Its address.
    pub address: String,
    /// The driver it was bound to, `None` when it was unbound.
    pub driver: Option<String>,
}

/// SR-IOV state of a physical function.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sriov {
    /// `sriov_totalvfs`.
    pub total_vfs: u32,
    /// `sriov_numvfs`: VFs enabled now.
    pub num_vfs: u32,
    /// Addresses of the enabled VFs (`virtfn0` …), in VF order.
    pub vfs: Vec<String>,
}

impl fmt::Display for SharingMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A GPU (or other mdev parent) on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// The device name: a PCI address (`0000:41:00.0`) or, for non-PCI mdev parents, the
    /// sysfs device name (`mtty`).
    pub address: String,
    /// PCI vendor id (0 for non-PCI parents).
    pub vendor_id: u16,
    /// PCI device id (0 for non-PCI parents).
    pub device_id: u16,
    /// PCI class code (0 for non-PCI parents).
    pub class: u32,
    /// Marketing name where known, else a generic description.
    pub model: String,
    /// Bound driver, empty if none.
    pub driver: String,
    /// IOMMU group number, if the device is in one.
    pub iommu_group: Option<u32>,
    /// NUMA node, if the platform reports one.
    pub numa_node: Option<u32>,
    /// Ways this GPU can be shared.
    pub sharing_modes: Vec<SharingMode>,
    /// The types this GPU offers: its mdev types (also those of its VFs, summed), or the
    /// NVIDIA vGPU types its VFs take (empty if it offers none).
    pub types: Vec<MdevType>,
    /// SR-IOV state, if the GPU is a physical function with SR-IOV.
    pub sriov: Option<Sriov>,
    /// For an SR-IOV virtual function (listed only as a parent of mdevs): its physical
    /// function.
    pub physical_function: Option<String>,
    /// What the NVIDIA driver says through NVML (MIG, scheduler); `None` for other GPUs and
    /// where NVML is unavailable.
    pub nvidia: Option<NvidiaState>,
}

/// What NVML reports of an NVIDIA GPU: the state vgpud shows as the GPU's properties.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NvidiaState {
    /// The MIG mode; `None` for a GPU without MIG.
    pub mig: Option<crate::gpu_control::MigMode>,
    /// The GPU-instance profiles (empty without MIG).
    pub profiles: Vec<crate::gpu_control::MigProfile>,
    /// The GPU instances that exist, with the device that uses each.
    pub gpu_instances: Vec<GpuInstanceView>,
    /// The vGPU types NVML knows for the GPU, with their GPU-instance profile.
    pub vgpu_types: Vec<crate::gpu_control::VgpuTypeFacts>,
    /// The vGPU scheduler's state; `None` where NVML does not report it.
    pub scheduler: Option<crate::gpu_control::SchedulerState>,
    /// The heterogeneous vGPU mode as NVML reports it; `None` where it does not.
    pub heterogeneous: Option<bool>,
}

/// A GPU instance and who uses it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuInstanceView {
    /// The instance.
    pub instance: crate::gpu_control::GpuInstance,
    /// Its profile's name without `MIG ` (`1g.18gb`).
    pub profile: String,
    /// The UUID of the vGPU device in it; empty when free.
    pub device: String,
}

impl Gpu {
    /// Whether this entry is a physical GPU (not a virtual function).
    pub fn is_physical(&self) -> bool {
        self.physical_function.is_none()
    }
}

/// Vendor fields parsed from a type's `description`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TypeDetails {
    /// NVIDIA vGPU: `num_heads=4, frl_config=60, framebuffer=1024M, max_resolution=5120x2880,
    /// max_instance=24`.
    Nvidia {
        /// Display heads.
        heads: Option<u32>,
        /// Frame-rate limit in frames per second.
        frame_rate_limit: Option<u32>,
        /// Framebuffer in MiB.
        framebuffer_mib: Option<u64>,
        /// Maximum resolution (width, height).
        max_resolution: Option<(u32, u32)>,
        /// Maximum instances per GPU.
        max_instances: Option<u32>,
    },
    /// Intel GVT-g: `low_gm_size: 128MB`, `high_gm_size: 512MB`, `fence: 4`,
    /// `resolution: 1920x1200`, `weight: 4`.
    Gvtg {
        /// Aperture (low graphics memory) in MiB.
        low_gm_mib: Option<u64>,
        /// Hidden (high graphics memory) in MiB.
        high_gm_mib: Option<u64>,
        /// Fence registers.
        fences: Option<u32>,
        /// Resolution (width, height).
        resolution: Option<(u32, u32)>,
        /// Scheduling weight.
        weight: Option<u32>,
    },
    /// A vendor vgpud does not know, or no description.
    #[default]
    Unknown,
}

/// An mdev type offered by a parent device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MdevType {
    /// The type directory name: `nvidia-259`, `i915-GVTg_V5_4`, `mtty-2`.
    pub id: String,
    /// The `name` attribute: `GRID RTX6000-4Q`; the id when the driver gives no name.
    pub name: String,
    /// The `device_api` attribute (`vfio-pci`).
    pub device_api: String,
    /// The raw `description` attribute, empty when absent.
    pub description: String,
    /// Vendor fields parsed from the description.
    pub details: TypeDetails,
    /// Instances that can still be created, as the driver reports now.
    pub available_instances: u32,
}

impl MdevType {
    /// Framebuffer in bytes, 0 if unknown.
    pub fn framebuffer_bytes(&self) -> u64 {
        match &self.details {
            TypeDetails::Nvidia {
                framebuffer_mib: Some(mib),
                ..
            } => mib * 1024 * 1024,
            _ => 0,
        }
    }

    /// Maximum instances per GPU as the vendor states it, 0 if unknown.
    pub fn max_instances(&self) -> u32 {
        match &self.details {
            TypeDetails::Nvidia {
                max_instances: Some(n),
                ..
            } => *n,
            _ => 0,
        }
    }

    /// The name without its vendor prefix (`GRID RTX6000-4Q` → `RTX6000-4Q`).
    pub fn short_name(&self) -> &str {
        short_type_name(&self.name)
    }

    /// Whether `query` names this type: its id, its name, or its name without the vendor
    /// prefix, compared case-insensitively.
    pub fn matches(&self, query: &str) -> bool {
        type_query_matches(query, &self.id, &self.name)
    }
}

/// A type name without its vendor prefix (`GRID RTX6000-4Q` → `RTX6000-4Q`).
pub fn short_type_name(name: &str) -> &str {
    for prefix in ["GRID ", "NVIDIA "] {
        if let Some(rest) = name.strip_prefix(prefix) {
            return rest;
        }
    }
    name
}

/// Whether `query` names the type `id` / `name`: its id, its name, or its name without the
/// vendor prefix, compared case-insensitively (how `CreateDevice` takes types).
pub fn type_query_matches(query: &str, id: &str, name: &str) -> bool {
    query.eq_ignore_ascii_case(id)
        || query.eq_ignore_ascii_case(name)
        || query.eq_ignore_ascii_case(short_type_name(name))
}

/// A mediated device that exists on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MdevDevice {
    /// Lowercase UUID, the device's sysfs name.
    pub uuid: String,
    /// Parent device name (PCI address or `mtty`).
    pub parent: String,
    /// Type id (`nvidia-259`).
    pub type_id: String,
    /// IOMMU group the kernel gave the device.
    pub iommu_group: Option<u32>,
    /// Vendor attributes (`nvidia/vgpu_params` → value), in path order.
    pub attributes: BTreeMap<String, String>,
}

/// Checks a UUID as the kernel's `guid_parse` does (8-4-4-4-12 hex digits) and returns it in
/// lowercase, the form the kernel names devices with.
pub fn normalize_uuid(s: &str) -> Option<String> {
    let b = s.as_bytes();
    if b.len() != 36 {
        return None;
    }
    for (i, c) in b.iter().enumerate() {
        let ok = match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        };
        if !ok {
            return None;
        }
    }
    Some(s.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(id: &str, name: &str) -> MdevType {
        MdevType {
            id: id.into(),
            name: name.into(),
            device_api: "vfio-pci".into(),
            description: String::new(),
            details: TypeDetails::Unknown,
            available_instances: 0,
        }
    }

    #[test]
    fn types_match_by_id_name_and_short_name() {
        let t = ty("nvidia-259", "GRID RTX6000-4Q");
        assert!(t.matches("nvidia-259"));
        assert!(t.matches("NVIDIA-259"));
        assert!(t.matches("grid rtx6000-4q"));
        assert!(t.matches("RTX6000-4Q"));
        assert!(!t.matches("RTX6000-4"));
        assert!(!t.matches("259"));
        let m = ty("mtty-2", "Dual port serial");
        assert!(m.matches("dual PORT serial"));
        assert_eq!(m.short_name(), "Dual port serial");
    }

    #[test]
    fn uuids_are_checked_like_guid_parse() {
        assert_eq!(
            normalize_uuid("A1B2C3D4-0000-4000-8000-00000000000F").as_deref(),
            Some("a1b2c3d4-0000-4000-8000-00000000000f")
        );
        assert!(normalize_uuid("a1b2c3d4-0000-4000-8000-00000000000").is_none());
        assert!(normalize_uuid("a1b2c3d4x0000-4000-8000-000000000000").is_none());
        assert!(normalize_uuid("../../../../../etc/passwd-000000000000").is_none());
        assert!(normalize_uuid("").is_none());
    }
}
