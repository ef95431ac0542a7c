//! PCI driver binding (drivers/base/bus.c, dd.c, drivers/pci/pci-driver.c) with the probe and
//! remove effects of the drivers the simulator knows, applied to the tree.
//!
//! A driver is loaded when `sys/bus/pci/drivers/<drv>/` exists. A bound device has a `driver`
//! link to that directory and the directory a `<bdf>` link back; `uevent` starts with
//! `DRIVER=<drv>` while bound.
//!
//! Matching (`pci_match_device`): a device whose `driver_override` is set matches only that
//! driver. Otherwise a driver matches when one of its dynamic ids (`new_id`, kept in
//! `ROOT/run/vgpud-simulator/dynids/<drv>`, one `vvvv dddd` line each: they cannot be derived
//! from the tree and vanish with `run/` on a simulated reboot, as dynamic ids do) has the
//! device's vendor and device id, or when its id table, stood in for by [`static_match`],
//! says so:
//!
//! | driver          | matches                                                      |
//! |-----------------|--------------------------------------------------------------|
//! | `pcieport`      | class 0x0604xx (PCI bridges)                                 |
//! | `ixgbe`         | 8086:10fb                                                    |
//! | `e1000e`        | 8086:10d3                                                    |
//! | `snd_hda_intel` | class 0x0403xx                                               |
//! | `nvidia`        | vendor 0x10de, class 0x03xxxx                                |
//! | `i915`          | vendor 0x8086, class 0x03xxxx                                |
//! | `gim`           | AMD MxGPU PFs: 1002:74a1 (Instinct MI300X)                   |
//! | `amdgpu`        | other vendor 0x1002 devices of class 0x03xxxx (its VFs too)  |
//! | `bochs-drm`     | 1234:1111 (qemu's std VGA and secondary VGA)                 |
//! | `vfio-pci`      | nothing: only by `driver_override` or `new_id`               |
//! | `pci-pf-stub`   | nothing: only by `driver_override` or `new_id`               |
//!
//! The table's order is the order in which `drivers_probe`, `new_id` and VF autoprobe try the
//! loaded drivers (the kernel tries them in registration order; drivers not in the table come
//! last, by name). A VF can only be probed while its PF's `sriov_drivers_autoprobe` is 1 or its
//! `driver_override` is set (`pci_device_can_probe`), else the probe fails with `ENODEV`.
//!
//! Probe effects: `vfio-pci` registers the device with vfio (below); `nvidia` registers what
//! the board's scheme says (`catalog::NvidiaScheme`): an mdev parent on a Turing PF or an
//! Ampere VF, the `nvidia/` vendor-VFIO files and a vfio device on an Ada VF. `nvidia` refuses
//! a VF whose PF is not bound to `nvidia` (`ENODEV`; assumed: the VF's vGPU support lives in
//! the PF's RM instance), `vfio-pci` a device with no IOMMU group or a bridge (`EINVAL`, as
//! `vfio_pci_probe`). Remove effects undo the probe's; an mdev parent loses its mdevs first,
//! as the mdev core removes them when the parent unregisters. Unbinding never fails.
//!
//! vfio registration: `<dev>/vfio-dev/vfio<N>/` (`dev`, `uevent`, `device`, `subsystem`), with
//! `sys/class/vfio-dev/vfio<N>` and `dev/vfio/devices/vfio<N>` (a regular file standing in for
//! the cdev), N the lowest number free over all devices; and `dev/vfio/<group>` while at least
//! one device of the IOMMU group is registered. mdevs are registered the same way when they are
//! made (`kernel.rs`): their vendor's mdev driver is a vfio driver.
//!
//! The network drivers (`ixgbe`, `e1000e`) register an interface on probe: `<dev>/net/eth<N>/`
//! (`uevent`, `ifindex`, `address`, `device`, `subsystem`) and `sys/class/net/eth<N>`, N the
//! lowest free `eth` number (the kernel's `eth%d`; no udev renames it), the interface index
//! one above the highest in use (at least 2: `lo` is 1; the kernel's counter never gives a
//! freed index back, which a stateless simulator cannot know); remove takes them away.
//!
//! The DRM drivers with fbdev emulation (`bochs-drm`, and `nvidia` while nvidia-drm's `modeset`
//! and `fbdev` are on) register a framebuffer on probe and remove it on remove, and fbcon
//! follows (`fbdev.rs`).

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use nix::errno::Errno;

use super::fsx::{self, errno};
use super::journal::{Entry, Op};
use super::kernel::{self, Roots};
use super::profiles::tree::{write_mdev_parent, Tree};
use super::{fbdev, sriov, vgpu, SimError};
use vgpud_catalog::{self as catalog, NvidiaScheme};

/// Loaded drivers are tried in this order; see the module doc.
const PROBE_ORDER: &[&str] = &[
    "pcieport",
    "ixgbe",
    "e1000e",
    "snd_hda_intel",
    "nvidia",
    "i915",
    "gim",
    "amdgpu",
    "bochs-drm",
    "vfio-pci",
    "pci-pf-stub",
];

/// Drivers with an `sriov_configure` method (`sriov_numvfs` writes reach them). Not `nvidia`
/// (NVIDIA's driver leaves VF management to sriov-manage) and not `gim` (GIM makes its VFs at
/// module load, hardware.md §5.8).
const SRIOV_CONFIGURE: &[&str] = &["pci-pf-stub", "i915", "vfio-pci", "ixgbe"];

/// The NVIDIA mdev driver.
const NVIDIA_MDEV_DRIVER: &str = "nvidia-vgpu-vfio";

/// Major number of the simulated vfio device cdevs (dynamic on a real host).
const VFIO_DEV_MAJOR: u32 = 508;

/// `driver_override` longer than this is refused (`driver_set_override`: `PAGE_SIZE`).
const OVERRIDE_MAX: usize = 4095;

/// `id_table` of the drivers the simulator knows: whether `driver` claims a device.
pub(crate) fn static_match(driver: &str, vendor: u16, device: u16, class: u32) -> bool {
    let base = class >> 16;
    match driver {
        "pcieport" => class >> 8 == 0x0604,
        "ixgbe" => (vendor, device) == (0x8086, 0x10fb),
        "e1000e" => (vendor, device) == (0x8086, 0x10d3),
        "snd_hda_intel" => class >> 8 == 0x0403,
        "nvidia" => vendor == 0x10de && base == 0x03,
        "i915" => vendor == 0x8086 && base == 0x03,
        "gim" => is_gim_id(vendor, device),
        "amdgpu" => vendor == 0x1002 && base == 0x03 && !is_gim_id(vendor, device),
        "bochs-drm" => (vendor, device) == (0x1234, 0x1111),
        _ => false,
    }
}

fn is_gim_id(vendor: u16, device: u16) -> bool {
    vendor == 0x1002 && device == 0x74a1
}

/// Whether an id-based entry of the driver's id table has exactly this vendor and device (what
/// `new_id` compares with to refuse a duplicate).
fn static_id_match(driver: &str, vendor: u16, device: u16) -> bool {
    match driver {
        "ixgbe" | "e1000e" | "gim" | "bochs-drm" => static_match(driver, vendor, device, 0),
        _ => false,
    }
}

/// Whether `driver` can configure SR-IOV through `sriov_numvfs`.
pub(crate) fn has_sriov_configure(driver: &str) -> bool {
    SRIOV_CONFIGURE.contains(&driver)
}

// ---- reading devices ----------------------------------------------------------------------

/// A hexadecimal attribute (`0x10de`, `0x030200`, `26b9`).
pub(crate) fn hex_attr(dir: &Path, name: &str) -> Option<u32> {
    let s = fsx::read_opt(&dir.join(name))?;
    let s = s.trim();
    u32::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16).ok()
}

/// A decimal attribute (`32`).
pub(crate) fn dec_attr(dir: &Path, name: &str) -> Option<u32> {
    fsx::read_opt(&dir.join(name))?.trim().parse().ok()
}

/// Vendor, device and class of a PCI function.
pub(crate) fn ids(dir: &Path) -> (u16, u16, u32) {
    let h = |n: &str| hex_attr(dir, n).unwrap_or(0);
    let v = u16::try_from(h("vendor")).unwrap_or(0);
    let d = u16::try_from(h("device")).unwrap_or(0);
    (v, d, h("class"))
}

/// Whether `dir` is a PCI function (its `subsystem` is the PCI bus).
pub(crate) fn is_pci_dev(dir: &Path) -> bool {
    fsx::link_basename(&dir.join("subsystem")).as_deref() == Some("pci")
        && dir.join("vendor").is_file()
}

/// The function's address: its directory's name.
pub(crate) fn bdf_of(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The device directory of `bdf`, if the bus has it.
pub(crate) fn device_by_bdf(roots: &Roots, bdf: &str) -> Option<PathBuf> {
    if bdf.is_empty() || bdf.contains('/') || bdf == "." || bdf == ".." {
        return None;
    }
    let dir = fs::canonicalize(roots.sys.join("bus/pci/devices").join(bdf)).ok()?;
    is_pci_dev(&dir).then_some(dir)
}

/// The driver a device is bound to.
pub(crate) fn driver_of(dir: &Path) -> Option<String> {
    fsx::link_basename(&dir.join("driver"))
}

/// `driver_override`, when set.
fn override_of(dir: &Path) -> Option<String> {
    let s = fsx::read_opt(&dir.join("driver_override"))?;
    let s = s.trim_end_matches('\n');
    (s != "(null)" && !s.is_empty()).then(|| s.to_string())
}

/// The PF of a VF.
pub(crate) fn physfn(dir: &Path) -> Option<PathBuf> {
    if !fsx::exists_nofollow(&dir.join("physfn")) {
        return None;
    }
    fs::canonicalize(dir.join("physfn")).ok()
}

/// The VFs of a PF that exist, by index.
pub(crate) fn virtfns(pf: &Path) -> io::Result<Vec<PathBuf>> {
    let mut vfs: Vec<(u32, PathBuf)> = Vec::new();
    for name in fsx::list(pf)? {
        let Some(i) = name.strip_prefix("virtfn").and_then(|n| n.parse().ok()) else {
            continue;
        };
        if let Ok(dir) = fs::canonicalize(pf.join(&name)) {
            vfs.push((i, dir));
        }
    }
    vfs.sort();
    Ok(vfs.into_iter().map(|(_, d)| d).collect())
}

/// The IOMMU group of a device.
pub(crate) fn group_of(dir: &Path) -> Option<String> {
    fsx::link_basename(&dir.join("iommu_group"))
}

/// The loaded PCI drivers in probe order.
fn loaded_drivers(roots: &Roots) -> io::Result<Vec<String>> {
    let mut names: Vec<String> = fsx::list(&roots.sys.join("bus/pci/drivers"))?
        .into_iter()
        .filter(|n| roots.sys.join("bus/pci/drivers").join(n).is_dir())
        .collect();
    names.sort_by_key(|n| {
        let rank = PROBE_ORDER.iter().position(|d| d == n);
        (rank.unwrap_or(PROBE_ORDER.len()), n.clone())
    });
    Ok(names)
}

// ---- dynamic ids --------------------------------------------------------------------------

fn dynids_path(roots: &Roots, driver: &str) -> PathBuf {
    roots.state.join("dynids").join(driver)
}

/// The dynamic ids of a driver: (vendor, device).
fn dynids(roots: &Roots, driver: &str) -> Vec<(u16, u16)> {
    fsx::read_opt(&dynids_path(roots, driver))
        .unwrap_or_default()
        .lines()
        .filter_map(parse_id)
        .collect()
}

fn render_id((v, d): (u16, u16)) -> String {
    format!("{v:04x} {d:04x}")
}

/// `new_id`/`remove_id` input: `sscanf("%x %x %x %x %x %x %lx")`, at least vendor and device.
/// The optional fields are accepted; matching uses vendor and device only (an assumption:
/// nothing vgpud does writes them).
fn parse_id(s: &str) -> Option<(u16, u16)> {
    let mut fields = s.split_whitespace().map(|f| {
        let f = f
            .strip_prefix("0x")
            .or_else(|| f.strip_prefix("0X"))
            .unwrap_or(f);
        u32::from_str_radix(f, 16).ok()
    });
    let v = fields.next()??;
    let d = fields.next()??;
    for f in fields.by_ref().take(5) {
        f?;
    }
    if fields.next().is_some() {
        return None;
    }
    Some((u16::try_from(v).ok()?, u16::try_from(d).ok()?))
}

/// `pci_match_device`: override, then dynamic ids, then the id table.
pub(crate) fn matches(roots: &Roots, dev: &Path, driver: &str) -> bool {
    if let Some(o) = override_of(dev) {
        return o == driver;
    }
    let (v, d, class) = ids(dev);
    dynids(roots, driver).contains(&(v, d)) || static_match(driver, v, d, class)
}

/// `pci_device_can_probe` and the driver's own refusals, before any side effect.
fn probe_check(dev: &Path, driver: &str) -> io::Result<()> {
    let pf = physfn(dev);
    if let Some(pf) = &pf {
        let autoprobe = dec_attr(pf, "sriov_drivers_autoprobe").unwrap_or(1) != 0;
        if !autoprobe && override_of(dev).is_none() {
            return Err(errno(Errno::ENODEV));
        }
    }
    match driver {
        "vfio-pci" if group_of(dev).is_none() || dev.join("pci_bus").is_dir() => {
            return Err(errno(Errno::EINVAL));
        }
        "nvidia" => {
            if let Some(pf) = &pf {
                if driver_of(pf).as_deref() != Some("nvidia") {
                    return Err(errno(Errno::ENODEV));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

// ---- attach and detach --------------------------------------------------------------------

/// Rewrites `uevent` with `DRIVER=<driver>` first, or without a `DRIVER` line.
fn set_uevent_driver(dev: &Path, driver: Option<&str>) -> io::Result<()> {
    let path = dev.join("uevent");
    let Some(old) = fsx::read_opt(&path) else {
        return Ok(());
    };
    let mut new = String::new();
    if let Some(d) = driver {
        new.push_str(&format!("DRIVER={d}\n"));
    }
    for line in old.lines().filter(|l| !l.starts_with("DRIVER=")) {
        new.push_str(line);
        new.push('\n');
    }
    if new != old {
        fsx::write_atomic(&path, &new, 0o644)?;
    }
    Ok(())
}

/// Binds `dev` to `driver` and runs the probe effects; checks are done by the caller. The
/// device's `driver` link comes first, so that [`detach`] finds everything from the device.
pub(crate) fn attach(roots: &Roots, dev: &Path, driver: &str) -> io::Result<()> {
    let driver_dir = roots.sys.join("bus/pci/drivers").join(driver);
    fsx::symlink_rel(&dev.join("driver"), &driver_dir)?;
    fsx::symlink_rel(&driver_dir.join(bdf_of(dev)), dev)?;
    set_uevent_driver(dev, Some(driver))?;
    let vfio = super::uevent::VfioState::of(roots, dev);
    match driver {
        "vfio-pci" => vfio_register(roots, dev)?,
        "nvidia" => nvidia_probe(roots, dev)?,
        d if is_net_driver(d) => netdev_register(&roots.sys, dev).map(|_| ())?,
        _ => {}
    }
    fbdev::probe(&roots.sys, dev, driver)?;
    super::uevent::vfio_changed(roots, &vfio, &super::uevent::VfioState::of(roots, dev));
    super::uevent::pci_driver(roots, dev, Some(driver));
    Ok(())
}

/// Unbinds `dev` from `driver` after the remove effects; a device half bound or half unbound
/// ends unbound. Never fails for a reason the kernel would have.
pub(crate) fn detach(roots: &Roots, dev: &Path, driver: &str) -> io::Result<()> {
    let vfio = super::uevent::VfioState::of(roots, dev);
    fbdev::remove(&roots.sys, dev)?;
    if driver == "nvidia" {
        nvidia_remove(roots, dev)?;
    }
    vfio_unregister(roots, dev)?;
    netdev_unregister(&roots.sys, dev)?;
    let driver_dir = roots.sys.join("bus/pci/drivers").join(driver);
    fsx::remove_quiet(&driver_dir.join(bdf_of(dev)))?;
    if driver_of(dev).as_deref() == Some(driver) {
        fsx::remove_quiet(&dev.join("driver"))?;
    }
    set_uevent_driver(dev, None)?;
    super::uevent::vfio_changed(roots, &vfio, &super::uevent::VfioState::of(roots, dev));
    super::uevent::pci_driver(roots, dev, None);
    Ok(())
}

/// Directories a bind to `driver` may make (vfio registration, the NVIDIA mdev driver) that a
/// tree may lack.
pub(crate) fn bind_made(roots: &Roots, driver: &str, made: &mut Vec<PathBuf>) {
    let mut dirs = vec![roots.sys.join("class/vfio-dev"), roots.dev.join("devices")];
    if driver == "nvidia" {
        dirs.push(roots.sys.join("bus/mdev/drivers").join(NVIDIA_MDEV_DRIVER));
    }
    if is_net_driver(driver) {
        dirs.push(roots.sys.join("class/net"));
    }
    if matches!(driver, "bochs-drm" | "nvidia") {
        dirs.push(roots.sys.join("class/graphics"));
        dirs.push(roots.sys.join("class/vtconsole"));
        dirs.push(roots.sys.join("devices/virtual/vtconsole"));
    }
    for dir in dirs {
        kernel::missing_dirs(&dir, made);
    }
}

/// Removes what an undone operation made: the directories in `made` (whole: they did not exist
/// before) and the writer's temporary files in the shared directories.
pub(crate) fn unmake(roots: &Roots, entry: &Entry) -> io::Result<()> {
    for dir in [
        roots.dev.clone(),
        roots.dev.join("devices"),
        roots.state.join("dynids"),
    ] {
        fsx::remove_temps(&dir, entry.pid)?;
    }
    for dir in entry.made.iter().rev() {
        fsx::remove_dir_quiet(dir)?;
    }
    Ok(())
}

fn vfio_numbers(roots: &Roots) -> io::Result<BTreeSet<u32>> {
    let mut used = BTreeSet::new();
    for dir in [roots.sys.join("class/vfio-dev"), roots.dev.join("devices")] {
        for name in fsx::list(&dir)? {
            if let Some(n) = name.strip_prefix("vfio").and_then(|n| n.parse().ok()) {
                used.insert(n);
            }
        }
    }
    Ok(used)
}

/// Whether `driver` is a network driver that registers an interface on probe.
fn is_net_driver(driver: &str) -> bool {
    matches!(driver, "ixgbe" | "e1000e")
}

/// Registers a network interface on `dev` (see the module doc); returns its name.
pub(crate) fn netdev_register(sys: &Path, dev: &Path) -> io::Result<String> {
    let class = sys.join("class/net");
    let mut names = BTreeSet::new();
    let mut top_index = 1;
    for name in fsx::list(&class)? {
        if let Some(n) = name.strip_prefix("eth").and_then(|n| n.parse::<u32>().ok()) {
            names.insert(n);
        }
        let index = dec_attr(&class.join(&name), "ifindex").unwrap_or(0);
        top_index = top_index.max(index);
    }
    let n = (0..=u32::MAX)
        .find(|n| !names.contains(n))
        .ok_or_else(|| errno(Errno::ENFILE))?;
    let name = format!("eth{n}");
    let ifindex = top_index + 1;
    let base = dev.join("net");
    fsx::create_dir_all(&base)?;
    let ndir = base.join(&name);
    fsx::create_dir(&ndir)?;
    fsx::write_atomic(
        &ndir.join("uevent"),
        &format!("INTERFACE={name}\nIFINDEX={ifindex}\n"),
        0o644,
    )?;
    fsx::write_atomic(&ndir.join("ifindex"), &format!("{ifindex}\n"), 0o444)?;
    // qemu's default MAC, the function number in the last byte.
    let func = bdf_of(dev)
        .rsplit('.')
        .next()
        .and_then(|f| f.parse::<u8>().ok())
        .unwrap_or(0);
    fsx::write_atomic(
        &ndir.join("address"),
        &format!("52:54:00:12:34:{:02x}\n", 0x56 + func),
        0o444,
    )?;
    fsx::symlink_rel(&ndir.join("device"), dev)?;
    fsx::symlink_rel(&ndir.join("subsystem"), &class)?;
    fsx::create_dir_all(&class)?;
    fsx::symlink_rel(&class.join(&name), &ndir)?;
    Ok(name)
}

/// Undoes [`netdev_register`].
fn netdev_unregister(sys: &Path, dev: &Path) -> io::Result<()> {
    let base = dev.join("net");
    for name in fsx::list(&base)? {
        fsx::remove_quiet(&sys.join("class/net").join(&name))?;
    }
    fsx::remove_dir_quiet(&base)
}

/// Registers `dev` (a PCI function or an mdev) with vfio (see the module doc).
pub(crate) fn vfio_register(roots: &Roots, dev: &Path) -> io::Result<()> {
    let used = vfio_numbers(roots)?;
    let n = (0..=u32::MAX)
        .find(|n| !used.contains(n))
        .ok_or_else(|| errno(Errno::ENOSPC))?;
    let name = format!("vfio{n}");
    let base = dev.join("vfio-dev");
    fsx::create_dir_all(&base)?;
    let vdir = base.join(&name);
    fsx::create_dir(&vdir)?;
    fsx::write_atomic(&vdir.join("dev"), &format!("{VFIO_DEV_MAJOR}:{n}\n"), 0o444)?;
    fsx::write_atomic(
        &vdir.join("uevent"),
        &format!("MAJOR={VFIO_DEV_MAJOR}\nMINOR={n}\nDEVNAME=vfio/devices/{name}\n"),
        0o644,
    )?;
    fsx::symlink_rel(&vdir.join("device"), dev)?;
    let class = roots.sys.join("class/vfio-dev");
    fsx::symlink_rel(&vdir.join("subsystem"), &class)?;
    fsx::create_dir_all(&class)?;
    fsx::symlink_rel(&class.join(&name), &vdir)?;
    let devices = roots.dev.join("devices");
    fsx::create_dir_all(&devices)?;
    fsx::write_atomic(&devices.join(&name), "", 0o600)?;
    if let Some(g) = group_of(dev) {
        let node = roots.dev.join(&g);
        if !fsx::exists_nofollow(&node) {
            fsx::write_atomic(&node, "", 0o600)?;
        }
    }
    Ok(())
}

/// Undoes [`vfio_register`]; the group node goes when no device of the group is registered.
pub(crate) fn vfio_unregister(roots: &Roots, dev: &Path) -> io::Result<()> {
    let base = dev.join("vfio-dev");
    let class = roots.sys.join("class/vfio-dev");
    for name in fsx::list(&base)? {
        // The number may be another device's by now, when this undoes a registration cut
        // short before it was published (its class link made): leave that device's alone.
        let link = class.join(&name);
        if let Ok(to) = fs::read_link(&link) {
            if to != fsx::relative(&class, &base.join(&name)) {
                continue;
            }
        }
        fsx::remove_quiet(&link)?;
        fsx::remove_quiet(&roots.dev.join("devices").join(&name))?;
    }
    fsx::remove_dir_quiet(&base)?;
    if let Some(g) = group_of(dev) {
        let members = roots
            .sys
            .join("kernel/iommu_groups")
            .join(&g)
            .join("devices");
        let registered = fsx::list(&members)?
            .iter()
            .any(|m| members.join(m).join("vfio-dev").is_dir());
        if !registered {
            fsx::remove_quiet(&roots.dev.join(&g))?;
        }
    }
    Ok(())
}

/// The NVIDIA board and scheme of a function (a VF's are its PF's).
fn nvidia_scheme(dev: &Path) -> Option<(&'static str, NvidiaScheme)> {
    let ids_dir = physfn(dev).unwrap_or_else(|| dev.to_path_buf());
    let (_, device, _) = ids(&ids_dir);
    let sub = u16::try_from(hex_attr(&ids_dir, "subsystem_device").unwrap_or(0)).unwrap_or(0);
    catalog::nvidia_board(device, sub)
}

fn sim_io(e: SimError) -> io::Error {
    match e {
        SimError::Io { source, .. } => source,
        other => io::Error::other(other.to_string()),
    }
}

/// The `nvidia` probe: what the board's scheme registers on this function.
fn nvidia_probe(roots: &Roots, dev: &Path) -> io::Result<()> {
    let Some((board, scheme)) = nvidia_scheme(dev) else {
        return Ok(());
    };
    let is_vf = physfn(dev).is_some();
    match (scheme, is_vf) {
        (NvidiaScheme::Mdev, false) | (NvidiaScheme::MdevOnVf, true) => {
            let root = roots.sys.parent().ok_or_else(|| errno(Errno::EINVAL))?;
            let tree = Tree::new(root).map_err(sim_io)?;
            let rel = dev
                .strip_prefix(tree.root())
                .map_err(|_| errno(Errno::EINVAL))?
                .to_string_lossy()
                .into_owned();
            let types = super::profiles::nvidia_board_types(board);
            write_mdev_parent(&tree, &rel, &bdf_of(dev), NVIDIA_MDEV_DRIVER, &types).map_err(sim_io)
        }
        (NvidiaScheme::VendorVfio, true) => {
            let dir = dev.join("nvidia");
            fsx::create_dir_all(&dir)?;
            fsx::write_atomic(&dir.join("current_vgpu_type"), "0\n", 0o644)?;
            fsx::write_atomic(&dir.join("vgpu_params"), "", 0o644)?;
            fsx::write_atomic(
                &dir.join("creatable_vgpu_types"),
                &vgpu::creatable_text(dev)?,
                0o444,
            )?;
            vfio_register(roots, dev)
        }
        _ => Ok(()),
    }
}

/// The `nvidia` remove: mdevs of the parent first, then the parent's registration, the
/// vendor-VFIO files and the vfio device.
fn nvidia_remove(roots: &Roots, dev: &Path) -> io::Result<()> {
    for child in fsx::list(dev)? {
        // An mdev, or what is left of one whose removal was cut short.
        let uuid_dir =
            kernel::guid_parse(&child).is_some_and(|u| u == child) && dev.join(&child).is_dir();
        if uuid_dir || fsx::exists_nofollow(&dev.join(&child).join("mdev_type")) {
            let type_id = fsx::link_basename(&dev.join(&child).join("mdev_type"));
            let vfio = super::uevent::VfioState::of(roots, &dev.join(&child));
            kernel::teardown(roots, &Entry::device(Op::Remove, &child, dev))?;
            super::uevent::mdev_removed(roots, &dev.join(&child), type_id.as_deref(), &vfio);
        }
    }
    let registered = dev.join("mdev_supported_types").exists();
    fsx::remove_dir_quiet(&dev.join("mdev_supported_types"))?;
    fsx::remove_quiet(&roots.sys.join("class/mdev_bus").join(bdf_of(dev)))?;
    if registered {
        super::uevent::parent_state(roots, dev, false);
    }
    fsx::remove_dir_quiet(&dev.join("nvidia"))?;
    vfio_unregister(roots, dev)
}

// ---- the writes ---------------------------------------------------------------------------

/// `sysfs_streq`-style argument: one trailing newline ignored.
fn arg(value: &str) -> &str {
    value.strip_suffix('\n').unwrap_or(value)
}

fn driver_name(driver_dir: &Path) -> io::Result<String> {
    driver_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| errno(Errno::EINVAL))
}

/// Removes the temporary files process `pid` left around `devs` and their GPUs.
fn remove_temps_around(devs: &[PathBuf], pid: u32) -> io::Result<()> {
    for dev in devs {
        fsx::remove_temps(dev, pid)?;
        fsx::remove_temps(&dev.join("nvidia"), pid)?;
        for t in super::rules::types(dev)? {
            fsx::remove_temps(&t.dir, pid)?;
        }
        if physfn(dev).is_some() || dev.join("sriov_totalvfs").is_file() {
            vgpu::remove_pf_temps(dev, pid)?;
        }
    }
    Ok(())
}

/// Refreshes what depends on the binding of `devs` (NVIDIA vGPU capacity of their PFs).
fn refresh_after(devs: &[PathBuf]) -> io::Result<()> {
    let mut pfs = BTreeSet::new();
    for d in devs {
        let pf = physfn(d).unwrap_or_else(|| d.clone());
        if pf.join("sriov_totalvfs").is_file() {
            pfs.insert(pf);
        }
    }
    for pf in pfs {
        vgpu::refresh_pf(&pf)?;
    }
    Ok(())
}

/// Binds each of `devs` to `driver` as one journaled operation (undone whole if cut short).
fn bind_all(roots: &Roots, driver: &str, devs: Vec<PathBuf>, id: Option<String>) -> io::Result<()> {
    let mut entry = Entry::pci(Op::Bind, devs);
    entry.driver = Some(driver.to_string());
    bind_made(roots, driver, &mut entry.made);
    if id.is_some() {
        kernel::missing_dirs(&roots.state.join("dynids"), &mut entry.made);
    }
    entry.id = id;
    kernel::journaled(roots, &entry, false, || {
        if let Some(id) = &entry.id {
            let path = dynids_path(roots, driver);
            let mut text = fsx::read_opt(&path).unwrap_or_default();
            text.push_str(id);
            text.push('\n');
            fsx::create_dir_all(&roots.state.join("dynids"))?;
            fsx::write_atomic(&path, &text, 0o644)?;
        }
        // A device just bound holds no vGPU: its probe computed its own capacity, and its
        // siblings' does not change.
        for dev in &entry.devs {
            attach(roots, dev, driver)?;
        }
        Ok(())
    })
}

/// Whether a device holds an NVIDIA vGPU (a vendor-VFIO type, or an mdev): unbinding it frees
/// capacity on its GPU.
fn holds_vgpu(dev: &Path) -> bool {
    let typed = fsx::read_opt(&dev.join("nvidia/current_vgpu_type"))
        .is_some_and(|c| c.trim() != "0" && !c.trim().is_empty());
    typed
        || fsx::list(dev)
            .unwrap_or_default()
            .iter()
            .any(|c| fsx::exists_nofollow(&dev.join(c).join("mdev_type")))
}

/// `drivers/<drv>/bind`.
pub(crate) fn bind(roots: &Roots, driver_dir: &Path, value: &str) -> io::Result<()> {
    let driver = driver_name(driver_dir)?;
    let dev = device_by_bdf(roots, arg(value)).ok_or_else(|| errno(Errno::ENODEV))?;
    if !matches(roots, &dev, &driver) {
        return Err(errno(Errno::ENODEV));
    }
    if driver_of(&dev).is_some() {
        return Err(errno(Errno::EBUSY));
    }
    probe_check(&dev, &driver)?;
    bind_all(roots, &driver, vec![dev], None)
}

/// `drivers/<drv>/unbind`.
pub(crate) fn unbind(roots: &Roots, driver_dir: &Path, value: &str) -> io::Result<()> {
    let driver = driver_name(driver_dir)?;
    let dev = device_by_bdf(roots, arg(value)).ok_or_else(|| errno(Errno::ENODEV))?;
    if driver_of(&dev).as_deref() != Some(driver.as_str()) {
        return Err(errno(Errno::ENODEV));
    }
    let refresh = holds_vgpu(&dev);
    let mut entry = Entry::pci(Op::Unbind, vec![dev]);
    entry.driver = Some(driver);
    kernel::journaled(roots, &entry, true, || unbind_entry(roots, &entry, refresh))
}

/// Detaches the entry's devices; with `refresh`, recomputes their GPUs' capacity (needed when
/// one of them held a vGPU).
fn unbind_entry(roots: &Roots, entry: &Entry, refresh: bool) -> io::Result<()> {
    let driver = entry.driver.as_deref().unwrap_or_default();
    for dev in &entry.devs {
        detach(roots, dev, driver)?;
    }
    if refresh {
        refresh_after(&entry.devs)?;
    }
    Ok(())
}

/// The first loaded driver that matches `dev` and whose probe would succeed.
pub(crate) fn probe_driver(roots: &Roots, dev: &Path) -> io::Result<Option<String>> {
    for drv in loaded_drivers(roots)? {
        if matches(roots, dev, &drv) && probe_check(dev, &drv).is_ok() {
            return Ok(Some(drv));
        }
    }
    Ok(None)
}

/// `sys/bus/pci/drivers_probe`: an unbound device gets the first driver that takes it.
pub(crate) fn drivers_probe(roots: &Roots, value: &str) -> io::Result<()> {
    let dev = device_by_bdf(roots, arg(value)).ok_or_else(|| errno(Errno::ENODEV))?;
    if driver_of(&dev).is_some() {
        return Ok(());
    }
    match probe_driver(roots, &dev)? {
        Some(drv) => bind_all(roots, &drv, vec![dev], None),
        None => Ok(()),
    }
}

/// `drivers/<drv>/new_id`: adds a dynamic id (`EEXIST` when the driver already matches it)
/// and, while `drivers_autoprobe` is 1, binds every unbound device it now matches.
pub(crate) fn new_id(roots: &Roots, driver_dir: &Path, value: &str) -> io::Result<()> {
    let driver = driver_name(driver_dir)?;
    let id = parse_id(value).ok_or_else(|| errno(Errno::EINVAL))?;
    if dynids(roots, &driver).contains(&id) || static_id_match(&driver, id.0, id.1) {
        return Err(errno(Errno::EEXIST));
    }
    let autoprobe =
        fsx::read_opt(&roots.sys.join("bus/pci/drivers_autoprobe")).is_none_or(|s| s.trim() != "0");
    let mut devs = Vec::new();
    if autoprobe {
        for bdf in fsx::list(&roots.sys.join("bus/pci/devices"))? {
            let Some(dev) = device_by_bdf(roots, &bdf) else {
                continue;
            };
            let (v, d, _) = ids(&dev);
            let overridden = override_of(&dev);
            let claims = match &overridden {
                Some(o) => *o == driver,
                None => (v, d) == id,
            };
            if driver_of(&dev).is_none() && claims && probe_check(&dev, &driver).is_ok() {
                devs.push(dev);
            }
        }
    }
    bind_all(roots, &driver, devs, Some(render_id(id)))
}

/// `drivers/<drv>/remove_id`: removes a dynamic id (`ENODEV` when there is none such).
pub(crate) fn remove_id(roots: &Roots, driver_dir: &Path, value: &str) -> io::Result<()> {
    let driver = driver_name(driver_dir)?;
    let id = parse_id(value).ok_or_else(|| errno(Errno::EINVAL))?;
    let ids = dynids(roots, &driver);
    if !ids.contains(&id) {
        return Err(errno(Errno::ENODEV));
    }
    let path = dynids_path(roots, &driver);
    let text: String = ids
        .into_iter()
        .filter(|i| *i != id)
        .map(|i| format!("{}\n", render_id(i)))
        .collect();
    kernel::journaled(roots, &Entry::write(&path), false, || {
        fsx::write_atomic(&path, &text, 0o644)
    })
}

/// `<dev>/driver_override`: the name up to the first newline; empty clears it (reads
/// `(null)`); `EINVAL` from a page on.
pub(crate) fn driver_override(roots: &Roots, file: &Path, value: &str) -> io::Result<()> {
    if value.len() > OVERRIDE_MAX {
        return Err(errno(Errno::EINVAL));
    }
    let name = value.split('\n').next().unwrap_or("");
    let stored = if name.is_empty() {
        "(null)\n".to_string()
    } else {
        format!("{name}\n")
    };
    kernel::write_plain(roots, file, &stored)
}

/// Finishes a PCI operation a killed writer left: a bind undone, an unbind completed, VFs
/// made undone, VFs destroyed completed, a vGPU type set undone or a clear completed.
pub(crate) fn finish(roots: &Roots, entry: &Entry) -> io::Result<()> {
    let driver = entry.driver.as_deref().unwrap_or_default();
    match entry.op {
        Op::Bind => {
            remove_temps_around(&entry.devs, entry.pid)?;
            for dev in &entry.devs {
                detach(roots, dev, driver)?;
            }
            if let Some(id) = &entry.id {
                let path = dynids_path(roots, driver);
                if let Some(text) = fsx::read_opt(&path) {
                    let kept: String = text
                        .lines()
                        .filter(|l| l != id)
                        .map(|l| format!("{l}\n"))
                        .collect();
                    if kept.is_empty() {
                        fsx::remove_quiet(&path)?;
                    } else if kept != text {
                        fsx::write_atomic(&path, &kept, 0o644)?;
                    }
                }
            }
            unmake(roots, entry)?;
            refresh_after(&entry.devs)
        }
        Op::Unbind => {
            remove_temps_around(&entry.devs, entry.pid)?;
            unbind_entry(roots, entry, true)
        }
        Op::SriovEnable | Op::SriovDisable => sriov::finish(roots, entry),
        Op::VgpuType => vgpu::finish(roots, entry),
        Op::Create | Op::Remove | Op::Write => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_like_new_id() {
        assert_eq!(parse_id("10de 26b9"), Some((0x10de, 0x26b9)));
        assert_eq!(parse_id("0x10de 0x2236\n"), Some((0x10de, 0x2236)));
        assert_eq!(
            parse_id("10de 26b9 ffffffff ffffffff 0 0 0"),
            Some((0x10de, 0x26b9))
        );
        assert_eq!(parse_id("10de"), None);
        assert_eq!(parse_id("10de:26b9"), None);
        assert_eq!(parse_id("10de zz"), None);
        assert_eq!(parse_id("1 2 3 4 5 6 7 8"), None);
    }

    #[test]
    fn the_id_table_stands_in_for_the_drivers() {
        assert!(static_match("nvidia", 0x10de, 0x26b9, 0x030200));
        assert!(!static_match("nvidia", 0x10de, 0x228b, 0x040300));
        assert!(static_match("snd_hda_intel", 0x10de, 0x228b, 0x040300));
        assert!(static_match("gim", 0x1002, 0x74a1, 0x038000));
        assert!(!static_match("amdgpu", 0x1002, 0x74a1, 0x038000));
        assert!(static_match("amdgpu", 0x1002, 0x74b5, 0x038000));
        assert!(!static_match("vfio-pci", 0x10de, 0x26b9, 0x030200));
        assert!(!static_match("pci-pf-stub", 0x10de, 0x26b9, 0x030200));
        assert!(static_match("e1000e", 0x8086, 0x10d3, 0x020000));
        assert!(static_id_match("gim", 0x1002, 0x74a1));
        assert!(!static_id_match("nvidia", 0x10de, 0x26b9));
    }
}
