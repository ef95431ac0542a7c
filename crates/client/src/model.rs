//! Typed answers of `org.vgpud1`, with the stable JSON schema vgpuctl prints (`--json`):
//! field names in snake_case, sizes in bytes, absent facts as empty strings or -1 as the
//! D-Bus API says them.

use std::collections::BTreeMap;

use serde::Serialize;
use zbus::{OwnedVariant, Variant};

use crate::proxy::{Dict, GpuInstanceRow, MigProfileRow};

/// A GPU as `ListGpus` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuSummary {
    /// PCI address (or an mdev parent's name, such as `mtty`).
    pub address: String,
    /// Model name.
    pub model: String,
    /// Bound driver.
    pub driver: String,
    /// Sharing modes offered: `mdev`, `sriov-vgpu`, `sriov-vf`, `passthrough`.
    pub sharing_modes: Vec<String>,
    /// Object path.
    pub path: String,
}

/// A type of a GPU as `ListTypes` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TypeSummary {
    /// The GPU offering it.
    pub gpu: String,
    /// Type id (`nvidia-259`).
    pub id: String,
    /// Type name (`GRID RTX6000-4Q`).
    pub name: String,
    /// Framebuffer bytes (0: unknown).
    pub framebuffer: u64,
    /// Most instances on the GPU (0: unknown).
    pub max_instances: u32,
    /// Instances that can still be made now.
    pub available: u32,
}

/// A device as `ListDevices` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceSummary {
    /// UUID.
    pub uuid: String,
    /// Its GPU.
    pub gpu: String,
    /// Type id.
    pub type_id: String,
    /// Owner tag (empty: none).
    pub owner: String,
    /// Object path.
    pub path: String,
}

/// Every property of a GPU object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuDetails {
    /// PCI address.
    pub address: String,
    /// Model name.
    pub model: String,
    /// PCI vendor id.
    pub vendor_id: u16,
    /// PCI device id.
    pub device_id: u16,
    /// Bound driver.
    pub driver: String,
    /// IOMMU group (-1: none).
    pub iommu_group: i32,
    /// NUMA node (-1: none).
    pub numa_node: i32,
    /// Sharing modes.
    pub sharing_modes: Vec<String>,
    /// Type ids offered.
    pub types: Vec<String>,
    /// Device objects on it.
    pub devices: Vec<String>,
    /// `sriov_totalvfs`.
    pub total_vfs: u32,
    /// VFs enabled.
    pub num_vfs: u32,
    /// The VFs' addresses.
    pub vfs: Vec<String>,
    /// NVIDIA heterogeneous (mixed-size) mode.
    pub heterogeneous_mode: bool,
    /// MIG mode now.
    pub mig_current: bool,
    /// MIG mode after the next reset.
    pub mig_pending: bool,
    /// GPU instances.
    pub gpu_instances: Vec<GpuInstance>,
    /// The vGPU scheduler (`policy`, `arr`, `timeslice_ms`, ...); empty where unknown.
    pub scheduler: BTreeMap<String, serde_json::Value>,
}

/// Every property of a device object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceDetails {
    /// UUID.
    pub uuid: String,
    /// `mdev`, `sriov-vgpu` or `passthrough`.
    pub kind: String,
    /// mdev parent, VF or GPU.
    pub parent: String,
    /// The physical GPU's address.
    pub gpu: String,
    /// The VF of an active SR-IOV vGPU, the function passed through.
    pub address: String,
    /// A passthrough device's functions and the driver each goes back to.
    pub functions: Vec<(String, String)>,
    /// Type id.
    pub type_id: String,
    /// Type name.
    pub type_name: String,
    /// Owner tag.
    pub owner: String,
    /// IOMMU group (-1: none).
    pub iommu_group: i32,
    /// mdev attributes.
    pub attributes: BTreeMap<String, String>,
    /// Exists on the host now.
    pub active: bool,
    /// Defined across reboots.
    pub persistent: bool,
    /// Started when its GPU appears.
    pub autostart: bool,
    /// Unix seconds.
    pub created: u64,
}

/// A GPU instance (MIG).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuInstance {
    /// Instance id.
    pub id: u32,
    /// Profile id.
    pub profile_id: u32,
    /// Profile name (`3g.71gb`).
    pub profile: String,
    /// Placement start.
    pub start: u32,
    /// Placement size.
    pub size: u32,
    /// The device using it (empty: none).
    pub device: String,
}

impl From<GpuInstanceRow> for GpuInstance {
    fn from((id, profile_id, profile, start, size, device): GpuInstanceRow) -> Self {
        GpuInstance {
            id,
            profile_id,
            profile,
            start,
            size,
            device,
        }
    }
}

/// A placement: start and size in memory slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// First slice.
    pub start: u32,
    /// Slices.
    pub size: u32,
}

/// A GPU-instance profile (MIG).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MigProfile {
    /// Profile ID (what creates take).
    pub id: u32,
    /// NVML's index.
    pub index: u32,
    /// Name (`1g.18gb`).
    pub name: String,
    /// Compute slices.
    pub slices: u32,
    /// Memory bytes.
    pub memory: u64,
    /// Most instances.
    pub max_instances: u32,
    /// Instances that can still be made.
    pub remaining: u32,
    /// Every placement.
    pub placements: Vec<Placement>,
    /// The free ones.
    pub free_placements: Vec<Placement>,
}

impl From<MigProfileRow> for MigProfile {
    fn from(r: MigProfileRow) -> Self {
        let places = |v: Vec<(u32, u32)>| {
            v.into_iter()
                .map(|(start, size)| Placement { start, size })
                .collect()
        };
        MigProfile {
            id: r.0,
            index: r.1,
            name: r.2,
            slices: r.3,
            memory: r.4,
            max_instances: r.5,
            remaining: r.6,
            placements: places(r.7),
            free_placements: places(r.8),
        }
    }
}

/// A layout file in `etc/vgpud/layouts`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayoutSummary {
    /// Name (the file's stem).
    pub name: String,
    /// Its description.
    pub description: String,
}

/// A step of `ApplyLayout`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayoutStep {
    /// `planned` (a dry run), `done`, `failed`, `refused` (something in the way, named in
    /// `detail`) or `skipped` (an earlier step of its GPU did not succeed).
    pub status: String,
    /// The GPU.
    pub gpu: String,
    /// `set-vf-count`, `set-mig-mode`, `destroy-gpu-instance`, `create-gpu-instance`,
    /// `set-heterogeneous-mode`, `set-scheduler`, `remove-device`, `create-device`.
    pub action: String,
    /// What it acts on or sets (a count, `on`, a profile, a UUID, a type).
    pub subject: String,
    /// What came of it, or why not.
    pub detail: String,
}

/// What differs between a layout and the host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayoutDiff {
    /// The GPU.
    pub gpu: String,
    /// What: `vfs`, `mig`, `gpu-instances`, `heterogeneous`, `scheduler`, `devices TYPE owner POOL`.
    pub item: String,
    /// What the layout says.
    pub wanted: String,
    /// What the host has.
    pub actual: String,
}

/// A dictionary answer as JSON values, in key order.
pub fn dict_to_json(d: &Dict) -> BTreeMap<String, serde_json::Value> {
    d.iter()
        .map(|(k, v)| (k.clone(), value_to_json(v)))
        .collect()
}

/// A D-Bus value as JSON: numbers, booleans, strings, arrays, dictionaries and structures
/// (as arrays); anything else as its D-Bus text.
pub fn value_to_json(v: &OwnedVariant) -> serde_json::Value {
    plain_to_json(v)
}

fn plain_to_json(v: &Variant<'_>) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        Variant::U8(n) => J::from(*n),
        Variant::Bool(b) => J::from(*b),
        Variant::I16(n) => J::from(*n),
        Variant::U16(n) => J::from(*n),
        Variant::I32(n) => J::from(*n),
        Variant::U32(n) => J::from(*n),
        Variant::I64(n) => J::from(*n),
        Variant::U64(n) => J::from(*n),
        Variant::F64(n) => J::from(*n),
        Variant::Str(s) => J::from(s.as_str()),
        Variant::ObjectPath(p) => J::from(p.as_str()),
        Variant::Signature(s) => J::from(s.to_string()),
        Variant::Variant(inner) => plain_to_json(inner),
        Variant::Array(a) => J::Array(a.iter().map(plain_to_json).collect()),
        Variant::Structure(s) => J::Array(s.fields().iter().map(plain_to_json).collect()),
        Variant::Dict(d) => {
            let mut map = serde_json::Map::new();
            for (k, v) in d.iter() {
                let key = match plain_to_json(k) {
                    J::String(s) => s,
                    other => other.to_string(),
                };
                map.insert(key, plain_to_json(v));
            }
            J::Object(map)
        }
        #[allow(unreachable_patterns)]
        other => J::from(format!("{other:?}")),
    }
}
