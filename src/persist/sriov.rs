//! The VF counts vgpud set on SR-IOV physical functions, restored first at boot (VFs are lost
//! on reboot and driver reload). One file per physical function,
//! `var/lib/vgpud/sriov/<address>.json`, versioned JSON.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{remove_durable, write_atomic, PersistResult};
use crate::host::Host;

/// The format version of VF count records.
pub const VERSION: u32 = 1;

/// How many VFs a physical function should have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VfCount {
    /// Format version ([`VERSION`]).
    pub version: u32,
    /// The physical function's address.
    pub pf: String,
    /// The number of VFs to enable.
    pub num_vfs: u32,
}

/// `ROOT/var/lib/vgpud/sriov`.
pub fn dir(host: &Host) -> PathBuf {
    host.state("sriov")
}

fn path(host: &Host, pf: &str) -> PathBuf {
    dir(host).join(format!("{pf}.json"))
}

/// Records the VF count of a physical function atomically and durably.
pub fn write(host: &Host, pf: &str, num_vfs: u32) -> PersistResult<()> {
    let record = VfCount {
        version: VERSION,
        pf: pf.to_string(),
        num_vfs,
    };
    let mut text = serde_json::to_string_pretty(&record).unwrap_or_default();
    text.push('\n');
    write_atomic(&path(host, pf), text.as_bytes(), 0o600)
}

/// Forgets the VF count of a physical function; returns whether it was recorded.
pub fn remove(host: &Host, pf: &str) -> PersistResult<bool> {
    remove_durable(&path(host, pf))
}

/// Every recorded VF count, by address; a newer format version is an error.
pub fn read_all(host: &Host) -> PersistResult<Vec<VfCount>> {
    let mut out = super::read_versioned_dir(&dir(host), VERSION, |r: &VfCount| r.version)?;
    out.sort_by(|a, b| a.pf.cmp(&b.pf));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vf_counts_round_trip() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        write(&host, "0000:41:00.0", 32).expect("write");
        write(&host, "0000:00:02.0", 4).expect("write");
        let all = read_all(&host).expect("read");
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].pf, "0000:00:02.0");
        assert_eq!(all[1].num_vfs, 32);
        assert!(remove(&host, "0000:41:00.0").expect("remove"));
        assert_eq!(read_all(&host).expect("read").len(), 1);
    }
}
