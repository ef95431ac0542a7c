//! Framebuffers and the framebuffer console, as the kernel shows them (6.1:
//! drivers/video/fbdev/core/{fbmem.c,fbsysfs.c,fbcon.c}, drivers/tty/vt/vt.c), checked in the
//! real-kernel suite's VM with two bochs-drm adapters.
//!
//! A DRM driver with fbdev emulation registers a framebuffer when it probes a device and
//! removes it when the device is unbound (`drm_fbdev_generic_setup` in the probe,
//! `drm_dev_unplug` in the remove). The drivers the simulator knows that do:
//!
//! | driver      | framebuffer `name` | when                                                     |
//! |-------------|--------------------|----------------------------------------------------------|
//! | `bochs-drm` | `bochs-drmdrmfb`   | always (`drm_kms_helper.fbdev_emulation` is on unless `sys/module/drm_kms_helper/parameters/fbdev_emulation` reads `N`) |
//! | `nvidia`    | `nvidia-drmdrmfb`  | nvidia-drm's `modeset` and `fbdev` parameters read `Y` (`sys/module/nvidia_drm/parameters/`), on a VGA-class (0x0300) physical function: not on 3D controllers or VFs, which have no display |
//!
//! `register_framebuffer` takes the lowest free index N: `<dev>/graphics/fb<N>/` (`dev`
//! `29:<N>`, `name`, `uevent`, `device`, `subsystem`, `power/`) and `sys/class/graphics/fb<N>`;
//! the removal takes them away (and `<dev>/graphics/` once empty). The rest of fbsysfs's
//! attributes (`bits_per_pixel`, `mode`, `modes`, `stride`, `virtual_size`, …) are not
//! written: nothing reads them.
//!
//! fbcon is modelled by the simulator's own code after fbcon.c, not by vgpud's reading of the
//! console (`discovery::console`), so a mistake there is not mirrored here. Its internal maps,
//! which sysfs does not show, are simulator state in `ROOT/run/vgpud-simulator/fbcon` (gone with
//! a reboot, like the kernel's; rebuilt by replaying the registered framebuffers in index
//! order when absent): `con2fb_map_boot` (from `fbcon=map:` digits in `proc/cmdline`, cycled
//! over the 63 consoles, else all fb0), `con2fb_map` (the framebuffer each console is on, -1
//! for none), `primary_device` and `info_idx`. Consoles `fbcon=vc:<first>-<last>` (1-based;
//! default all) are fbcon's. Whether fbcon is bound is its vtconsole entry's `bind`.
//! - it registers as a console driver, `sys/class/vtconsole/vtcon<M>` named `(M) frame
//!   buffer device` (M the lowest free number), when it first takes the consoles over, and
//!   unregisters (the entry goes) when the last framebuffer goes;
//! - `fbcon_fb_registered`: without `map:`, the boot VGA device's framebuffer (`boot_vga` 1,
//!   `CONFIG_FRAMEBUFFER_CONSOLE_DETECT_PRIMARY`) becomes the primary: the boot map of every
//!   console names it. Then, with no `info_idx`, a framebuffer the boot map names makes fbcon
//!   take the consoles over (all mapped to it; `bind` 1 on its entry, 0 on the others);
//!   otherwise each console the boot map sends to the new framebuffer moves there, or, when
//!   fbcon is unbound or maps no console, fbcon takes them all over onto it;
//! - `fbcon_fb_unbind` (bound only): the consoles on the leaving framebuffer move to another
//!   console's framebuffer; when none is elsewhere fbcon unbinds (`bind` 0, and 1 on the system
//!   console driver, the first entry): the consoles go back to the system console;
//! - `fbcon_fb_unregistered`: its consoles are unmapped, `info_idx` moves to the lowest
//!   registered framebuffer and the unmapped consoles to it.
//!
//! Profiles write the console drivers the kernel registered at boot and the foreground
//! console with [`write_consoles`].

use std::io;
use std::path::Path;

use nix::errno::Errno;

use super::binding::{dec_attr, driver_of, hex_attr, physfn};
use super::fsx::{self, errno};
use super::profiles::tree::Tree;
use super::SimError;

/// The framebuffer character devices' major number.
const FB_MAJOR: u32 = 29;
/// `FB_MAX`.
const FB_MAX: u32 = 32;
/// fbcon's console driver name.
const FBCON_NAME: &str = "(M) frame buffer device";

/// The framebuffer `driver` registers when it probes `dev`, by its `name`; `None` for a driver
/// without fbdev emulation (or with it turned off) or a device without a display.
pub(crate) fn fbdev_name(sys: &Path, dev: &Path, driver: &str) -> Option<&'static str> {
    let param = |module: &str, name: &str| {
        fsx::read_opt(&sys.join(format!("module/{module}/parameters/{name}")))
            .map(|v| v.trim().to_string())
    };
    match driver {
        "bochs-drm" => (param("drm_kms_helper", "fbdev_emulation").as_deref() != Some("N"))
            .then_some("bochs-drmdrmfb"),
        "nvidia" => (param("nvidia_drm", "modeset").as_deref() == Some("Y")
            && param("nvidia_drm", "fbdev").as_deref() == Some("Y")
            && hex_attr(dev, "class").is_some_and(|c| c >> 8 == 0x0300)
            && physfn(dev).is_none())
        .then_some("nvidia-drmdrmfb"),
        _ => None,
    }
}

/// The framebuffers registered on `dev` (`<dev>/graphics/fb<N>`), by name.
fn framebuffers_of(dev: &Path) -> io::Result<Vec<String>> {
    Ok(fsx::list(&dev.join("graphics"))?
        .into_iter()
        .filter(|n| n.starts_with("fb"))
        .collect())
}

/// The kernel's `MAX_NR_CONSOLES`.
const MAX_NR_CONSOLES: usize = 63;
/// fbcon's state below the simulated root.
const FBCON_STATE: &str = "run/vgpud-simulator/fbcon";

/// fbcon's internal state (fbcon.c), which sysfs does not show.
#[derive(Debug, Clone, PartialEq)]
struct Fbcon {
    /// `con2fb_map_boot`, per console.
    boot: Vec<i32>,
    /// `con2fb_map`, per console: -1 for none.
    map: Vec<i32>,
    /// `primary_device`, -1 for none.
    primary: i32,
    /// `info_idx`, -1 for none.
    info: i32,
    /// `fbcon=map:` was given (`map_override`).
    map_override: bool,
    /// fbcon's consoles, 0-based (`first_fb_vc`, `last_fb_vc`).
    first: usize,
    last: usize,
}

/// `fbcon_setup` of the `fbcon=` options in `cmdline`: the boot map when `map:` gives one, and
/// the console range.
fn fbcon_options(cmdline: &str) -> (Option<Vec<i32>>, usize, usize) {
    let (mut boot, mut first, mut last) = (None, 0usize, MAX_NR_CONSOLES - 1);
    // `simple_strtoul`: the leading digits (0 when none), and the rest.
    let number = |s: &str| -> (usize, usize) {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let n = if end == 0 {
            0
        } else {
            s[..end].parse().unwrap_or(usize::MAX)
        };
        (n, end)
    };
    for value in cmdline
        .split_whitespace()
        .filter_map(|a| a.strip_prefix("fbcon="))
    {
        for opt in value.split(',') {
            if let Some(digits) = opt.strip_prefix("map:") {
                let bytes = digits.as_bytes();
                if !bytes.is_empty() {
                    // `con2fb_map_boot[i] = (options[j++] - '0') % FB_MAX`, cycling.
                    boot = Some(
                        (0..MAX_NR_CONSOLES)
                            .map(|i| {
                                i32::from(bytes[i % bytes.len()].wrapping_sub(b'0')) % FB_MAX as i32
                            })
                            .collect(),
                    );
                }
            } else if let Some(range) = opt.strip_prefix("vc:") {
                let mut rest = range;
                if !rest.is_empty() {
                    let (n, end) = number(rest);
                    first = n.saturating_sub(1);
                    rest = &rest[end..];
                }
                if first >= MAX_NR_CONSOLES {
                    first = 0;
                }
                if let Some(tail) = rest.strip_prefix('-') {
                    let (n, _) = number(tail);
                    last = n.wrapping_sub(1);
                }
                if last < first || last >= MAX_NR_CONSOLES {
                    last = MAX_NR_CONSOLES - 1;
                }
            }
        }
    }
    (boot, first, last)
}

impl Fbcon {
    /// The state at boot, from the kernel command line.
    fn boot(root: &Path) -> Fbcon {
        let cmdline = fsx::read_opt(&root.join("proc/cmdline")).unwrap_or_default();
        let (boot, first, last) = fbcon_options(&cmdline);
        Fbcon {
            map_override: boot.is_some(),
            boot: boot.unwrap_or_else(|| vec![0; MAX_NR_CONSOLES]),
            map: vec![-1; MAX_NR_CONSOLES],
            primary: -1,
            info: -1,
            first,
            last,
        }
    }

    /// The state kept on the host at `sys`; when there is none, the boot state after the
    /// registration of every framebuffer but `except`, in index order.
    fn load(sys: &Path, except: Option<u32>) -> io::Result<Fbcon> {
        let root = sys.parent().ok_or_else(|| errno(Errno::EINVAL))?;
        let mut f = Fbcon::boot(root);
        if let Some(text) = fsx::read_opt(&root.join(FBCON_STATE)) {
            if f.parse(&text).is_some() {
                return Ok(f);
            }
            f = Fbcon::boot(root);
        }
        let bound = fbcon_bound(sys)?;
        for n in registered(sys)?.into_iter().filter(|n| Some(*n) != except) {
            f.registered(n, is_primary(sys, n), bound);
        }
        Ok(f)
    }

    /// Reads the kept maps into `self`; `None` when the text is not a state.
    fn parse(&mut self, text: &str) -> Option<()> {
        let list = |v: &str| -> Option<Vec<i32>> {
            let l: Vec<i32> = v
                .split(',')
                .map(|n| n.parse().ok())
                .collect::<Option<_>>()?;
            (l.len() == MAX_NR_CONSOLES).then_some(l)
        };
        for line in text.lines() {
            let (key, value) = line.split_once(' ')?;
            match key {
                "boot" => self.boot = list(value)?,
                "map" => self.map = list(value)?,
                "primary" => self.primary = value.parse().ok()?,
                "info" => self.info = value.parse().ok()?,
                _ => return None,
            }
        }
        Some(())
    }

    fn store(&self, sys: &Path) -> io::Result<()> {
        let root = sys.parent().ok_or_else(|| errno(Errno::EINVAL))?;
        let file = root.join(FBCON_STATE);
        if let Some(dir) = file.parent() {
            fsx::create_dir_all(dir)?;
        }
        let join = |l: &[i32]| l.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
        let text = format!(
            "boot {}\nmap {}\nprimary {}\ninfo {}\n",
            join(&self.boot),
            join(&self.map),
            self.primary,
            self.info
        );
        fsx::write_atomic(&file, &text, 0o644)
    }

    fn consoles(&self) -> std::ops::RangeInclusive<usize> {
        self.first..=self.last
    }

    /// `do_fbcon_takeover`: every console of fbcon onto `info_idx`.
    fn take_over(&mut self) {
        for i in self.consoles() {
            self.map[i] = self.info;
        }
    }

    /// `set_con2fb_map(vc, idx)`; true when fbcon took every console over.
    fn set_map(&mut self, vc: usize, idx: i32, bound: bool) -> bool {
        if self.map[vc] == idx {
            return false;
        }
        let mapped = self.consoles().any(|i| self.map[i] != -1);
        if !mapped || !bound {
            self.info = idx;
            self.take_over();
            return true;
        }
        self.map[vc] = idx;
        false
    }

    /// `fbcon_fb_registered` (with `fbcon_select_primary`) for `fb<n>`; true when fbcon took
    /// the consoles over.
    fn registered(&mut self, n: u32, primary: bool, bound: bool) -> bool {
        let idx = i32::try_from(n).unwrap_or(-1);
        if !self.map_override && self.primary == -1 && primary {
            self.primary = idx;
            for i in self.consoles() {
                self.boot[i] = idx;
            }
            if bound {
                self.info = idx;
            }
        }
        if self.info == -1 {
            if self.consoles().any(|i| self.boot[i] == idx) {
                self.info = idx;
                self.take_over();
                return true;
            }
            return false;
        }
        let mut took_over = false;
        for i in self.consoles() {
            if self.boot[i] == idx {
                took_over |= self.set_map(i, idx, bound || took_over);
            }
        }
        took_over
    }

    /// `fbcon_fb_unbind` for `fb<n>` while fbcon is bound; true when fbcon lets the consoles go.
    fn unbind(&mut self, n: u32) -> bool {
        let idx = i32::try_from(n).unwrap_or(-1);
        let elsewhere = self
            .consoles()
            .map(|i| self.map[i])
            .find(|m| *m != idx && *m != -1);
        match elsewhere {
            Some(new) => {
                for i in self.consoles() {
                    if self.map[i] == idx {
                        self.set_map(i, new, true);
                    }
                }
                false
            }
            None => {
                for i in self.consoles() {
                    if self.map[i] == idx {
                        self.map[i] = -1;
                    }
                }
                true
            }
        }
    }

    /// `fbcon_fb_unregistered` for `fb<n>`, `left` the framebuffers still registered.
    fn unregistered(&mut self, n: u32, left: &[u32]) {
        let idx = i32::try_from(n).unwrap_or(-1);
        for i in self.consoles() {
            if self.map[i] == idx {
                self.map[i] = -1;
            }
        }
        if self.info == idx {
            self.info = left
                .iter()
                .min()
                .and_then(|m| i32::try_from(*m).ok())
                .unwrap_or(-1);
        }
        if self.info != -1 {
            for i in self.consoles() {
                if self.map[i] == -1 {
                    self.map[i] = self.info;
                }
            }
        }
        if self.primary == idx {
            self.primary = -1;
        }
    }
}

/// The registered framebuffers' indices (`sys/class/graphics/fb<N>`), ascending.
fn registered(sys: &Path) -> io::Result<Vec<u32>> {
    let mut out: Vec<u32> = fsx::list(&sys.join("class/graphics"))?
        .iter()
        .filter_map(|n| n.strip_prefix("fb")?.parse().ok())
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// `fb_is_primary_device` (x86): the framebuffer's device is the boot VGA device.
fn is_primary(sys: &Path, n: u32) -> bool {
    let dev = sys.join(format!("class/graphics/fb{n}/device"));
    dec_attr(&dev, "boot_vga") == Some(1)
}

/// The probe's part: registers `driver`'s framebuffer on `dev` unless the device has one.
pub(crate) fn probe(sys: &Path, dev: &Path, driver: &str) -> io::Result<()> {
    let Some(name) = fbdev_name(sys, dev, driver) else {
        return Ok(());
    };
    if !framebuffers_of(dev)?.is_empty() {
        return Ok(());
    }
    register(sys, dev, name).map(|_| ())
}

/// `register_framebuffer` on `dev`, then fbcon's take-over; returns the index.
pub(crate) fn register(sys: &Path, dev: &Path, name: &str) -> io::Result<u32> {
    let class = sys.join("class/graphics");
    let used: Vec<u32> = fsx::list(&class)?
        .iter()
        .filter_map(|n| n.strip_prefix("fb")?.parse().ok())
        .collect();
    let n = (0..FB_MAX)
        .find(|i| !used.contains(i))
        .ok_or_else(|| errno(Errno::ENXIO))?;
    let fb = format!("fb{n}");
    let dir = dev.join("graphics").join(&fb);
    fsx::create_dir_all(&dir.join("power"))?;
    fsx::write_atomic(&dir.join("dev"), &format!("{FB_MAJOR}:{n}\n"), 0o444)?;
    fsx::write_atomic(&dir.join("name"), &format!("{name}\n"), 0o444)?;
    fsx::write_atomic(
        &dir.join("uevent"),
        &format!("MAJOR={FB_MAJOR}\nMINOR={n}\nDEVNAME={fb}\n"),
        0o644,
    )?;
    fsx::symlink_rel(&dir.join("device"), dev)?;
    fsx::create_dir_all(&class)?;
    fsx::symlink_rel(&dir.join("subsystem"), &class)?;
    fsx::symlink_rel(&class.join(&fb), &dir)?;
    fbcon_registered(sys, n)?;
    Ok(n)
}

/// The remove's part: unregisters every framebuffer on `dev`, with fbcon's answers.
pub(crate) fn remove(sys: &Path, dev: &Path) -> io::Result<()> {
    for fb in framebuffers_of(dev)? {
        if let Some(n) = fb.strip_prefix("fb").and_then(|n| n.parse().ok()) {
            fbcon_unbinding(sys, n)?;
        }
        fsx::remove_quiet(&sys.join("class/graphics").join(&fb))?;
        fsx::remove_dir_quiet(&dev.join("graphics").join(&fb))?;
        if let Some(n) = fb.strip_prefix("fb").and_then(|n| n.parse().ok()) {
            let mut f = Fbcon::load(sys, None)?;
            f.unregistered(n, &registered(sys)?);
            f.store(sys)?;
        }
    }
    fsx::remove_empty_dir(&dev.join("graphics"))?;
    let left = fsx::list(&sys.join("class/graphics"))?.iter().any(|n| {
        n.strip_prefix("fb")
            .is_some_and(|i| i.parse::<u32>().is_ok())
    });
    if !left {
        // The last framebuffer is gone: fbcon unregisters as a console driver.
        if let Some(id) = fbcon_entry(sys)? {
            fsx::remove_quiet(&sys.join("class/vtconsole").join(&id))?;
            fsx::remove_dir_quiet(&sys.join("devices/virtual/vtconsole").join(&id))?;
        }
    }
    Ok(())
}

/// The console drivers' entries, `vtcon<M>`, by number.
fn vtconsoles(sys: &Path) -> io::Result<Vec<String>> {
    let mut ids: Vec<(u32, String)> = fsx::list(&sys.join("class/vtconsole"))?
        .into_iter()
        .filter_map(|id| Some((id.strip_prefix("vtcon")?.parse().ok()?, id)))
        .collect();
    ids.sort();
    Ok(ids.into_iter().map(|(_, id)| id).collect())
}

/// fbcon's entry, when it is registered.
fn fbcon_entry(sys: &Path) -> io::Result<Option<String>> {
    for id in vtconsoles(sys)? {
        let name = fsx::read_opt(&sys.join("class/vtconsole").join(&id).join("name"));
        if name.is_some_and(|n| n.contains("frame buffer device")) {
            return Ok(Some(id));
        }
    }
    Ok(None)
}

/// Writes a console driver's entry `vtcon<n>` (below `sys`), unless it exists.
fn write_vtconsole(sys: &Path, id: &str, name: &str, bound: bool) -> io::Result<()> {
    let dir = sys.join("devices/virtual/vtconsole").join(id);
    let class = sys.join("class/vtconsole");
    fsx::create_dir_all(&dir.join("power"))?;
    fsx::create_dir_all(&class)?;
    if !dir.join("name").exists() {
        fsx::write_atomic(&dir.join("uevent"), "", 0o644)?;
        fsx::write_atomic(&dir.join("name"), &format!("{name}\n"), 0o444)?;
        fsx::write_atomic(&dir.join("bind"), if bound { "1\n" } else { "0\n" }, 0o644)?;
    }
    fsx::symlink_rel(&dir.join("subsystem"), &class)?;
    fsx::symlink_rel(&class.join(id), &dir)
}

/// Sets every console driver's `bind`: 1 for `bound`, 0 for the others.
fn bind_only(sys: &Path, bound: &str) -> io::Result<()> {
    for id in vtconsoles(sys)? {
        let file = sys.join("class/vtconsole").join(&id).join("bind");
        let want = if id == bound { "1\n" } else { "0\n" };
        if fsx::read_opt(&file).as_deref() != Some(want) {
            fsx::write_atomic(&file, want, 0o644)?;
        }
    }
    Ok(())
}

/// Whether fbcon holds the consoles (its entry's `bind` reads 1).
fn fbcon_bound(sys: &Path) -> io::Result<bool> {
    Ok(match fbcon_entry(sys)? {
        Some(id) => dec_attr(&sys.join("class/vtconsole").join(id), "bind") == Some(1),
        None => false,
    })
}

/// `fbcon_fb_registered` for `fb<n>` (registered already).
fn fbcon_registered(sys: &Path, n: u32) -> io::Result<()> {
    let bound = fbcon_bound(sys)?;
    let mut f = Fbcon::load(sys, Some(n))?;
    let took_over = f.registered(n, is_primary(sys, n), bound);
    f.store(sys)?;
    if !took_over || bound {
        // Remapped inside fbcon (to a primary display, to a mapped framebuffer): nothing of
        // it shows in sysfs.
        return Ok(());
    }
    let id = match fbcon_entry(sys)? {
        Some(id) => id,
        None => {
            let used = vtconsoles(sys)?;
            let m = (0..)
                .find(|m| !used.contains(&format!("vtcon{m}")))
                .unwrap_or(0);
            let id = format!("vtcon{m}");
            write_vtconsole(sys, &id, FBCON_NAME, false)?;
            id
        }
    };
    bind_only(sys, &id)
}

/// `fbcon_fb_unbind` for `fb<n>` (still registered): when every console of fbcon is on it,
/// fbcon lets them go back to the system console driver.
fn fbcon_unbinding(sys: &Path, n: u32) -> io::Result<()> {
    if !fbcon_bound(sys)? {
        return Ok(());
    }
    let mut f = Fbcon::load(sys, None)?;
    let lets_go = f.unbind(n);
    f.store(sys)?;
    if !lets_go {
        return Ok(());
    }
    let Some(system) = vtconsoles(sys)?.into_iter().next() else {
        return Ok(());
    };
    bind_only(sys, &system)
}

/// Writes the console drivers a kernel registered at boot, before any framebuffer (`system`,
/// the system driver as `vtcon0` names it: `(S) dummy device` without a VGA text mode,
/// `(S) VGA+` with one, bound), and the foreground console `tty1`; what is there stays.
pub(crate) fn write_consoles(tree: &Tree, system: &str) -> Result<(), SimError> {
    let sys = tree.path("sys");
    let io = |source| SimError::Io {
        path: sys.clone(),
        source,
    };
    write_vtconsole(&sys, "vtcon0", system, true).map_err(io)?;
    let tty0 = "sys/devices/virtual/tty/tty0";
    tree.file_if_missing(&format!("{tty0}/active"), "tty1\n", 0o444)?;
    tree.file_if_missing(&format!("{tty0}/dev"), "4:0\n", 0o444)?;
    tree.file_if_missing(
        &format!("{tty0}/uevent"),
        "MAJOR=4\nMINOR=0\nDEVNAME=tty0\n",
        0o644,
    )?;
    tree.dir(&format!("{tty0}/power"))?;
    tree.link(&format!("{tty0}/subsystem"), "sys/class/tty")?;
    tree.link("sys/class/tty/tty0", tty0)
}

/// The probe's part for a function a profile writes bound to `driver` (`rel` below the root).
/// Nothing when the function is bound to another driver now (the profile is written again).
pub(crate) fn profile_probe(tree: &Tree, rel: &str, driver: &str) -> Result<(), SimError> {
    let dev = tree.path(rel);
    if driver_of(&dev).as_deref() != Some(driver) {
        return Ok(());
    }
    probe(&tree.path("sys"), &dev, driver).map_err(|source| SimError::Io { path: dev, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind_of(sys: &Path, id: &str) -> Option<String> {
        fsx::read_opt(&sys.join("class/vtconsole").join(id).join("bind"))
    }

    /// A tree with the boot consoles and two display adapters (no framebuffer yet): the
    /// directory, the tree, its `sys` and the adapters.
    fn two_adapters() -> (
        tempfile::TempDir,
        Tree,
        std::path::PathBuf,
        std::path::PathBuf,
        std::path::PathBuf,
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let tree = Tree::new(dir.path()).expect("tree");
        write_consoles(&tree, "(S) dummy device").expect("consoles");
        let sys = tree.path("sys");
        let a = tree.dir("sys/devices/pci0000:00/0000:00:03.0").expect("a");
        let b = tree.dir("sys/devices/pci0000:00/0000:00:04.0").expect("b");
        (dir, tree, sys, a, b)
    }

    #[test]
    fn framebuffers_come_and_go_with_the_driver_and_fbcon_follows() {
        let (_dir, _tree, sys, a, b) = two_adapters();
        assert_eq!(
            fbcon_entry(&sys).expect("entry"),
            None,
            "not before a framebuffer"
        );
        assert_eq!(register(&sys, &a, "bochs-drmdrmfb").expect("fb0"), 0);
        assert_eq!(fbcon_entry(&sys).expect("entry").as_deref(), Some("vtcon1"));
        assert_eq!(bind_of(&sys, "vtcon0").as_deref(), Some("0\n"));
        assert_eq!(bind_of(&sys, "vtcon1").as_deref(), Some("1\n"));
        assert_eq!(register(&sys, &b, "bochs-drmdrmfb").expect("fb1"), 1);
        assert_eq!(
            fsx::read_opt(&sys.join("class/graphics/fb1/name")).as_deref(),
            Some("bochs-drmdrmfb\n")
        );
        // The second adapter's goes: fbcon stays on fb0.
        remove(&sys, &b).expect("remove b");
        assert!(!b.join("graphics").exists());
        assert_eq!(bind_of(&sys, "vtcon1").as_deref(), Some("1\n"));
        assert_eq!(register(&sys, &b, "bochs-drmdrmfb").expect("fb1 again"), 1);
        // fb0 goes: every console was on it, fbcon lets them go to the dummy console.
        remove(&sys, &a).expect("remove a");
        assert_eq!(bind_of(&sys, "vtcon0").as_deref(), Some("1\n"));
        assert_eq!(bind_of(&sys, "vtcon1").as_deref(), Some("0\n"));
        // fb0 again: fbcon takes over again.
        assert_eq!(register(&sys, &a, "bochs-drmdrmfb").expect("fb0 again"), 0);
        assert_eq!(bind_of(&sys, "vtcon1").as_deref(), Some("1\n"));
        // The last framebuffer gone, fbcon unregisters.
        remove(&sys, &a).expect("a");
        remove(&sys, &b).expect("b");
        assert_eq!(fbcon_entry(&sys).expect("entry"), None);
        assert_eq!(bind_of(&sys, "vtcon0").as_deref(), Some("1\n"));
        assert!(fsx::list(&sys.join("class/graphics"))
            .expect("list")
            .is_empty());
    }

    #[test]
    fn fbcon_follows_its_own_boot_map_and_the_primary_device() {
        let (_dir, tree, sys, a, b) = two_adapters();
        // fbcon=map:1 — fb0 is not fbcon's, fb1 is.
        tree.file_if_missing("proc/cmdline", "quiet fbcon=map:1\n", 0o444)
            .expect("cmdline");
        assert_eq!(register(&sys, &a, "bochs-drmdrmfb").expect("fb0"), 0);
        assert_eq!(fbcon_entry(&sys).expect("entry"), None, "map:1 skips fb0");
        assert_eq!(register(&sys, &b, "bochs-drmdrmfb").expect("fb1"), 1);
        assert_eq!(bind_of(&sys, "vtcon1").as_deref(), Some("1\n"));
        // Every console is on fb1: its removal lets them go, fb0's does not matter.
        remove(&sys, &a).expect("remove a");
        assert_eq!(bind_of(&sys, "vtcon1").as_deref(), Some("1\n"));
        remove(&sys, &b).expect("remove b");
        assert_eq!(fbcon_entry(&sys).expect("entry"), None);

        // Without a map, the boot VGA device's framebuffer takes the consoles from fb0.
        std::fs::remove_file(tree.path("proc/cmdline")).expect("cmdline");
        std::fs::remove_file(tree.path(FBCON_STATE)).expect("reboot fbcon");
        std::fs::write(b.join("boot_vga"), "1\n").expect("boot_vga");
        assert_eq!(register(&sys, &a, "bochs-drmdrmfb").expect("fb0"), 0);
        assert_eq!(register(&sys, &b, "bochs-drmdrmfb").expect("fb1"), 1);
        let state = fsx::read_opt(&tree.path(FBCON_STATE)).expect("state");
        assert!(state.contains("primary 1\n"), "{state}");
        // fb0 goes: the consoles are on fb1, fbcon stays.
        remove(&sys, &a).expect("remove a");
        assert_eq!(bind_of(&sys, "vtcon1").as_deref(), Some("1\n"));
        remove(&sys, &b).expect("remove b");
    }

    #[test]
    fn only_drivers_with_fbdev_emulation_register_framebuffers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sys = dir.path().join("sys");
        let vga = sys.join("devices/pci0000:00/0000:00:02.0");
        let gpu3d = sys.join("devices/pci0000:00/0000:00:03.0");
        for (d, class) in [(&vga, "0x030000\n"), (&gpu3d, "0x030200\n")] {
            std::fs::create_dir_all(d).expect("dev");
            std::fs::write(d.join("class"), class).expect("class");
        }
        assert_eq!(fbdev_name(&sys, &vga, "bochs-drm"), Some("bochs-drmdrmfb"));
        assert_eq!(
            fbdev_name(&sys, &vga, "nvidia"),
            None,
            "nvidia-drm fbdev is off"
        );
        assert_eq!(fbdev_name(&sys, &vga, "vfio-pci"), None);
        let params = sys.join("module/nvidia_drm/parameters");
        std::fs::create_dir_all(&params).expect("params");
        std::fs::write(params.join("modeset"), "Y\n").expect("modeset");
        std::fs::write(params.join("fbdev"), "Y\n").expect("fbdev");
        assert_eq!(fbdev_name(&sys, &vga, "nvidia"), Some("nvidia-drmdrmfb"));
        assert_eq!(fbdev_name(&sys, &gpu3d, "nvidia"), None, "no display");
        let kms = sys.join("module/drm_kms_helper/parameters");
        std::fs::create_dir_all(&kms).expect("params");
        std::fs::write(kms.join("fbdev_emulation"), "N\n").expect("off");
        assert_eq!(fbdev_name(&sys, &vga, "bochs-drm"), None);
    }
}
