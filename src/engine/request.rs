//! Requests to the engine and their validation. Everything a caller sends is checked here
//! before it can reach a path or the kernel.

use super::{EngineError, EngineResult};
use crate::model::normalize_uuid;

/// The longest type, parent or owner string accepted.
pub const MAX_NAME_LEN: usize = 256;
/// The longest vendor parameter string accepted (`nvidia/vgpu_params`).
pub const MAX_PARAMS_LEN: usize = 1024;

/// Where a new device goes among the GPUs that can take it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Fill GPUs that already run the type, then GPUs that hold other devices, and keep
    /// empty GPUs for last (whole GPUs stay free for other framebuffer sizes).
    #[default]
    Pack,
    /// The least-loaded GPU first (empty GPUs first), for performance.
    Spread,
    /// The GPU with the lowest measured utilization (NVML) first; GPUs NVML cannot measure
    /// come after, least loaded first.
    #[serde(rename = "least-busy")]
    LeastBusy,
}

impl Policy {
    /// The name used on the bus and in the configuration file.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Pack => "pack",
            Policy::Spread => "spread",
            Policy::LeastBusy => "least-busy",
        }
    }

    /// Parses `pack` or `spread`.
    pub fn parse(s: &str) -> EngineResult<Policy> {
        match s {
            "pack" => Ok(Policy::Pack),
            "spread" => Ok(Policy::Spread),
            "least-busy" => Ok(Policy::LeastBusy),
            other => Err(EngineError::InvalidArgument(format!(
                "placement policy {:?} is not one of \"pack\", \"spread\", \"least-busy\"",
                shorten(other)
            ))),
        }
    }
}

/// A request to create a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRequest {
    /// A type id (`nvidia-259`), name (`GRID RTX6000-4Q`) or name without the vendor prefix
    /// (`RTX6000-4Q`), any case.
    pub type_query: String,
    /// Pins the GPU (its address).
    pub parent: Option<String>,
    /// Asks for this UUID.
    pub uuid: Option<String>,
    /// A free tag, such as the libvirt domain name.
    pub owner: String,
    /// Vendor parameters written to `nvidia/vgpu_params`.
    pub params: Option<String>,
    /// Keep a persistent (mdevctl) definition, so the device survives reboots.
    pub persistent: bool,
    /// Start the device whenever its parent appears (needs `persistent`).
    pub autostart: bool,
    /// Passthrough: also move the other devices of the GPU's IOMMU group to vfio-pci.
    pub force: bool,
    /// Placement policy; the engine's default when `None`.
    pub policy: Option<Policy>,
    /// Prefer GPUs on this NUMA node; the engine's default when `None`.
    pub numa_node: Option<u32>,
    /// With `uuid`: a device of that UUID and the same type is the answer (started if it is
    /// defined but not active) instead of `Exists`, so a retried create is harmless.
    pub exist_ok: bool,
    /// A MIG-backed vGPU may get a GPU instance made for it when none of its profile is
    /// free (destroyed again with the device).
    pub create_instance: bool,
    /// Reclaim the device once the libvirt domain its owner names has not been running for
    /// this many seconds ([`super::leases`]).
    pub lease_s: Option<u64>,
    /// Hand out a spare of the pool with this owner tag when it has one of the type
    /// ([`super::spares`]); make a device as without it otherwise.
    pub pool: Option<String>,
    /// Made to stock a pool (a layout's own create): not demand, so the demand record does
    /// not count it, and it never re-shapes. Any other create that finds no room may have
    /// the engine's [`super::Reshaper`] free a GPU that holds only spares, and is tried once
    /// more.
    pub stocking_pool: bool,
}

impl Default for CreateRequest {
    /// No type, and the D-Bus defaults: persistent, autostart.
    fn default() -> Self {
        CreateRequest {
            type_query: String::new(),
            parent: None,
            uuid: None,
            owner: String::new(),
            params: None,
            persistent: true,
            autostart: true,
            force: false,
            policy: None,
            numa_node: None,
            exist_ok: false,
            create_instance: true,
            lease_s: None,
            pool: None,
            stocking_pool: false,
        }
    }
}

/// A request to change how an existing device persists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModifyRequest {
    /// Keep (or drop) the persistent definition; unchanged when `None`.
    pub persistent: Option<bool>,
    /// Start (or not) when the parent appears; unchanged when `None`.
    pub autostart: Option<bool>,
}

/// Options of the rendered `<hostdev>`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostdevOptions {
    /// `display='on'|'off'`.
    pub display: Option<bool>,
    /// `ramfb='on'|'off'`.
    pub ramfb: Option<bool>,
    /// The guest PCI bus of a passthrough device's functions.
    pub guest_bus: Option<u8>,
}

impl CreateRequest {
    /// Checks every field; normalizes the UUID to lowercase.
    pub fn validate(&self) -> EngineResult<()> {
        check_name("type", &self.type_query)?;
        if let Some(p) = &self.parent {
            check_name("parent", p)?;
        }
        if let Some(u) = &self.uuid {
            if normalize_uuid(u).as_deref() != Some(u.as_str()) {
                parse_uuid(u)?;
                return Err(EngineError::InvalidArgument(format!(
                    "uuid {u:?} must be given in lowercase"
                )));
            }
        }
        check_owner("owner", &self.owner).map_err(EngineError::InvalidArgument)?;
        if let Some(pool) = &self.pool {
            check_owner("pool", pool).map_err(EngineError::InvalidArgument)?;
            if pool.is_empty() {
                return Err(EngineError::InvalidArgument(
                    "pool must name a pool: the owner tag of its spares".into(),
                ));
            }
            if self.uuid.is_some() {
                return Err(EngineError::InvalidArgument(
                    "pool and uuid exclude each other: a spare has the UUID it was made with"
                        .into(),
                ));
            }
        }
        if let Some(params) = &self.params {
            check_text("params", params, MAX_PARAMS_LEN, false)?;
        }
        if self.autostart && !self.persistent {
            return Err(EngineError::InvalidArgument(
                "autostart needs a persistent device: give \"autostart\": false with \"persistent\": false".into(),
            ));
        }
        if let Some(lease) = self.lease_s {
            if !(1..=super::leases::MAX_LEASE_S).contains(&lease) {
                return Err(EngineError::InvalidArgument(format!(
                    "lease_s is {lease}: 1 to {} seconds",
                    super::leases::MAX_LEASE_S
                )));
            }
            if self.owner.is_empty() {
                return Err(EngineError::InvalidArgument(
                    "a lease needs an \"owner\": the libvirt domain whose running keeps the device"
                        .into(),
                ));
            }
        }
        Ok(())
    }

    /// Returns the request with its UUID in the kernel's lowercase form.
    pub fn normalized(mut self) -> EngineResult<Self> {
        if let Some(u) = &self.uuid {
            self.uuid = Some(parse_uuid(u)?);
        }
        Ok(self)
    }
}

/// Parses a UUID as the kernel does and returns it in lowercase.
pub fn parse_uuid(s: &str) -> EngineResult<String> {
    normalize_uuid(s).ok_or_else(|| {
        EngineError::InvalidArgument(format!(
            "{:?} is not a UUID (8-4-4-4-12 hexadecimal digits)",
            shorten(s)
        ))
    })
}

/// A name that becomes part of a path or is matched against one: no separators, no dot
/// names, printable, not empty, not huge.
pub(super) fn check_name(what: &str, value: &str) -> EngineResult<()> {
    check_text(what, value, MAX_NAME_LEN, false)?;
    if value.contains('/') || value == "." || value == ".." {
        return Err(EngineError::InvalidArgument(format!(
            "{what} {:?} must not contain '/' or be a dot name",
            shorten(value)
        )));
    }
    Ok(())
}

/// A free string of at most `max` bytes without control characters.
pub(super) fn check_len(what: &str, value: &str, max: usize) -> EngineResult<()> {
    check_text(what, value, max, false)
}

/// Characters that change how text shows without showing themselves: the Unicode format
/// characters (general category Cf: zero-width and joiner characters, bidirectional marks,
/// embeddings, overrides and isolates, the BOM) and the line and paragraph separators.
pub fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{0600}'..='\u{0605}' | '\u{061C}' | '\u{06DD}' | '\u{070F}'
        | '\u{0890}'..='\u{0891}' | '\u{08E2}' | '\u{180E}' | '\u{200B}'..='\u{200F}'
        | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206F}'
        | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}' | '\u{110BD}' | '\u{110CD}'
        | '\u{13430}'..='\u{1343F}' | '\u{1BCA0}'..='\u{1BCA3}' | '\u{1D173}'..='\u{1D17A}'
        | '\u{E0001}' | '\u{E0020}'..='\u{E007F}')
}

/// An owner tag, the rule of domain names (an owner is often one): empty (no owner) or at
/// most [`MAX_NAME_LEN`] bytes, without white space at either end, control characters or
/// invisible ones ([`is_invisible`]), so that what `vgpuctl devices` shows is the tag itself.
/// The message names the first offending character by its code point and position.
pub fn check_owner(what: &str, value: &str) -> Result<(), String> {
    if value.len() > MAX_NAME_LEN {
        return Err(format!(
            "{what} is {} bytes long; at most {MAX_NAME_LEN} are accepted",
            value.len()
        ));
    }
    let last = value.chars().count();
    for (i, c) in value.chars().enumerate() {
        let why = if c.is_control() {
            "a control character"
        } else if is_invisible(c) {
            "an invisible or bidirectional formatting character"
        } else if c.is_whitespace() && (i == 0 || i + 1 == last) {
            "white space at its start or end"
        } else {
            continue;
        };
        return Err(format!(
            "{what} {:?} has {why}, U+{:04X} at character {}",
            shorten(value),
            u32::from(c),
            i + 1
        ));
    }
    Ok(())
}

fn check_text(what: &str, value: &str, max: usize, empty_ok: bool) -> EngineResult<()> {
    if value.is_empty() && !empty_ok {
        return Err(EngineError::InvalidArgument(format!(
            "{what} must not be empty"
        )));
    }
    if value.len() > max {
        return Err(EngineError::InvalidArgument(format!(
            "{what} is {} bytes long; at most {max} are accepted",
            value.len()
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(EngineError::InvalidArgument(format!(
            "{what} {:?} contains control characters",
            shorten(value)
        )));
    }
    Ok(())
}

pub(super) fn shorten(s: &str) -> String {
    s.chars().take(48).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(type_query: &str) -> CreateRequest {
        CreateRequest {
            type_query: type_query.into(),
            ..CreateRequest::default()
        }
    }

    #[test]
    fn good_requests_pass() {
        let mut r = req("RTX6000-4Q");
        r.parent = Some("0000:41:00.0".into());
        r.owner = "vm-1".into();
        r.params = Some("frame_rate_limiter=0, disable_vnc=1".into());
        r.uuid = Some("a1b2c3d4-0000-4000-8000-000000000001".into());
        assert!(r.validate().is_ok());
    }

    #[test]
    fn hostile_names_are_refused() {
        for bad in ["", "../nvidia-259", "nvidia-259/create", "..", "a\nb"] {
            assert!(
                matches!(req(bad).validate(), Err(EngineError::InvalidArgument(_))),
                "{bad:?}"
            );
        }
        let huge = "x".repeat(1 << 20);
        let msg = req(&huge).validate().expect_err("huge").to_string();
        assert!(msg.contains("1048576 bytes"), "{msg}");
        assert!(msg.len() < 200, "the message must not echo 1 MB");
        let mut r = req("ok");
        r.parent = Some("../../etc".into());
        assert!(r.validate().is_err());
        let mut r = req("ok");
        r.params = Some("a=1\n".into());
        assert!(r.validate().is_err());
    }

    #[test]
    fn owners_with_invisible_characters_or_outer_spaces_are_refused_by_position() {
        for (owner, code, at) in [
            ("pool-day ", "U+0020", 9),
            (" pool-day", "U+0020", 1),
            ("pool\u{202e}yad", "U+202E", 5),
            ("pool\u{200b}-day", "U+200B", 5),
            ("\u{feff}pool-day", "U+FEFF", 1),
            ("pool\u{2028}day", "U+2028", 5),
            ("pool\tday", "U+0009", 5),
        ] {
            let mut r = req("ok");
            r.owner = owner.into();
            let e = r.validate().expect_err(owner).to_string();
            assert!(
                e.contains(code) && e.contains(&format!("at character {at}")),
                "{owner:?}: {e}"
            );
        }
        for owner in ["", "pool-day", "win10 vm", "vm-é", "ovirt/vm-1"] {
            let mut r = req("ok");
            r.owner = owner.into();
            r.validate().expect(owner);
        }
    }

    #[test]
    fn uuids_are_checked_and_normalized() {
        let mut r = req("ok");
        r.uuid = Some("not-a-uuid".into());
        assert!(matches!(r.validate(), Err(EngineError::InvalidArgument(_))));
        r.uuid = Some("A1B2C3D4-0000-4000-8000-000000000001".into());
        let n = r.clone().normalized().expect("normalizes");
        assert_eq!(
            n.uuid.as_deref(),
            Some("a1b2c3d4-0000-4000-8000-000000000001")
        );
        assert!(n.validate().is_ok());
    }
}
