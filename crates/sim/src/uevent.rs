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
//! - a VF made or destroyed: `add`/`remove` with SUBSYSTEM=pci.
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
use std::path::Path;

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

/// An mdev made and bound to its vendor driver: `add`, then `bind`.
pub(crate) fn mdev_added(roots: &Roots, dev: &Path, type_id: &str, driver: &str) {
    let ty = ("MDEV_TYPE", type_id);
    emit(roots, "add", dev, "mdev", &[ty]);
    emit(roots, "bind", dev, "mdev", &[("DRIVER", driver), ty]);
}

/// An mdev removed: `unbind`, then `remove`.
pub(crate) fn mdev_removed(roots: &Roots, dev: &Path, type_id: Option<&str>) {
    let ty: Vec<(&str, &str)> = type_id.map(|t| ("MDEV_TYPE", t)).into_iter().collect();
    emit(roots, "unbind", dev, "mdev", &ty);
    emit(roots, "remove", dev, "mdev", &ty);
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

/// A PCI function (a VF) came (`true`) or went.
pub(crate) fn pci_device(roots: &Roots, dev: &Path, added: bool) {
    let action = if added { "add" } else { "remove" };
    emit(roots, action, dev, "pci", &[]);
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
    if subsystem == "pci" {
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

/// Sends one uevent; every failure is the event's loss, never the operation's.
fn emit(roots: &Roots, action: &str, dev: &Path, subsystem: &str, extra: &[(&str, &str)]) {
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
    let _ = send(roots, &socket, |seqnum| {
        message(action, &devpath, subsystem, extra, seqnum)
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
