//! Discovery: reads the host's GPUs, mdev parents, types and devices into the model.
//!
//! Everything is read through [`Host`], so the same code scans a real `/sys` and a simulated
//! tree. Nothing is cached here; the engine decides what to keep.

pub mod console;
pub mod description;
pub mod pci;
pub mod sriov;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::catalog;
use crate::host::{Host, HostError, HostResult};
use crate::model::{
    normalize_uuid, Gpu, MdevDevice, MdevType, SharingMode, TypeDetails, VENDOR_NVIDIA,
};

pub use description::parse_description;

/// PCI base class of display controllers (`0x03xxxx`).
const PCI_CLASS_DISPLAY: u32 = 0x03;

/// Entries of an mdev device directory that are not vendor attributes.
const NON_ATTRIBUTE_ENTRIES: &[&str] = &[
    "driver",
    "iommu_group",
    "mdev_type",
    "power",
    "subsystem",
    "remove",
    "uevent",
];

/// Where a GPU lives in sysfs.
#[derive(Debug, Clone)]
pub struct GpuLocation {
    /// The device directory reached through the bus or class link (stays valid under any
    /// root): `sys/bus/pci/devices/<addr>` or `sys/class/mdev_bus/<name>`.
    pub dir: PathBuf,
    /// Whether the device is an mdev parent (`mdev_supported_types` exists).
    pub is_mdev_parent: bool,
}

/// The directory of an mdev parent: `sys/class/mdev_bus/<parent>`.
pub fn mdev_parent_dir(host: &Host, parent: &str) -> PathBuf {
    host.sys("class/mdev_bus").join(parent)
}

/// The directory of an mdev type of a parent.
pub fn mdev_type_dir(host: &Host, parent: &str, type_id: &str) -> PathBuf {
    mdev_parent_dir(host, parent)
        .join("mdev_supported_types")
        .join(type_id)
}

/// The directory of an existing mdev device: `sys/bus/mdev/devices/<uuid>`.
pub fn mdev_device_dir(host: &Host, uuid: &str) -> PathBuf {
    host.sys("bus/mdev/devices").join(uuid)
}

/// Scans every GPU: PCI display controllers and every mdev parent (also non-PCI ones such
/// as the kernel's `mtty` sample), with their types and SR-IOV state. Virtual functions are
/// listed only where they are mdev parents (NVIDIA Ampere), as entries naming their physical
/// function; the physical GPU then carries their types, summed.
pub fn scan_gpus(host: &Host) -> HostResult<Vec<(Gpu, GpuLocation)>> {
    let mut found: BTreeMap<String, (Gpu, GpuLocation)> = BTreeMap::new();
    for address in host.list_dir(&host.sys("bus/pci/devices"))? {
        if let Some(entry) = read_pci_candidate(host, &address)? {
            found.insert(address, entry);
        }
    }
    for name in host.list_dir(&host.sys("class/mdev_bus"))? {
        if let std::collections::btree_map::Entry::Vacant(place) = found.entry(name) {
            let entry = read_class_parent(host, place.key())?;
            place.insert(entry);
        }
    }
    finish_gpus(host, found)
}

/// What [`scan_gpus`] would list of one GPU: the function `root` (a physical function, or a
/// non-PCI mdev parent) and those of its virtual functions that are mdev parents, read as
/// the whole scan reads them; empty when `root` is no GPU (or is gone). The cost grows with
/// the GPU's VFs, not with the host.
pub fn scan_gpu_family(host: &Host, root: &str) -> HostResult<Vec<(Gpu, GpuLocation)>> {
    let mut found: BTreeMap<String, (Gpu, GpuLocation)> = BTreeMap::new();
    let root_entry = read_pci_candidate(host, root)?;
    let vfs = match root_entry.as_ref().map(|(gpu, _)| gpu.sriov.clone()) {
        Some(sriov) => sriov.map(|s| s.vfs).unwrap_or_default(),
        // Not a GPU itself: its VFs may still be mdev parents.
        None => sriov::read_sriov(host, root)?
            .map(|s| s.vfs)
            .unwrap_or_default(),
    };
    if let Some(entry) = root_entry {
        found.insert(root.to_string(), entry);
    }
    for vf in vfs {
        if let Some(entry) = read_pci_candidate(host, &vf)? {
            found.insert(vf, entry);
        }
    }
    if !found.contains_key(root) && mdev_parent_dir(host, root).is_dir() {
        found.insert(root.to_string(), read_class_parent(host, root)?);
    }
    finish_gpus(host, found)
}

/// A PCI function as [`scan_gpus`] lists it: a display controller that is no virtual
/// function, or any function that is an mdev parent; `None` for others and for one gone.
fn read_pci_candidate(host: &Host, address: &str) -> HostResult<Option<(Gpu, GpuLocation)>> {
    let dir = sriov::pci_dir(host, address);
    let class = match host.read_attr_opt(&dir.join("class"))? {
        Some(c) => crate::host::parse_number(&c).unwrap_or(0) as u32,
        None => return Ok(None),
    };
    let is_mdev_parent = dir.join("mdev_supported_types").is_dir();
    if class >> 16 != PCI_CLASS_DISPLAY && !is_mdev_parent {
        return Ok(None);
    }
    let physical_function = sriov::physical_function(host, address)?;
    if physical_function.is_some() && !is_mdev_parent {
        return Ok(None);
    }
    let mut gpu = read_pci_gpu(host, address, &dir, class)?;
    gpu.physical_function = physical_function;
    if gpu.is_physical() {
        gpu.sriov = sriov::read_sriov(host, address)?;
    }
    Ok(Some((
        gpu,
        GpuLocation {
            dir,
            is_mdev_parent,
        },
    )))
}

/// An mdev parent of another bus (`sys/class/mdev_bus/<name>`, the kernel's `mtty`).
fn read_class_parent(host: &Host, name: &str) -> HostResult<(Gpu, GpuLocation)> {
    let dir = mdev_parent_dir(host, name);
    let driver = host.link_name(&dir.join("driver"))?.unwrap_or_default();
    let gpu = Gpu {
        address: name.to_string(),
        vendor_id: 0,
        device_id: 0,
        class: 0,
        model: name.to_string(),
        driver,
        iommu_group: read_group(host, &dir)?,
        numa_node: None,
        sharing_modes: Vec::new(),
        types: Vec::new(),
        sriov: None,
        physical_function: None,
        nvidia: None,
    };
    Ok((
        gpu,
        GpuLocation {
            dir,
            is_mdev_parent: true,
        },
    ))
}

/// The types, SR-IOV vGPU types and sharing modes of the functions `found`: a physical GPU
/// carries the summed types of its VFs that are mdev parents.
fn finish_gpus(
    host: &Host,
    found: BTreeMap<String, (Gpu, GpuLocation)>,
) -> HostResult<Vec<(Gpu, GpuLocation)>> {
    let mut gpus: Vec<(Gpu, GpuLocation)> = found.into_values().collect();
    for (gpu, loc) in &mut gpus {
        if loc.is_mdev_parent {
            gpu.types = scan_types(host, &loc.dir)?;
            gpu.sharing_modes.push(SharingMode::Mdev);
        }
    }
    let vf_parents: Vec<(String, Vec<MdevType>)> = gpus
        .iter()
        .filter_map(|(g, _)| {
            g.physical_function
                .as_ref()
                .map(|pf| (pf.clone(), g.types.clone()))
        })
        .collect();
    for (gpu, _) in &mut gpus {
        if !gpu.is_physical() {
            continue;
        }
        let of_vfs: Vec<&Vec<MdevType>> = vf_parents
            .iter()
            .filter(|(pf, _)| *pf == gpu.address)
            .map(|(_, t)| t)
            .collect();
        if !of_vfs.is_empty() {
            gpu.types = sum_vf_types(&of_vfs);
            if !gpu.sharing_modes.contains(&SharingMode::Mdev) {
                gpu.sharing_modes.push(SharingMode::Mdev);
            }
        }
        classify_sharing(host, gpu)?;
    }
    Ok(gpus)
}

/// The mdev types of a GPU's virtual functions as one list: each type once, its available
/// instances summed over the VFs and capped by the type's maximum per GPU.
pub fn sum_vf_types(of_vfs: &[&Vec<MdevType>]) -> Vec<MdevType> {
    let mut merged: BTreeMap<String, MdevType> = BTreeMap::new();
    for types in of_vfs {
        for t in types.iter() {
            merged
                .entry(t.id.clone())
                .and_modify(|m| m.available_instances += t.available_instances)
                .or_insert_with(|| t.clone());
        }
    }
    merged
        .into_values()
        .map(|mut t| {
            let max = t.max_instances();
            if max > 0 {
                t.available_instances = t.available_instances.min(max);
            }
            t
        })
        .collect()
}

/// Adds the SR-IOV and passthrough sharing modes, and the vGPU types of NVIDIA
/// vendor-specific VFIO virtual functions.
fn classify_sharing(host: &Host, gpu: &mut Gpu) -> HostResult<()> {
    if let Some(sriov) = &gpu.sriov {
        if gpu.vendor_id == VENDOR_NVIDIA {
            let mut vfs = Vec::new();
            for vf in &sriov.vfs {
                if let Some(state) = sriov::read_vf_vgpu(host, vf)? {
                    vfs.push(state);
                }
            }
            if !vfs.is_empty() {
                gpu.types = vgpu_types(&gpu.model, &vfs, false);
                gpu.sharing_modes.push(SharingMode::SriovVgpu);
            } else if gpu.types.is_empty() && sriov.num_vfs == 0 {
                // VFs not enabled yet: the board's types, none available until they are.
                gpu.types = vgpu_types(&gpu.model, &[], false);
            }
        } else if sriov.total_vfs > 0 {
            gpu.sharing_modes.push(SharingMode::SriovVf);
        }
    }
    if gpu.class >> 16 == PCI_CLASS_DISPLAY && gpu.iommu_group.is_some() {
        gpu.sharing_modes.push(SharingMode::Passthrough);
    }
    Ok(())
}

/// The vGPU types of a GPU whose VFs use NVIDIA's vendor-specific VFIO framework: every type
/// of the board the catalog knows and every type a VF lists, as `nvidia-<id>`. A type's
/// available instances are the free VFs that list it, capped: in equal-size mode by its
/// maximum per GPU less the vGPUs the GPU runs; in heterogeneous mode (`heterogeneous`) by
/// its free placements (see [`catalog::nvidia_placement`]), the taken ones read from the VFs'
/// `placement_id`.
pub fn vgpu_types(model: &str, vfs: &[sriov::VfVgpu], heterogeneous: bool) -> Vec<MdevType> {
    let mut names: BTreeMap<u32, String> = BTreeMap::new();
    for info in catalog::nvidia_board_types(model) {
        names.insert(info.id, info.name.to_string());
    }
    for vf in vfs {
        for c in &vf.creatable {
            names.entry(c.id).or_insert_with(|| c.name.clone());
        }
    }
    let used = u32::try_from(vfs.iter().filter(|v| v.current != 0).count()).unwrap_or(u32::MAX);
    names
        .into_iter()
        .map(|(id, name)| {
            let listing = vfs
                .iter()
                .filter(|v| v.current == 0 && v.creatable.iter().any(|c| c.id == id))
                .count();
            let mut details = catalog_details(&name);
            if details == TypeDetails::Unknown {
                details = size_from_name(&name);
            }
            let mut t = MdevType {
                id: format!("nvidia-{id}"),
                device_api: "vfio-pci".into(),
                description: String::new(),
                details,
                available_instances: u32::try_from(listing).unwrap_or(u32::MAX),
                name,
            };
            if heterogeneous {
                if let Some(free) = free_placements(model, &t, vfs) {
                    t.available_instances = t.available_instances.min(free);
                }
                return t;
            }
            let max = t.max_instances();
            if max > 0 {
                t.available_instances = t.available_instances.min(max.saturating_sub(used));
            }
            t
        })
        .collect()
}

/// In heterogeneous mode, the placements of a type that no vGPU overlaps; `None` when the
/// board or the type's size is unknown.
fn free_placements(model: &str, t: &MdevType, vfs: &[sriov::VfVgpu]) -> Option<u32> {
    let free = free_placement_ids(model, t.framebuffer_bytes() >> 30, vfs)?;
    u32::try_from(free.len()).ok()
}

/// In heterogeneous mode, the placement ids a vGPU of `type_gib` can take on the board
/// `model` whose VFs are `vfs`, lowest first; `None` when the board is unknown.
pub fn free_placement_ids(model: &str, type_gib: u64, vfs: &[sriov::VfVgpu]) -> Option<Vec<u64>> {
    let board = catalog::nvidia_board_framebuffer_gib(model)?;
    let taken: Vec<(u64, u64)> = vfs
        .iter()
        .filter(|v| v.current != 0)
        .filter_map(|v| {
            let gib = catalog::nvidia_type_by_id(v.current)?.framebuffer_mib / 1024;
            Some((v.placement_id?, gib))
        })
        .collect();
    Some(catalog::nvidia_free_placements(board, type_gib, &taken))
}

/// The framebuffer size a type's name gives (`L40S-4Q` = 4 GiB), for types no table knows.
fn size_from_name(name: &str) -> TypeDetails {
    let size = name
        .rsplit('-')
        .next()
        .map(|s| s.trim_end_matches(|c: char| c.is_ascii_alphabetic()))
        .and_then(|s| s.parse::<u64>().ok());
    match size {
        Some(gib) => TypeDetails::Nvidia {
            heads: None,
            frame_rate_limit: None,
            framebuffer_mib: Some(gib * 1024),
            max_resolution: None,
            max_instances: None,
        },
        None => TypeDetails::Unknown,
    }
}

fn read_pci_gpu(host: &Host, address: &str, dir: &Path, class: u32) -> HostResult<Gpu> {
    let vendor_id = host.read_number(&dir.join("vendor")).unwrap_or(0) as u16;
    let device_id = host.read_number(&dir.join("device")).unwrap_or(0) as u16;
    let numa_node = match host.read_attr_opt(&dir.join("numa_node"))? {
        Some(s) => s
            .trim()
            .parse::<i64>()
            .ok()
            .and_then(|n| u32::try_from(n).ok()),
        None => None,
    };
    let sub_vendor = host.read_number(&dir.join("subsystem_vendor")).unwrap_or(0) as u16;
    let sub_device = host.read_number(&dir.join("subsystem_device")).unwrap_or(0) as u16;
    let model =
        catalog::pci_model_name_with_subsystem(vendor_id, device_id, sub_vendor, sub_device)
            .map(str::to_string)
            .unwrap_or_else(|| format!("PCI device {vendor_id:04x}:{device_id:04x}"));
    Ok(Gpu {
        address: address.to_string(),
        vendor_id,
        device_id,
        class,
        model,
        driver: host.link_name(&dir.join("driver"))?.unwrap_or_default(),
        iommu_group: read_group(host, dir)?,
        numa_node,
        sharing_modes: Vec::new(),
        types: Vec::new(),
        sriov: None,
        physical_function: None,
        nvidia: None,
    })
}

fn read_group(host: &Host, dir: &Path) -> HostResult<Option<u32>> {
    Ok(host
        .link_name(&dir.join("iommu_group"))?
        .and_then(|n| n.parse().ok()))
}

/// Reads the mdev types of a parent directory.
pub fn scan_types(host: &Host, parent_dir: &Path) -> HostResult<Vec<MdevType>> {
    let types_dir = parent_dir.join("mdev_supported_types");
    let mut types = Vec::new();
    for id in host.list_dir(&types_dir)? {
        let dir = types_dir.join(&id);
        if !dir.is_dir() {
            continue;
        }
        types.push(read_type(host, &id, &dir)?);
    }
    Ok(types)
}

fn read_type(host: &Host, id: &str, dir: &Path) -> HostResult<MdevType> {
    let name = host
        .read_attr_opt(&dir.join("name"))?
        .unwrap_or_else(|| id.to_string());
    let description = host
        .read_attr_opt(&dir.join("description"))?
        .unwrap_or_default();
    let mut details = parse_description(&description);
    if details == TypeDetails::Unknown && id.starts_with("nvidia-") {
        details = catalog_details(&name);
    }
    Ok(MdevType {
        id: id.to_string(),
        device_api: host
            .read_attr_opt(&dir.join("device_api"))?
            .unwrap_or_default(),
        available_instances: read_available(host, dir)?,
        name,
        description,
        details,
    })
}

/// NVIDIA drivers that print no description: the fields come from the built-in table.
fn catalog_details(name: &str) -> TypeDetails {
    match catalog::nvidia_type_by_name(name) {
        Some(info) => TypeDetails::Nvidia {
            heads: Some(info.heads),
            frame_rate_limit: Some(info.frl),
            framebuffer_mib: Some(info.framebuffer_mib),
            max_resolution: Some(info.max_resolution),
            max_instances: Some(info.max_instances),
        },
        None => TypeDetails::Unknown,
    }
}

/// Reads `available_instances` of a type directory.
pub fn read_available(host: &Host, type_dir: &Path) -> HostResult<u32> {
    let path = type_dir.join("available_instances");
    let n = host.read_number(&path)?;
    u32::try_from(n).map_err(|_| HostError::Parse {
        path,
        reason: format!("{n} is not a count"),
    })
}

/// Scans every mdev device on the host, also those created outside vgpud. An entry whose
/// parent or type does not resolve is skipped, as mdevctl counts it inactive.
pub fn scan_devices(host: &Host) -> HostResult<Vec<MdevDevice>> {
    let dir = host.sys("bus/mdev/devices");
    let mut devices = Vec::new();
    for name in host.list_dir(&dir)? {
        if let Some(dev) = read_device(host, &name)? {
            devices.push(dev);
        }
    }
    Ok(devices)
}

/// How long [`read_device_settled`] waits for a device the kernel is still making (the VM
/// suite's emulated kernel once took more than 100 ms).
const SETTLE: std::time::Duration = std::time::Duration::from_millis(500);

/// Reads one mdev as [`read_device`] does, for a uevent about it. The kernel announces a
/// new mdev (`add`, then `bind` to its driver) before it links the mdev's `mdev_type`
/// (mdev_core.c: `device_add`, `device_driver_attach`, then `mdev_create_sysfs_files`), so a
/// reading right after the event may find the bus entry without its type. Such a device is
/// read again every millisecond, for at most 500 ms, until it is whole.
pub fn read_device_settled(host: &Host, uuid: &str) -> HostResult<Option<MdevDevice>> {
    let deadline = std::time::Instant::now() + SETTLE;
    loop {
        let device = read_device(host, uuid)?;
        if device.is_some() || std::time::Instant::now() >= deadline || !being_made(host, uuid) {
            return Ok(device);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Whether the bus lists `uuid` while its `mdev_type` link is not there yet.
fn being_made(host: &Host, uuid: &str) -> bool {
    let Some(uuid) = normalize_uuid(uuid) else {
        return false;
    };
    let dir = mdev_device_dir(host, &uuid);
    dir.is_dir() && std::fs::symlink_metadata(dir.join("mdev_type")).is_err()
}

/// Reads one mdev device by UUID, `None` if it does not exist (or does not resolve).
pub fn read_device(host: &Host, uuid: &str) -> HostResult<Option<MdevDevice>> {
    let Some(uuid) = normalize_uuid(uuid) else {
        return Ok(None);
    };
    let link = mdev_device_dir(host, &uuid);
    // The bus entry links to `…/<parent>/<uuid>`: the parent is the component before the
    // UUID. Reading the one link is much cheaper than resolving the whole path.
    let target = match std::fs::read_link(&link) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(HostError::Read { path: link, source }),
    };
    let Some(parent) = target
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|p| p != ".." && p != ".")
    else {
        return Ok(None);
    };
    // `link` goes through the symlink to the device directory.
    let resolved = link;
    if !resolved.is_dir() {
        return Ok(None);
    }
    let Some(type_id) = host.link_name(&resolved.join("mdev_type"))? else {
        return Ok(None);
    };
    Ok(Some(MdevDevice {
        uuid,
        parent,
        type_id,
        iommu_group: read_group(host, &resolved)?,
        attributes: read_attributes(host, &resolved)?,
    }))
}

/// Vendor attributes: the readable files in the device's sub-directories (`nvidia/`,
/// `vendor/`), keyed by their path relative to the device.
fn read_attributes(host: &Host, dev_dir: &Path) -> HostResult<BTreeMap<String, String>> {
    let mut attrs = BTreeMap::new();
    for group in host.list_dir(dev_dir)? {
        if NON_ATTRIBUTE_ENTRIES.contains(&group.as_str()) {
            continue;
        }
        let group_dir = dev_dir.join(&group);
        let is_real_dir = std::fs::symlink_metadata(&group_dir)
            .map(|m| m.is_dir())
            .unwrap_or(false);
        if !is_real_dir {
            continue;
        }
        for file in host.list_dir(&group_dir)? {
            // Write-only and failing attributes are not state to report.
            if let Ok(value) = host.read_attr(&group_dir.join(&file)) {
                attrs.insert(format!("{group}/{file}"), value);
            }
        }
    }
    Ok(attrs)
}

#[cfg(test)]
mod simulated_host_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn host(profiles: &[&str]) -> (tempfile::TempDir, Host) {
        let dir = tempfile::tempdir().expect("tempdir");
        for p in profiles {
            vgpud_sim::write_profile(p, dir.path()).expect("profile");
        }
        let host = Host::new(dir.path());
        (dir, host)
    }

    #[test]
    fn gpus_are_display_devices_and_mdev_parents_only() {
        let (_d, h) = host(&["mixed"]);
        let gpus = scan_gpus(&h).expect("scan");
        let names: Vec<&str> = gpus.iter().map(|(g, _)| g.address.as_str()).collect();
        assert_eq!(gpus.len(), 4, "{names:?}");
        for (g, loc) in &gpus {
            assert!(loc.is_mdev_parent, "{}", g.address);
            let expected = if g.address == "mtty" {
                vec![SharingMode::Mdev]
            } else {
                vec![SharingMode::Mdev, SharingMode::Passthrough]
            };
            assert_eq!(g.sharing_modes, expected, "{}", g.address);
            if g.address != "mtty" {
                assert_eq!(g.class >> 16, 0x03, "{}", g.address);
                assert!(g.iommu_group.is_some(), "{}", g.address);
                assert!(g.numa_node.is_some() || g.vendor_id == crate::model::VENDOR_INTEL);
                assert!(!g.model.starts_with("PCI device"), "{}", g.model);
            }
        }
        let nvidia: Vec<_> = gpus.iter().filter(|(g, _)| g.driver == "nvidia").collect();
        assert_eq!(nvidia.len(), 2);
        let ty = nvidia[0]
            .0
            .types
            .iter()
            .find(|t| t.short_name() == "RTX6000-4Q")
            .expect("4Q");
        assert_eq!(ty.framebuffer_bytes(), 4 << 30);
        assert_eq!(ty.max_instances(), 6);
        assert_eq!(ty.available_instances, 6);
        assert_eq!(ty.device_api, "vfio-pci");
    }

    #[test]
    fn a_gpu_without_mdev_support_is_listed_without_types() {
        let (_d, h) = host(&["nvidia-turing"]);
        let (gpu, loc) = scan_gpus(&h)
            .expect("scan")
            .into_iter()
            .find(|(g, _)| g.driver == "nvidia")
            .expect("gpu");
        std::fs::remove_dir_all(loc.dir.join("mdev_supported_types")).expect("strip");
        let again = scan_gpus(&h).expect("scan");
        let same = again
            .iter()
            .find(|(g, _)| g.address == gpu.address)
            .expect("still a GPU: class 0x03");
        assert!(same.0.types.is_empty());
        assert_eq!(same.0.sharing_modes, vec![SharingMode::Passthrough]);
    }

    #[test]
    fn devices_are_read_with_parent_type_group_and_attributes() {
        let (d, _) = host(&["mtty"]);
        let h = Host::simulated(d.path());
        let uuid = "0c0c0c0c-0000-4000-8000-000000000001";
        h.write_attr(
            &mdev_type_dir(&h, "mtty", "mtty-2").join("create"),
            &uuid.to_uppercase(),
        )
        .expect("create");
        let devs = scan_devices(&h).expect("scan");
        assert_eq!(devs.len(), 1);
        assert_eq!(devs[0].uuid, uuid);
        assert_eq!(devs[0].parent, "mtty");
        assert_eq!(devs[0].type_id, "mtty-2");
        assert!(devs[0].iommu_group.is_some());
        assert!(devs[0].attributes.keys().all(|k| k.starts_with("vendor/")));
        assert_eq!(read_device(&h, "not-a-uuid").expect("read"), None);
        // A dangling entry counts as not there, as for mdevctl.
        std::fs::remove_file(
            d.path()
                .join("sys/bus/mdev/devices")
                .join(uuid)
                .join("mdev_type"),
        )
        .expect("break link");
        assert!(scan_devices(&h).expect("scan").is_empty());
    }

    #[test]
    fn a_uevent_reading_waits_for_the_type_link_the_kernel_makes_last() {
        let (d, _) = host(&["mtty"]);
        let h = Host::simulated(d.path());
        let uuid = "0c0c0c0c-0000-4000-8000-000000000002";
        h.write_attr(&mdev_type_dir(&h, "mtty", "mtty-2").join("create"), uuid)
            .expect("create");
        let link = d
            .path()
            .join("sys/bus/mdev/devices")
            .join(uuid)
            .join("mdev_type");
        let target = std::fs::read_link(&link).expect("type link");
        std::fs::remove_file(&link).expect("unlink");
        // Never linked: given up on after the settling time, as not there.
        let start = std::time::Instant::now();
        assert_eq!(read_device_settled(&h, uuid).expect("read"), None);
        assert!(start.elapsed() >= SETTLE);
        // Linked 20 ms after the event: read whole.
        let relink = {
            let (target, link) = (target.clone(), link.clone());
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                std::os::unix::fs::symlink(target, link).expect("relink");
            })
        };
        assert_eq!(read_device(&h, uuid).expect("read"), None);
        let dev = read_device_settled(&h, uuid).expect("read").expect("whole");
        assert_eq!(dev.type_id, "mtty-2");
        relink.join().expect("relink thread");
        // A device that is not there at all is not waited for.
        let start = std::time::Instant::now();
        let absent = "0c0c0c0c-0000-4000-8000-000000000003";
        assert_eq!(read_device_settled(&h, absent).expect("read"), None);
        assert!(start.elapsed() < SETTLE);
    }
}
