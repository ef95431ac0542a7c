//! Kernel uevents as the kernel sends them on a `NETLINK_KOBJECT_UEVENT` socket (and the
//! simulated kernel on its unix socket): `ACTION@DEVPATH\0KEY=VALUE\0…`. Messages udev
//! re-broadcasts (they start with `libudev\0`) are skipped; anything else that is not of
//! that shape is refused, never trusted.

use std::collections::BTreeMap;

/// The largest message accepted: the kernel's `UEVENT_BUFFER_SIZE` (2048) of environment
/// plus the `ACTION@DEVPATH` header, with room to spare.
pub const MAX_MESSAGE: usize = 8192;

/// One kernel uevent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uevent {
    /// `add`, `remove`, `change`, `bind`, `unbind`, `move`, `online`, `offline`.
    pub action: String,
    /// The device's path below `/sys`, with its leading `/` (`/devices/pci0000:00/…`).
    pub devpath: String,
    /// Every `KEY=VALUE` of the message, `ACTION` and `DEVPATH` included.
    pub env: BTreeMap<String, String>,
}

/// Why a message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UeventError {
    /// Longer than [`MAX_MESSAGE`].
    #[error("a uevent of {0} bytes (at most {MAX_MESSAGE})")]
    TooLarge(usize),
    /// Not `ACTION@DEVPATH` first, or a field without `=`, or not UTF-8.
    #[error("a malformed uevent: {0}")]
    Malformed(&'static str),
}

impl Uevent {
    /// `SUBSYSTEM` (`mdev`, `pci`, …).
    pub fn subsystem(&self) -> Option<&str> {
        self.get("SUBSYSTEM")
    }

    /// `SEQNUM`, the kernel's counter of uevents.
    pub fn seqnum(&self) -> Option<u64> {
        self.get("SEQNUM").and_then(|s| s.parse().ok())
    }

    /// One environment value.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.env.get(key).map(String::as_str)
    }

    /// The device's name: the last component of its path (an mdev's UUID, a PCI address).
    pub fn name(&self) -> &str {
        self.devpath.rsplit('/').next().unwrap_or_default()
    }

    /// The name of the device's parent in the path (an mdev's parent device).
    pub fn parent_name(&self) -> Option<&str> {
        let mut parts = self.devpath.rsplit('/');
        parts.next();
        parts.next().filter(|p| !p.is_empty())
    }
}

/// Parses one message. `Ok(None)` for a message of udev's (`libudev\0…`), which vgpud does
/// not listen to.
pub fn parse(buf: &[u8]) -> Result<Option<Uevent>, UeventError> {
    if buf.len() > MAX_MESSAGE {
        return Err(UeventError::TooLarge(buf.len()));
    }
    if buf.starts_with(b"libudev\0") {
        return Ok(None);
    }
    let mut fields = buf.split(|b| *b == 0).filter(|f| !f.is_empty());
    let header = fields.next().ok_or(UeventError::Malformed("empty"))?;
    let header = std::str::from_utf8(header).map_err(|_| UeventError::Malformed("not UTF-8"))?;
    let (action, devpath) = header
        .split_once('@')
        .ok_or(UeventError::Malformed("no ACTION@DEVPATH header"))?;
    if action.is_empty() || !devpath.starts_with('/') {
        return Err(UeventError::Malformed("no ACTION@DEVPATH header"));
    }
    let mut env = BTreeMap::new();
    for field in fields {
        let field = std::str::from_utf8(field).map_err(|_| UeventError::Malformed("not UTF-8"))?;
        let (key, value) = field
            .split_once('=')
            .ok_or(UeventError::Malformed("a field without ="))?;
        if key.is_empty() {
            return Err(UeventError::Malformed("a field without a key"));
        }
        env.insert(key.to_string(), value.to_string());
    }
    // The header and the environment say the same (the kernel writes both from one place).
    if env.get("ACTION").is_some_and(|a| a != action)
        || env.get("DEVPATH").is_some_and(|d| d != devpath)
    {
        return Err(UeventError::Malformed(
            "the header and ACTION/DEVPATH differ",
        ));
    }
    if devpath.split('/').any(|c| c == "..") {
        return Err(UeventError::Malformed("a DEVPATH with .."));
    }
    Ok(Some(Uevent {
        action: action.to_string(),
        devpath: devpath.to_string(),
        env,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An mdev's `add` as Linux 6.1 sends it (read with `udevadm monitor --kernel
    /// --property`'s socket; the bus's uevent callback adds MDEV_TYPE).
    const MDEV_ADD: &[u8] = b"add@/devices/pci0000:00/0000:00:03.0/0000:03:00.0/c0a8e8e2-1c26-4f0e-9f5e-5d5bb0b4a1d1\0ACTION=add\0DEVPATH=/devices/pci0000:00/0000:00:03.0/0000:03:00.0/c0a8e8e2-1c26-4f0e-9f5e-5d5bb0b4a1d1\0SUBSYSTEM=mdev\0MDEV_TYPE=nvidia-256\0SEQNUM=4823\0";

    /// A parent's registration (mdev_core's `mdev_register_parent`).
    const REGISTERED: &[u8] = b"change@/devices/pci0000:00/0000:00:03.0/0000:03:00.0\0ACTION=change\0DEVPATH=/devices/pci0000:00/0000:00:03.0/0000:03:00.0\0SUBSYSTEM=pci\0MDEV_STATE=registered\0DRIVER=nvidia\0PCI_CLASS=30000\0PCI_ID=10DE:1E30\0PCI_SUBSYS_ID=10DE:12BA\0PCI_SLOT_NAME=0000:03:00.0\0MODALIAS=pci:v000010DEd00001E30sv000010DEsd000012BAbc03sc00i00\0SEQNUM=4790\0";

    #[test]
    fn kernel_messages_parse() {
        let ev = parse(MDEV_ADD).expect("parses").expect("a kernel message");
        assert_eq!(ev.action, "add");
        assert_eq!(ev.subsystem(), Some("mdev"));
        assert_eq!(ev.seqnum(), Some(4823));
        assert_eq!(ev.get("MDEV_TYPE"), Some("nvidia-256"));
        assert_eq!(ev.name(), "c0a8e8e2-1c26-4f0e-9f5e-5d5bb0b4a1d1");
        assert_eq!(ev.parent_name(), Some("0000:03:00.0"));

        let ev = parse(REGISTERED)
            .expect("parses")
            .expect("a kernel message");
        assert_eq!(ev.action, "change");
        assert_eq!(ev.get("MDEV_STATE"), Some("registered"));
        assert_eq!(ev.get("DRIVER"), Some("nvidia"));
        assert_eq!(ev.name(), "0000:03:00.0");
    }

    #[test]
    fn udevs_messages_are_skipped_and_bad_ones_refused() {
        let mut udev = b"libudev\0".to_vec();
        udev.extend_from_slice(&[0xfe, 0xed, 0xca, 0xfe, 0, 0, 0, 0]);
        assert_eq!(parse(&udev), Ok(None));
        for bad in [
            &b""[..],
            b"\0\0",
            b"add\0ACTION=add\0",
            b"add@devices/x\0",
            b"@/devices/x\0",
            b"add@/devices/x\0NOEQUALS\0",
            b"add@/devices/x\0=v\0",
            b"add@/devices/x\0ACTION=remove\0",
            b"add@/devices/x\0DEVPATH=/devices/y\0",
            b"add@/devices/../etc\0",
            b"add@/devices/\xff\0",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let huge = vec![b'a'; MAX_MESSAGE + 1];
        assert_eq!(parse(&huge), Err(UeventError::TooLarge(MAX_MESSAGE + 1)));
    }
}
