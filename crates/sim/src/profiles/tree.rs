//! Writing a sysfs-like tree: files with their modes, relative links, PCI functions with their
//! bus, driver and IOMMU-group entries, and mdev parents with their types.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::fsx;
use crate::rules::{self, Change, Vendor};
use crate::SimError;

/// A tree being written, rooted at a canonical path.
pub(crate) struct Tree {
    root: PathBuf,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SimError + '_ {
    move |source| SimError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Tree {
    /// Creates `root` if needed and resolves it, so that relative links are computed between
    /// canonical paths.
    pub(crate) fn new(root: &Path) -> Result<Tree, SimError> {
        fs::create_dir_all(root).map_err(io_err(root))?;
        let root = fs::canonicalize(root).map_err(io_err(root))?;
        Ok(Tree { root })
    }

    /// The canonical root.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// `ROOT/<rel>`.
    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Creates directory `rel` and its parents.
    pub(crate) fn dir(&self, rel: &str) -> Result<PathBuf, SimError> {
        let p = self.path(rel);
        fs::create_dir_all(&p).map_err(io_err(&p))?;
        Ok(p)
    }

    /// Writes file `rel` with `content` and `mode` (read-only attributes 0444, write-only
    /// 0200, read-write 0644), creating its directory.
    pub(crate) fn file(&self, rel: &str, content: &str, mode: u32) -> Result<(), SimError> {
        let p = self.path(rel);
        if let Some(dir) = p.parent() {
            fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        fsx::write_atomic(&p, content, mode).map_err(io_err(&p))
    }

    /// Writes file `rel` only when it does not exist yet (values the simulator owns).
    pub(crate) fn file_if_missing(
        &self,
        rel: &str,
        content: &str,
        mode: u32,
    ) -> Result<(), SimError> {
        if fsx::exists_nofollow(&self.path(rel)) {
            return Ok(());
        }
        self.file(rel, content, mode)
    }

    /// Makes `rel` a relative link to `target_rel` (both relative to the root).
    pub(crate) fn link(&self, rel: &str, target_rel: &str) -> Result<(), SimError> {
        let p = self.path(rel);
        if let Some(dir) = p.parent() {
            fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        fsx::symlink_rel(&p, &self.path(target_rel)).map_err(io_err(&p))
    }

    /// Creates the directory of a driver on a bus with its control files.
    pub(crate) fn driver(&self, bus: &str, driver: &str) -> Result<String, SimError> {
        let dir = format!("sys/bus/{bus}/drivers/{driver}");
        self.dir(&dir)?;
        for f in ["bind", "unbind", "uevent"] {
            self.file_if_missing(&format!("{dir}/{f}"), "", 0o200)?;
        }
        if bus == "pci" {
            for f in ["new_id", "remove_id"] {
                self.file_if_missing(&format!("{dir}/{f}"), "", 0o200)?;
            }
        }
        Ok(dir)
    }

    /// Adds a device to IOMMU group `group` (created with its `type` and `reserved_regions`).
    pub(crate) fn iommu_group(
        &self,
        group: u32,
        name: &str,
        dev_rel: &str,
    ) -> Result<(), SimError> {
        let g = format!("sys/kernel/iommu_groups/{group}");
        self.file(&format!("{g}/type"), "DMA\n", 0o644)?;
        self.file(
            &format!("{g}/reserved_regions"),
            "0x00000000fee00000 0x00000000feefffff msi\n",
            0o444,
        )?;
        self.link(&format!("{g}/devices/{name}"), dev_rel)?;
        self.link(&format!("{dev_rel}/iommu_group"), &g)
    }
}

/// A PCI base address register: index in the `resource` file, start, size, flags.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bar {
    pub(crate) index: usize,
    pub(crate) start: u64,
    pub(crate) size: u64,
    pub(crate) flags: u64,
}

/// `resource` flags of a 32-bit non-prefetchable memory BAR.
pub(crate) const MEM32: u64 = 0x0004_0200;
/// `resource` flags of a 64-bit non-prefetchable memory BAR.
pub(crate) const MEM64: u64 = 0x0014_0204;
/// `resource` flags of a 64-bit prefetchable memory BAR.
pub(crate) const MEM64_PREF: u64 = 0x0014_220c;
/// `resource` flags of an I/O port BAR.
pub(crate) const IO: u64 = 0x0004_0101;

/// A PCI function to write.
#[derive(Debug, Clone)]
pub(crate) struct PciFn {
    /// Path below `sys/devices`: `pci0000:3a/0000:3a:00.0/0000:3b:00.0`.
    pub(crate) path: String,
    pub(crate) vendor: u16,
    pub(crate) device: u16,
    pub(crate) subsystem: (u16, u16),
    pub(crate) class: u32,
    pub(crate) revision: u8,
    pub(crate) numa_node: i32,
    pub(crate) driver: Option<&'static str>,
    pub(crate) iommu_group: Option<u32>,
    pub(crate) bars: Vec<Bar>,
    /// For a bridge, the bus number behind it.
    pub(crate) secondary_bus: Option<u8>,
}

impl PciFn {
    /// The function's address, the last component of its path.
    pub(crate) fn bdf(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    /// `sys/devices/<path>`.
    pub(crate) fn rel(&self) -> String {
        format!("sys/devices/{}", self.path)
    }
}

/// The `resource` file: one `0x%016llx 0x%016llx 0x%016llx` line per resource; 13 for an
/// endpoint (6 BARs, ROM, 6 SR-IOV BARs), 17 for a bridge (plus 4 windows).
fn resource_file(bars: &[Bar], bridge: bool) -> String {
    let lines = if bridge { 17 } else { 13 };
    let mut out = String::new();
    for i in 0..lines {
        let (start, end, flags) = match bars.iter().find(|b| b.index == i) {
            Some(b) if b.size > 0 => (b.start, b.start + b.size - 1, b.flags),
            _ => (0, 0, 0),
        };
        out.push_str(&format!("0x{start:016x} 0x{end:016x} 0x{flags:016x}\n"));
    }
    out
}

/// Writes a PCI function: its attributes, `driver`/`subsystem`/`iommu_group` links,
/// `sys/bus/pci/devices/<bdf>`, the driver's entry, and for a bridge its `pci_bus/` child.
pub(crate) fn write_pci(tree: &Tree, f: &PciFn) -> Result<String, SimError> {
    let rel = f.rel();
    let bdf = f.bdf().to_string();
    tree.dir(&rel)?;
    let attrs = [
        ("vendor", format!("0x{:04x}\n", f.vendor)),
        ("device", format!("0x{:04x}\n", f.device)),
        ("subsystem_vendor", format!("0x{:04x}\n", f.subsystem.0)),
        ("subsystem_device", format!("0x{:04x}\n", f.subsystem.1)),
        ("class", format!("0x{:06x}\n", f.class)),
        ("revision", format!("0x{:02x}\n", f.revision)),
        ("numa_node", format!("{}\n", f.numa_node)),
        (
            "resource",
            resource_file(&f.bars, f.secondary_bus.is_some()),
        ),
        ("enable", "1\n".to_string()),
    ];
    for (name, value) in &attrs {
        tree.file(&format!("{rel}/{name}"), value, 0o444)?;
    }
    tree.file(&format!("{rel}/driver_override"), "(null)\n", 0o644)?;
    let modalias = format!(
        "pci:v{:08X}d{:08X}sv{:08X}sd{:08X}bc{:02X}sc{:02X}i{:02X}",
        f.vendor,
        f.device,
        f.subsystem.0,
        f.subsystem.1,
        f.class >> 16,
        (f.class >> 8) & 0xff,
        f.class & 0xff
    );
    let mut uevent = String::new();
    if let Some(d) = f.driver {
        uevent.push_str(&format!("DRIVER={d}\n"));
    }
    uevent.push_str(&format!(
        "PCI_CLASS={:X}\nPCI_ID={:04X}:{:04X}\nPCI_SUBSYS_ID={:04X}:{:04X}\nPCI_SLOT_NAME={bdf}\nMODALIAS={modalias}\n",
        f.class, f.vendor, f.device, f.subsystem.0, f.subsystem.1
    ));
    tree.file(&format!("{rel}/uevent"), &uevent, 0o644)?;
    tree.link(&format!("{rel}/subsystem"), "sys/bus/pci")?;
    tree.link(&format!("sys/bus/pci/devices/{bdf}"), &rel)?;
    if let Some(d) = f.driver {
        let dir = tree.driver("pci", d)?;
        tree.link(&format!("{dir}/{bdf}"), &rel)?;
        tree.link(&format!("{rel}/driver"), &dir)?;
    }
    if let Some(g) = f.iommu_group {
        tree.iommu_group(g, &bdf, &rel)?;
    }
    if let Some(bus) = f.secondary_bus {
        let domain = bdf.split(':').next().unwrap_or("0000");
        tree.dir(&format!("{rel}/pci_bus/{domain}:{bus:02x}"))?;
    }
    Ok(rel)
}

/// Writes the root complex directory `sys/devices/pci<domain>:<bus>` with its `pci_bus/`.
pub(crate) fn write_root_complex(tree: &Tree, domain: u16, bus: u8) -> Result<(), SimError> {
    tree.dir(&format!(
        "sys/devices/pci{domain:04x}:{bus:02x}/pci_bus/{domain:04x}:{bus:02x}"
    ))?;
    Ok(())
}

/// An mdev type to offer: id (directory name), `name`, optional `description`.
pub(crate) struct TypeSpec {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) description: Option<String>,
}

/// Makes the device at `dev_rel` an mdev parent named `name` offering `types`, bound to the
/// mdev driver `mdev_driver`, and computes each type's initial `available_instances` with the
/// simulator's own rules.
pub(crate) fn write_mdev_parent(
    tree: &Tree,
    dev_rel: &str,
    name: &str,
    mdev_driver: &str,
    types: &[TypeSpec],
) -> Result<(), SimError> {
    for t in types {
        let dir = format!("{dev_rel}/mdev_supported_types/{}", t.id);
        tree.file(&format!("{dir}/name"), &format!("{}\n", t.name), 0o444)?;
        tree.file(&format!("{dir}/device_api"), "vfio-pci\n", 0o444)?;
        if let Some(d) = &t.description {
            tree.file(&format!("{dir}/description"), d, 0o444)?;
        }
        tree.file_if_missing(&format!("{dir}/available_instances"), "0\n", 0o444)?;
        tree.file(&format!("{dir}/create"), "", 0o200)?;
        tree.dir(&format!("{dir}/devices"))?;
    }
    tree.driver("mdev", mdev_driver)?;
    let parent = tree.path(dev_rel);
    let refresh = Vendor::of(&parent).and_then(|v| rules::refresh(&parent, &v, Change::None));
    refresh.map_err(io_err(&parent))?;
    // Published last, as the kernel registers the parent once its types are in place: a
    // reader that finds the parent finds it whole, with its capacity.
    tree.link(&format!("sys/class/mdev_bus/{name}"), dev_rel)?;
    crate::uevent::registered(tree.root(), &parent);
    Ok(())
}
