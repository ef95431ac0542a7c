//! The simulated kernel's uevents: what the kernel sends on its `NETLINK_KOBJECT_UEVENT`
//! socket when a device comes, goes, or gets or loses a driver, sent as the same bytes
//! (`ACTION@DEVPATH\0ACTION=…\0DEVPATH=…\0SUBSYSTEM=…\0…\0SEQNUM=N\0`) to the unix datagram
//! socket `ROOT/run/vgpud-simulator/uevents`, where a daemon on the simulated host listens.
//!
//! - an mdev's `device_add`: `add` (SUBSYSTEM=mdev, MDEV_TYPE=), then `bind` (DRIVER=) when
//!   its vendor driver probes it; its removal `unbind` then `remove`;
//! - a parent's `mdev_register_parent`/`mdev_unregister_parent`: `change` with
//!   `MDEV_STATE=registered|unregistered` (Linux 5.3);
//! - a PCI driver's bind and unbind: `bind`/`unbind` with DRIVER= (Linux 4.14);
//! - a VF made or destroyed: `add`/`remove` with SUBSYSTEM=pci;
//! - a device registered with vfio by its driver's probe (an mdev's vendor driver, vfio-pci,
//!   nvidia on an Ada VF), before the `bind`: its IOMMU group's character device when the
//!   group had none (`add`, SUBSYSTEM=vfio, `/devices/virtual/vfio/<group>`, DEVNAME=), then
//!   its vfio device (`add`, SUBSYSTEM=vfio-dev, `<dev>/vfio-dev/vfio<N>`, with that
//!   device's `uevent` variables); unregistered before the `unbind`, in the reverse order
//!   (`remove`). A real Linux 6.1 sends these four events for each mtty device it makes
//!   (the real-kernel suite counts them). The group's own sysfs directory is not modelled.
//!
//! Every event of a PCI function also carries the function's own variables, as its `uevent`
//! file shows them (`DRIVER=` while bound, `PCI_CLASS`, `PCI_ID`, `PCI_SUBSYS_ID`,
//! `PCI_SLOT_NAME`, `MODALIAS`): the kernel's `dev_uevent` adds them to every event, so an
//! `unbind` has no `DRIVER` but still says the function is a display controller.
//!
//! `SEQNUM` is a counter in `ROOT/run/vgpud-simulator/uevent-seqnum`, taken and sent under
//! that file's own `flock` (a leaf lock: nothing else is taken under it, so emitting never
//! deadlocks, also from a journal's recovery). Nobody listening drops the event. The
//! kernel's netlink socket holds what vgpud asks for (16 MiB, thousands of events), but a
//! unix datagram socket's queue holds only `net.unix.max_dgram_qlen` messages (10 by
//! default), which a storm's creates fill in a moment while the listener is still reading;
//! so a full queue makes the sender wait for room, as a large buffer would have taken the
//! event, for at most [`ROOM_WAIT`]. A queue still full after that (the listener stopped or
//! stuck) drops the event and leaves the marker `uevent-overrun` (the ENOBUFS of a netlink
//! socket that overran), which the listener takes as "look at everything".

use std::fs;
use std::io::{self, Read, Seek, Write};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use super::kernel::Roots;

/// The socket's name in the simulator's state directory.
pub const SOCKET: &str = "uevents";
/// How long a sender waits for room in a full queue before the event counts as lost.
pub const ROOM_WAIT: std::time::Duration = std::time::Duration::from_millis(100);
/// The overrun marker's name in the simulator's state directory.
pub const OVERRUN: &str = "uevent-overrun";
/// The counter's name in the simulator's state directory.
const SEQNUM: &str = "uevent-seqnum";

/// An mdev made and bound to its vendor driver: `add`, its registration with vfio (see
/// [`vfio_changed`]), then `bind`.
pub(crate) fn mdev_added(roots: &Roots, dev: &Path, type_id: &str, driver: &str) {
    let ty = ("MDEV_TYPE", type_id);
    emit(roots, "add", dev, "mdev", &[ty]);
    vfio_changed(roots, &VfioState::default(), &VfioState::of(roots, dev));
    emit(roots, "bind", dev, "mdev", &[("DRIVER", driver), ty]);
}

/// An mdev removed: its vfio registration as it was before (`vfio`, [`VfioState::of`]) gone,
/// then `unbind`, then `remove`.
pub(crate) fn mdev_removed(roots: &Roots, dev: &Path, type_id: Option<&str>, vfio: &VfioState) {
    let ty: Vec<(&str, &str)> = type_id.map(|t| ("MDEV_TYPE", t)).into_iter().collect();
    vfio_changed(roots, vfio, &VfioState::of(roots, dev));
    emit(roots, "unbind", dev, "mdev", &ty);
    emit(roots, "remove", dev, "mdev", &ty);
}

/// A device's registration with vfio as the tree shows it: its vfio devices
/// (`<dev>/vfio-dev/vfio<N>` with their `uevent` variables), its IOMMU group, and whether the
/// group's character device (`dev/vfio/<group>`) is there. Empty when nobody listens.
#[derive(Default)]
pub(crate) struct VfioState {
    nodes: Vec<(PathBuf, Vec<(String, String)>)>,
    group: Option<String>,
    group_node: bool,
}

impl VfioState {
    pub(crate) fn of(roots: &Roots, dev: &Path) -> VfioState {
        if !listening(roots) {
            return VfioState::default();
        }
        let base = dev.join("vfio-dev");
        let nodes = super::fsx::list(&base)
            .unwrap_or_default()
            .into_iter()
            .map(|name| {
                let node = base.join(name);
                let vars = device_env(&node);
                (node, vars)
            })
            .collect();
        let group = super::binding::group_of(dev);
        let group_node = group
            .as_ref()
            .is_some_and(|g| super::fsx::exists_nofollow(&roots.dev.join(g)));
        VfioState {
            nodes,
            group,
            group_node,
        }
    }
}

/// The uevents of what changed in one device's registration with vfio from `before` to
/// `after`, in the kernel's order: a group's character device that came, then the vfio
/// devices that came; the vfio devices that went, then a group's character device that went.
pub(crate) fn vfio_changed(roots: &Roots, before: &VfioState, after: &VfioState) {
    let group_event = |action: &str, group: &str| {
        let name = format!("vfio/{group}");
        let dev = roots.sys.join("devices/virtual/vfio").join(group);
        emit(roots, action, &dev, "vfio", &[("DEVNAME", &name)]);
    };
    let had = |nodes: &[(PathBuf, Vec<(String, String)>)], node: &Path| {
        nodes.iter().any(|(n, _)| n == node)
    };
    if let Some(g) = &after.group {
        if after.group_node && !(before.group_node && before.group.as_ref() == Some(g)) {
            group_event("add", g);
        }
    }
    for (node, vars) in after.nodes.iter().filter(|(n, _)| !had(&before.nodes, n)) {
        emit_with(roots, "add", node, "vfio-dev", &[], || vars.clone());
    }
    for (node, vars) in before.nodes.iter().filter(|(n, _)| !had(&after.nodes, n)) {
        emit_with(roots, "remove", node, "vfio-dev", &[], || vars.clone());
    }
    if let Some(g) = &before.group {
        if before.group_node && !super::fsx::exists_nofollow(&roots.dev.join(g)) {
            group_event("remove", g);
        }
    }
}

/// Whether a daemon listens on the simulated host's uevent socket.
fn listening(roots: &Roots) -> bool {
    fs::symlink_metadata(roots.state.join(SOCKET)).is_ok()
}

/// A parent's registration with mdev_core changed: `change` with `MDEV_STATE`, in the
/// parent's own subsystem (`pci`, or a class such as mtty's).
pub(crate) fn parent_state(roots: &Roots, dev: &Path, registered: bool) {
    let state = if registered {
        "registered"
    } else {
        "unregistered"
    };
    let subsystem = super::fsx::link_basename(&dev.join("subsystem"));
    let subsystem = subsystem.as_deref().unwrap_or("pci");
    emit(roots, "change", dev, subsystem, &[("MDEV_STATE", state)]);
}

/// A parent registered on the host at `root` (a driver loaded, a profile written).
pub(crate) fn registered(root: &Path, dev: &Path) {
    if let (Ok(roots), Ok(dev)) = (Roots::new(root), fs::canonicalize(dev)) {
        parent_state(&roots, &dev, true);
    }
}

/// A PCI function bound to a driver (`Some`), or unbound.
pub(crate) fn pci_driver(roots: &Roots, dev: &Path, driver: Option<&str>) {
    match driver {
        Some(driver) => emit(roots, "bind", dev, "pci", &[("DRIVER", driver)]),
        None => emit(roots, "unbind", dev, "pci", &[]),
    }
}

/// Where a daemon on the simulated host at `root` listens, and the marker of a lost event.
pub fn paths(root: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let state = root.join(super::journal::STATE_DIR);
    (state.join(SOCKET), state.join(OVERRUN))
}

/// A PCI function (a VF) came.
pub(crate) fn pci_device_added(roots: &Roots, dev: &Path) {
    emit(roots, "add", dev, "pci", &[]);
}

/// A PCI function (a VF) went; `own` is what its `uevent` file said before its directory
/// went ([`device_env`]), as the kernel's `remove` event carries the device's variables.
pub(crate) fn pci_device_removed(roots: &Roots, dev: &Path, own: Vec<(String, String)>) {
    emit_with(roots, "remove", dev, "pci", &[], || own);
}

/// A device's own variables, as its `uevent` file shows them: what the kernel's `dev_uevent`
/// adds to every event of the device (`DRIVER=` while it is bound, then its bus's: for PCI
/// `PCI_CLASS`, `PCI_ID`, `PCI_SUBSYS_ID`, `PCI_SLOT_NAME`, `MODALIAS`; drivers/pci/
/// pci-driver.c `pci_uevent`). Empty when the file is not there.
pub(crate) fn device_env(dev: &Path) -> Vec<(String, String)> {
    super::fsx::read_opt(&dev.join("uevent"))
        .map(|text| {
            text.lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// The message the kernel sends, for the device at `dev` (a directory below `roots.sys`).
pub(crate) fn message(
    action: &str,
    devpath: &str,
    subsystem: &str,
    extra: &[(&str, &str)],
    seqnum: u64,
) -> Vec<u8> {
    let mut out =
        format!("{action}@{devpath}\0ACTION={action}\0DEVPATH={devpath}\0SUBSYSTEM={subsystem}\0");
    // (A PCI function whose `uevent` file is not there still names its slot.)
    if subsystem == "pci" && !extra.iter().any(|(k, _)| *k == "PCI_SLOT_NAME") {
        if let Some(slot) = devpath.rsplit('/').next() {
            out.push_str(&format!("PCI_SLOT_NAME={slot}\0"));
        }
    }
    for (k, v) in extra {
        out.push_str(&format!("{k}={v}\0"));
    }
    out.push_str(&format!("SEQNUM={seqnum}\0"));
    out.into_bytes()
}

/// Sends one uevent: the caller's variables `extra`, then those of the device's `uevent`
/// file for a PCI function (the kernel's order: the caller's `envp_ext`, then
/// `dev_uevent`'s); every failure is the event's loss, never the operation's.
fn emit(roots: &Roots, action: &str, dev: &Path, subsystem: &str, extra: &[(&str, &str)]) {
    emit_with(roots, action, dev, subsystem, extra, || {
        if subsystem == "pci" {
            device_env(dev)
        } else {
            Vec::new()
        }
    });
}

/// [`emit`] with the device's own variables given by `own`, read only when somebody listens
/// (a caller's key is not repeated).
fn emit_with(
    roots: &Roots,
    action: &str,
    dev: &Path,
    subsystem: &str,
    extra: &[(&str, &str)],
    own: impl FnOnce() -> Vec<(String, String)>,
) {
    let Ok(rel) = dev.strip_prefix(&roots.sys) else {
        return;
    };
    let devpath = format!("/{}", rel.display());
    let socket = roots.state.join(SOCKET);
    // Nobody listens: nothing to number or send (the kernel numbers every event; a gap in
    // the numbers is all that would tell).
    if fs::symlink_metadata(&socket).is_err() {
        return;
    }
    let own = own();
    let mut vars: Vec<(&str, &str)> = extra.to_vec();
    for (k, v) in &own {
        if !extra.iter().any(|(e, _)| e == k) {
            vars.push((k, v));
        }
    }
    let _ = send(roots, &socket, |seqnum| {
        message(action, &devpath, subsystem, &vars, seqnum)
    });
}

fn send(roots: &Roots, socket: &Path, message: impl FnOnce(u64) -> Vec<u8>) -> io::Result<()> {
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(roots.state.join(SEQNUM))?;
    let mut file =
        Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| io::Error::from(e))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let seqnum = text.trim().parse::<u64>().unwrap_or(0) + 1;
    file.rewind()?;
    file.set_len(0)?;
    file.write_all(seqnum.to_string().as_bytes())?;
    let sender = UnixDatagram::unbound()?;
    sender.set_write_timeout(Some(ROOM_WAIT))?;
    match sender.send_to(&message(seqnum), socket) {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            // The receiver's queue stayed full: the event is lost, and the receiver must know.
            fs::write(roots.state.join(OVERRUN), b"")
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The variables of the next message on `socket`, as `KEY=value` strings.
    fn received(socket: &UnixDatagram) -> Vec<String> {
        let mut buf = vec![0_u8; 4096];
        let n = socket.recv(&mut buf).expect("a message");
        buf[..n]
            .split(|b| *b == 0)
            .skip(1)
            .filter(|f| !f.is_empty())
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect()
    }

    #[test]
    fn a_pci_functions_events_carry_its_own_variables_and_an_unbind_no_driver() {
        let root = tempfile::tempdir().expect("tempdir");
        let dev = root.path().join("sys/devices/pci0000:40/0000:41:00.4");
        fs::create_dir_all(&dev).expect("device");
        let file = "PCI_CLASS=30200\nPCI_ID=10DE:26B9\nPCI_SUBSYS_ID=10DE:1851\nPCI_SLOT_NAME=0000:41:00.4\nMODALIAS=pci:v000010DEd000026B9sv000010DEsd00001851bc03sc02i00\n";
        fs::write(dev.join("uevent"), format!("DRIVER=nvidia\n{file}")).expect("uevent");
        let roots = Roots::new(root.path()).expect("roots");
        fs::create_dir_all(&roots.state).expect("state");
        let socket = UnixDatagram::bind(roots.state.join(SOCKET)).expect("socket");
        let dev = fs::canonicalize(&dev).expect("canonical");

        pci_driver(&roots, &dev, Some("nvidia"));
        let bind = received(&socket);
        assert_eq!(
            bind.iter().filter(|v| v.starts_with("DRIVER=")).count(),
            1,
            "{bind:?}"
        );
        assert!(bind.contains(&"PCI_CLASS=30200".to_string()), "{bind:?}");

        fs::write(dev.join("uevent"), file).expect("unbound");
        pci_driver(&roots, &dev, None);
        let unbind = received(&socket);
        assert!(unbind.contains(&"ACTION=unbind".to_string()), "{unbind:?}");
        assert!(
            !unbind.iter().any(|v| v.starts_with("DRIVER=")),
            "{unbind:?}"
        );
        for var in file.lines() {
            assert!(unbind.contains(&var.to_string()), "{var} in {unbind:?}");
        }
        assert_eq!(
            unbind
                .iter()
                .filter(|v| v.starts_with("PCI_SLOT_NAME="))
                .count(),
            1,
            "{unbind:?}"
        );

        let own = device_env(&dev);
        fs::remove_file(dev.join("uevent")).expect("gone");
        pci_device_removed(&roots, &dev, own);
        let remove = received(&socket);
        assert!(remove.contains(&"ACTION=remove".to_string()), "{remove:?}");
        assert!(
            remove.contains(&"PCI_CLASS=30200".to_string()),
            "{remove:?}"
        );
    }

    #[test]
    fn messages_are_the_kernels_bytes() {
        let m = message(
            "add",
            "/devices/pci0000:00/0000:00:02.0/0000:01:00.0",
            "pci",
            &[],
            7,
        );
        assert_eq!(
            m,
            b"add@/devices/pci0000:00/0000:00:02.0/0000:01:00.0\0ACTION=add\0DEVPATH=/devices/pci0000:00/0000:00:02.0/0000:01:00.0\0SUBSYSTEM=pci\0PCI_SLOT_NAME=0000:01:00.0\0SEQNUM=7\0"
        );
    }
}
