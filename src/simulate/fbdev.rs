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
//! fbcon, derived from the tree like everything here (its internal map is not in sysfs):
//! - it registers as a console driver, `sys/class/vtconsole/vtcon<M>` named `(M) frame
//!   buffer device` (M the lowest free number), when it first takes the consoles over, and
//!   unregisters (the entry goes) when the last framebuffer goes;
//! - a framebuffer that registers while fbcon holds no console makes it take them over
//!   (`bind` 1 on its entry, 0 on the others) when fbcon's boot map names it: the digits of
//!   `fbcon=map:` in `proc/cmdline`, else fb0 or the boot VGA device's framebuffer
//!   (`CONFIG_FRAMEBUFFER_CONSOLE_DETECT_PRIMARY`);
//! - removing the framebuffer every console of fbcon is on unbinds fbcon (`bind` 0, and 1 on
//!   the system console driver, the first entry): the consoles go back to the dummy console.
//!   Which framebuffer each console is on is `discovery::console`'s reading of the same facts.
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
use crate::discovery::console::{self as console_rule, ConsoleFacts, FbDevice};
use crate::host::Host;

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

/// The facts of the host whose `sys` is `sys`, as vgpud reads them.
fn facts(sys: &Path) -> io::Result<ConsoleFacts> {
    let root = sys.parent().ok_or_else(|| errno(Errno::EINVAL))?;
    console_rule::read_facts(&Host::new(root)).map_err(|e| io::Error::other(e.to_string()))
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
    if fbcon_bound(sys)? {
        // fbcon remaps consoles internally (to a primary display, to a mapped framebuffer);
        // nothing of it shows in sysfs.
        return Ok(());
    }
    let f = facts(sys)?;
    let takes_over = match &f.fbcon.map {
        Some(map) => map.contains(&n),
        None => {
            n == 0
                || f.framebuffers.iter().any(|fb| {
                    fb.index == n
                        && matches!(&fb.device, FbDevice::Pci(a) if Some(a) == f.boot_vga.as_ref())
                })
        }
    };
    if !takes_over {
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
    let f = facts(sys)?;
    let elsewhere = (f.fbcon.first_vc..=f.fbcon.last_vc)
        .any(|vc| console_rule::fbcon_framebuffer(&f, vc).is_some_and(|(fb, _)| fb.index != n));
    if elsewhere {
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

    #[test]
    fn framebuffers_come_and_go_with_the_driver_and_fbcon_follows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tree = Tree::new(dir.path()).expect("tree");
        write_consoles(&tree, "(S) dummy device").expect("consoles");
        let sys = tree.path("sys");
        let a = tree.dir("sys/devices/pci0000:00/0000:00:03.0").expect("a");
        let b = tree.dir("sys/devices/pci0000:00/0000:00:04.0").expect("b");
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
