//! What vgpud set on a physical function and restores first at boot (VFs, the driver's vGPU
//! mode and MIG instances are lost on reboot and driver reload): the number of VFs, NVIDIA's
//! heterogeneous (mixed-size) vGPU mode, the MIG mode vgpud set (checked at boot; the GPU
//! keeps it), the GPU instances to make again (profile ID and placement, and the device an
//! instance was made for on demand), and the vGPU scheduler setting. One file per physical
//! function, `var/lib/vgpud/sriov/<address>.json`, versioned JSON (fields added since version
//! 1 are optional, so older records read as before); a function with nothing to restore has
//! no file.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{remove_durable, write_atomic, PersistResult};
use crate::host::Host;

/// The format version of these records.
pub const VERSION: u32 = 1;

/// What a physical function should have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSettings {
    /// Format version ([`VERSION`]).
    pub version: u32,
    /// The physical function's address.
    pub pf: String,
    /// The number of VFs to enable (0: leave them off).
    pub num_vfs: u32,
    /// NVIDIA's heterogeneous (mixed-size) vGPU mode.
    #[serde(default)]
    pub heterogeneous: bool,
    /// The MIG mode vgpud set (`None`: vgpud never set it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_mode: Option<bool>,
    /// The GPU instances to have, in creation order: made again at boot at the same
    /// placements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_instances: Vec<RecordedInstance>,
    /// The vGPU scheduler setting to apply at boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<RecordedScheduler>,
}

/// A GPU instance vgpud made and keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedInstance {
    /// The profile ID (`nvidia-smi mig -lgip` ID, not the NVML index).
    pub profile_id: u32,
    /// The first memory slice of its placement.
    pub start: u32,
    /// The placement's size in slices.
    pub size: u32,
    /// Whether one compute instance spanning it was made too.
    #[serde(default = "yes")]
    pub compute_instance: bool,
    /// The GPU-instance ID it has now (IDs are given by the driver and change at boot).
    #[serde(default)]
    pub id: u32,
    /// The vGPU device it was made for on demand (destroyed with it); empty for an instance
    /// made by CreateGpuInstance.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub for_device: String,
}

fn yes() -> bool {
    true
}

/// A vGPU scheduler setting vgpud applies at boot (and renders as `RmPVMRL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedScheduler {
    /// `best-effort`, `equal-share` or `fixed-share`.
    pub policy: RecordedPolicy,
    /// Adaptive round robin on.
    #[serde(default)]
    pub arr: bool,
    /// Time slice in ms (0: default).
    #[serde(default)]
    pub timeslice_ms: u32,
    /// ARR averaging factor (0: default).
    #[serde(default)]
    pub avg_factor: u32,
    /// ARR frequency in Hz (0: default).
    #[serde(default)]
    pub frequency_hz: u32,
}

/// A scheduler policy as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordedPolicy {
    /// Best effort.
    BestEffort,
    /// Equal share.
    EqualShare,
    /// Fixed share.
    FixedShare,
}

impl GpuSettings {
    /// Nothing set: a function in this state has no file.
    pub fn is_default(&self) -> bool {
        self.num_vfs == 0
            && !self.heterogeneous
            && self.mig_mode.is_none()
            && self.gpu_instances.is_empty()
            && self.scheduler.is_none()
    }
}

/// `ROOT/var/lib/vgpud/sriov`.
pub fn dir(host: &Host) -> PathBuf {
    host.state("sriov")
}

fn path(host: &Host, pf: &str) -> PathBuf {
    dir(host).join(format!("{pf}.json"))
}

/// The settings of a physical function (all defaults when it has no file).
pub fn read(host: &Host, pf: &str) -> PersistResult<GpuSettings> {
    Ok(read_all(host)?
        .into_iter()
        .find(|s| s.pf == pf)
        .unwrap_or(GpuSettings {
            version: VERSION,
            pf: pf.to_string(),
            num_vfs: 0,
            heterogeneous: false,
            mig_mode: None,
            gpu_instances: Vec::new(),
            scheduler: None,
        }))
}

/// Records the settings of a physical function atomically and durably (removes the file when
/// nothing is set).
pub fn write(host: &Host, settings: &GpuSettings) -> PersistResult<()> {
    if settings.is_default() {
        return remove_durable(&path(host, &settings.pf)).map(|_| ());
    }
    let mut text = serde_json::to_string_pretty(settings).unwrap_or_default();
    text.push('\n');
    write_atomic(&path(host, &settings.pf), text.as_bytes(), 0o600)
}

/// What a settings file is called in the log when one is bad.
pub const WHAT: &str = "SR-IOV settings file (its VF count is not restored)";

/// Every recorded setting, by address. A bad file is set aside as `<gpu>.json.bad` and
/// reported once; a newer format version is an error.
pub fn read_all(host: &Host) -> PersistResult<Vec<GpuSettings>> {
    let mut out = super::read_json_dir(&dir(host), WHAT, VERSION, |r: &GpuSettings, key| {
        super::names_its_file(&r.pf, key)?;
        super::plain_name("address", &r.pf)
    })?;
    out.sort_by(|a, b| a.pf.cmp(&b.pf));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_and_defaults_leave_no_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let mut s = read(&host, "0000:41:00.0").expect("read");
        assert!(s.is_default());
        s.num_vfs = 32;
        write(&host, &s).expect("write");
        s.heterogeneous = true;
        write(&host, &s).expect("write");
        let other = GpuSettings {
            pf: "0000:00:02.0".into(),
            num_vfs: 4,
            ..s.clone()
        };
        write(&host, &other).expect("write");
        let all = read_all(&host).expect("read");
        assert_eq!(all.len(), 2);
        assert_eq!(read(&host, "0000:41:00.0").expect("read"), s);
        // A record without the mode (written before it existed) reads as equal-size.
        std::fs::write(
            path(&host, "0000:c1:00.0"),
            r#"{"version":1,"pf":"0000:c1:00.0","num_vfs":32}"#,
        )
        .expect("old record");
        assert!(!read(&host, "0000:c1:00.0").expect("read").heterogeneous);
        s.num_vfs = 0;
        s.heterogeneous = false;
        write(&host, &s).expect("write");
        assert_eq!(read_all(&host).expect("read").len(), 2);
    }
}
