//! Leases: a device created with `lease_s` belongs to the libvirt domain its owner names only
//! while that domain runs. When the domain has not been running for longer than the lease,
//! the device is reclaimed (removed), so a VM that never started, or a broker that forgot a
//! device, does not keep a GPU's room forever.
//!
//! The lease of each device is kept in `var/lib/vgpud/leases` (a line `UUID SECONDS` per
//! device after the header `vgpud-leases 1`), written atomically and durably whenever a lease
//! is given or goes, so it survives restarts, crashes and reboots with the device. When the
//! domain was last seen not running is kept in memory only: after a restart the clock starts
//! again, so a restart only ever delays a reclaim. A bad file (a link, a FIFO, too large, not
//! the format) is set aside as `leases.bad` with a warning, and its devices have no lease.
//!
//! Whether a domain runs, and reclaiming, are the libvirt side's ([`crate::libvirt::reclaim`]);
//! this module keeps the leases and the clocks.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use crate::host::Host;
use crate::persist::{self, PersistResult};

/// The longest lease: a year.
pub const MAX_LEASE_S: u64 = 365 * 24 * 3600;
/// The most leases kept (more devices than a host has).
pub const MAX_LEASES: usize = 65_536;
const MAGIC: &str = "vgpud-leases 1";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lease {
    seconds: u64,
    /// When the owner's domain was first seen not running, since it last ran.
    idle_since: Option<u64>,
}

/// The leases of this host's devices.
#[derive(Debug)]
pub struct Leases {
    path: PathBuf,
    leases: Mutex<BTreeMap<String, Lease>>,
}

/// What a look at one lease decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The domain runs, or has not been idle for the lease yet.
    Keep,
    /// The lease ran out: reclaim the device.
    Expired {
        /// How long the domain has not been running, in seconds.
        idle_s: u64,
    },
}

impl Leases {
    /// The leases kept for `host`; a bad file is set aside.
    pub fn load(host: &Host) -> Leases {
        let path = host.state("leases");
        let leases = match persist::read_state_file(&path, persist::MAX_STATE_FILE_BYTES * 4) {
            Ok(None) => BTreeMap::new(),
            Ok(Some(text)) => decode(&text).unwrap_or_else(|reason| {
                persist::set_aside(&persist::BadFile::new(&path, reason), "lease file");
                BTreeMap::new()
            }),
            Err(bad) => {
                persist::set_aside(&bad, "lease file");
                BTreeMap::new()
            }
        };
        Leases {
            path,
            leases: Mutex::new(leases),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Lease>> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives `uuid` a lease of `seconds` (written durably before this returns).
    pub fn set(&self, uuid: &str, seconds: u64) -> PersistResult<()> {
        let mut leases = self.lock();
        leases.insert(
            uuid.to_string(),
            Lease {
                seconds,
                idle_since: None,
            },
        );
        self.write(&leases)
    }

    /// Drops the lease of `uuid`, if it has one.
    pub fn forget(&self, uuid: &str) -> PersistResult<()> {
        let mut leases = self.lock();
        if leases.remove(uuid).is_none() {
            return Ok(());
        }
        self.write(&leases)
    }

    /// The lease of `uuid`, in seconds.
    pub fn of(&self, uuid: &str) -> Option<u64> {
        self.lock().get(uuid).map(|l| l.seconds)
    }

    /// Every device with a lease.
    pub fn devices(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Whether any device has a lease (with none, nothing is looked at).
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Takes in whether the domain of `uuid` runs at `now`, and says whether its lease ran
    /// out: it has not been running for at least the lease.
    pub fn observe(&self, uuid: &str, running: bool, now: u64) -> Verdict {
        let mut leases = self.lock();
        let Some(lease) = leases.get_mut(uuid) else {
            return Verdict::Keep;
        };
        if running {
            lease.idle_since = None;
            return Verdict::Keep;
        }
        let since = *lease.idle_since.get_or_insert(now);
        let idle_s = now.saturating_sub(since);
        if idle_s >= lease.seconds {
            Verdict::Expired { idle_s }
        } else {
            Verdict::Keep
        }
    }

    fn write(&self, leases: &BTreeMap<String, Lease>) -> PersistResult<()> {
        let mut text = String::from(MAGIC);
        text.push('\n');
        for (uuid, lease) in leases {
            text.push_str(&format!("{uuid} {}\n", lease.seconds));
        }
        persist::write_state_file(&self.path, text.as_bytes())
    }
}

impl super::Engine {
    /// Gives a device just made its lease; when the lease cannot be written the device is
    /// removed again (a device must not outlive a lease it was asked with).
    pub(super) fn give_lease(
        &self,
        info: super::DeviceInfo,
        seconds: u64,
    ) -> super::EngineResult<super::DeviceInfo> {
        match self.leases.set(&info.uuid, seconds) {
            Ok(()) => Ok(info),
            Err(e) => {
                if let Err(undo) = self.remove_unkept(&info.uuid) {
                    tracing::error!(uuid = %info.uuid, error = %undo, "could not remove a device whose lease could not be written");
                }
                Err(super::EngineError::persist(
                    format!("recording the lease of {}", info.uuid),
                    e,
                ))
            }
        }
    }

    pub(super) fn forget_lease(&self, uuid: &str) {
        if let Err(e) = self.leases.forget(uuid) {
            tracing::warn!(%uuid, error = %e, "could not drop the lease of a removed device");
        }
    }

    /// Whether any device has a lease.
    pub fn has_leases(&self) -> bool {
        !self.leases.is_empty()
    }

    /// The lease of a device, in seconds.
    pub fn lease_of(&self, uuid: &str) -> Option<u64> {
        self.leases.of(uuid)
    }

    /// The devices with a lease; a lease whose device is gone is dropped here.
    pub fn leased_devices(&self) -> Vec<super::DeviceInfo> {
        let mut out = Vec::new();
        for uuid in self.leases.devices() {
            match self.device(&uuid) {
                Some(info) => out.push(info),
                None => self.forget_lease(&uuid),
            }
        }
        out
    }

    /// Takes in whether the domain of a leased device runs now ([`Leases::observe`]).
    pub fn observe_lease(&self, uuid: &str, running: bool, now: u64) -> Verdict {
        self.leases.observe(uuid, running, now)
    }

    /// Reclaims a device whose lease ran out: a `DeviceReclaimed` event with `reason`, then
    /// the device removed as by `RemoveDevice` (refused, like it, while another operation
    /// is on the device).
    pub fn reclaim(&self, uuid: &str, reason: &str) -> super::EngineResult<super::DeviceInfo> {
        self.events.batch(|| {
            let info = self.known(uuid)?;
            self.events.send(super::Event::DeviceReclaimed {
                device: info,
                reason: reason.to_string(),
            });
            self.remove_device(uuid)
        })
    }
}

fn decode(text: &str) -> Result<BTreeMap<String, Lease>, String> {
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC) {
        return Err(format!("the first line is not {MAGIC:?}"));
    }
    let mut leases = BTreeMap::new();
    for (i, line) in lines.enumerate() {
        let at = |why: &str| format!("line {}: {why}", i + 2);
        let (uuid, seconds) = line.split_once(' ').ok_or_else(|| at("not UUID SECONDS"))?;
        if crate::model::normalize_uuid(uuid).as_deref() != Some(uuid) {
            return Err(at("not a UUID"));
        }
        let seconds: u64 = seconds.parse().map_err(|_| at("not a number of seconds"))?;
        if !(1..=MAX_LEASE_S).contains(&seconds) {
            return Err(at("a lease out of range"));
        }
        if leases.len() >= MAX_LEASES {
            return Err(at("too many leases"));
        }
        leases.insert(
            uuid.to_string(),
            Lease {
                seconds,
                idle_since: None,
            },
        );
    }
    Ok(leases)
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: &str = "11111111-2222-4333-8444-555555555555";

    #[test]
    fn a_lease_runs_out_only_after_the_domain_was_not_running_for_all_of_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let leases = Leases::load(&Host::new(dir.path()));
        leases.set(U, 60).expect("set");
        assert_eq!(
            leases.observe(U, false, 1000),
            Verdict::Keep,
            "the clock starts"
        );
        assert_eq!(leases.observe(U, false, 1059), Verdict::Keep);
        // The domain ran in between: the clock starts again.
        assert_eq!(leases.observe(U, true, 1030), Verdict::Keep);
        assert_eq!(leases.observe(U, false, 1061), Verdict::Keep);
        assert_eq!(leases.observe(U, false, 1120), Verdict::Keep);
        assert_eq!(
            leases.observe(U, false, 1121),
            Verdict::Expired { idle_s: 60 }
        );
        assert_eq!(
            leases.observe("other", false, 5000),
            Verdict::Keep,
            "no lease"
        );
    }

    #[test]
    fn leases_are_kept_across_a_restart_and_a_bad_file_is_set_aside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let leases = Leases::load(&host);
        leases.set(U, 300).expect("set");
        leases
            .set("11111111-2222-4333-8444-000000000000", 30)
            .expect("set");
        leases
            .forget("11111111-2222-4333-8444-000000000000")
            .expect("forget");
        let again = Leases::load(&host);
        assert_eq!(again.devices(), vec![U.to_string()]);
        assert_eq!(again.of(U), Some(300));
        for bad in [
            "vgpud-leases 2\n",
            "vgpud-leases 1\nnot-a-uuid 5\n",
            "vgpud-leases 1\n11111111-2222-4333-8444-555555555555 0\n",
            "vgpud-leases 1\n11111111-2222-4333-8444-555555555555\n",
        ] {
            assert!(decode(bad).is_err(), "{bad:?}");
        }
        std::fs::write(host.state("leases"), "vgpud-leases 1\nnonsense\n").expect("write");
        let fresh = Leases::load(&host);
        assert!(fresh.is_empty());
        assert!(host.state("leases.bad").exists());
    }
}
