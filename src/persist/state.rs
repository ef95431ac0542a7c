//! vgpud's own record of each device it created or manages: what mdevctl's format cannot hold.
//! One file per device, `var/lib/vgpud/devices/<uuid>.json`, versioned JSON.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::PersistResult;
use crate::host::Host;

/// The format version of device records.
pub const VERSION: u32 = 1;

/// What kind of device a record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    /// A mediated device.
    Mdev,
    /// An NVIDIA vGPU on an SR-IOV virtual function.
    SriovVgpu,
    /// PCI functions bound to vfio-pci.
    Passthrough,
}

impl From<crate::model::DeviceKind> for DeviceKind {
    fn from(k: crate::model::DeviceKind) -> Self {
        match k {
            crate::model::DeviceKind::Mdev => DeviceKind::Mdev,
            crate::model::DeviceKind::SriovVgpu => DeviceKind::SriovVgpu,
            crate::model::DeviceKind::Passthrough => DeviceKind::Passthrough,
        }
    }
}

impl From<DeviceKind> for crate::model::DeviceKind {
    fn from(k: DeviceKind) -> Self {
        match k {
            DeviceKind::Mdev => crate::model::DeviceKind::Mdev,
            DeviceKind::SriovVgpu => crate::model::DeviceKind::SriovVgpu,
            DeviceKind::Passthrough => crate::model::DeviceKind::Passthrough,
        }
    }
}

/// One device record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceRecord {
    /// Format version ([`VERSION`]).
    pub version: u32,
    /// Lowercase UUID.
    pub uuid: String,
    /// Kind of device.
    pub kind: DeviceKind,
    /// Parent GPU.
    pub parent: String,
    /// Type id.
    pub type_id: String,
    /// Free owner tag.
    pub owner: String,
    /// Creation time, seconds since the Unix epoch.
    pub created: u64,
    /// Whether the device has a persistent definition.
    pub persistent: bool,
    /// Whether the device is started when its parent appears.
    pub autostart: bool,
    /// Vendor parameters given at creation (`nvidia/vgpu_params`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<String>,
    /// The PCI function the device is: the VF of an SR-IOV vGPU, the function passed through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Passthrough: every function moved to vfio-pci, with its driver before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<crate::model::MovedFunction>,
}

/// `ROOT/var/lib/vgpud/devices`.
pub fn dir(host: &Host) -> PathBuf {
    host.state("devices")
}

/// `ROOT/var/lib/vgpud/devices/<uuid>.json`.
pub fn path(host: &Host, uuid: &str) -> PathBuf {
    dir(host).join(format!("{uuid}.json"))
}

/// Writes a record atomically and durably (a commit of the journal).
pub fn write(host: &Host, record: &DeviceRecord) -> PersistResult<()> {
    super::commit(host, &[file(host, record)], &[])
}

/// The file [`write`] writes, for a batch ([`super::write_all_atomic`]).
pub fn file(host: &Host, record: &DeviceRecord) -> super::FileWrite {
    let mut text = serde_json::to_string_pretty(record).unwrap_or_default();
    text.push('\n');
    super::FileWrite {
        path: path(host, &record.uuid),
        content: text.into_bytes(),
        mode: 0o600,
    }
}

/// Removes a record durably (a commit of the journal); returns whether it existed.
pub fn remove(host: &Host, uuid: &str) -> PersistResult<bool> {
    let path = path(host, uuid);
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(false);
    }
    super::commit(host, &[], &[path]).map(|()| true)
}

/// What a record is called in the log when one is bad.
pub const WHAT: &str = "device record";

/// Reads every record. A bad one (not a regular file, too large, not UTF-8, malformed, or
/// naming another UUID than its file name) is set aside as `<uuid>.json.bad` and reported
/// once; a record of a newer version is an error, so vgpud never drops what a newer vgpud
/// wrote.
pub fn read_all(host: &Host) -> PersistResult<Vec<DeviceRecord>> {
    let mut out = super::read_json_dir(&dir(host), WHAT, VERSION, check)?;
    out.sort_by(|a, b| a.uuid.cmp(&b.uuid));
    Ok(out)
}

/// A record names its own UUID, and every name vgpud puts in a path is plain.
fn check(r: &DeviceRecord, key: &str) -> Result<(), String> {
    super::names_its_uuid(&r.uuid, key)?;
    super::plain_name("parent", &r.parent)?;
    if let Some(address) = &r.address {
        super::plain_name("address", address)?;
    }
    super::plain_functions(&r.functions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_newer_versions_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let rec = DeviceRecord {
            version: VERSION,
            uuid: "a1b2c3d4-0000-4000-8000-000000000001".into(),
            kind: DeviceKind::Mdev,
            parent: "0000:41:00.0".into(),
            type_id: "nvidia-259".into(),
            owner: "vm-1".into(),
            created: 1_700_000_000,
            persistent: true,
            autostart: false,
            params: Some("frame_rate_limiter=0".into()),
            address: None,
            functions: Vec::new(),
        };
        write(&host, &rec).expect("write");
        assert_eq!(read_all(&host).expect("read"), vec![rec.clone()]);
        let text = std::fs::read_to_string(path(&host, &rec.uuid)).expect("text");
        assert!(text.contains("\"kind\": \"mdev\""), "{text}");
        let newer = DeviceRecord {
            version: VERSION + 1,
            ..rec.clone()
        };
        write(&host, &newer).expect("write");
        assert!(read_all(&host).is_err());
        assert!(remove(&host, &rec.uuid).expect("remove"));
        assert!(read_all(&host).expect("read").is_empty());
    }

    #[test]
    fn a_record_with_a_path_in_its_names_is_set_aside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let uuid = "a1b2c3d4-0000-4000-8000-000000000009";
        std::fs::create_dir_all(super::dir(&host)).expect("dir");
        for (name, text) in [
            (
                uuid.to_string(),
                format!(
                    r#"{{"version":1,"uuid":"{uuid}","kind":"mdev","parent":"../../etc","type_id":"t","owner":"","created":0,"persistent":true,"autostart":true}}"#
                ),
            ),
            (
                uuid.to_uppercase(),
                format!(
                    r#"{{"version":1,"uuid":"{}","kind":"mdev","parent":"p","type_id":"t","owner":"","created":0,"persistent":true,"autostart":true}}"#,
                    uuid.to_uppercase()
                ),
            ),
        ] {
            let file = super::dir(&host).join(format!("{name}.json"));
            std::fs::write(&file, text).expect("write");
            assert!(read_all(&host).expect("read").is_empty());
            assert!(!file.exists());
            assert!(file.with_file_name(format!("{name}.json.bad")).exists());
        }
    }
}
