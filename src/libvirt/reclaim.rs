//! Reclaiming devices whose lease ran out ([`crate::engine::leases`]): the libvirt side.
//!
//! A leased device is kept while the libvirt domain its owner names is active, which is
//! libvirt's word for a domain with a running process: running, blocked, paused (also while
//! it migrates, on either host), being shut down, suspended to memory (pmsuspended). It is not
//! running when the domain is absent, shut off or crashed (a crashed domain's process is
//! gone). When it has not been running for longer than the lease, the device is reclaimed,
//! with two more checks first: no active domain holds the device in its definition (a guest
//! that uses it under another name keeps it), and libvirt answered (when libvirt cannot be
//! reached nothing is decided, and no clock runs).

use super::{Holdings, LibvirtError, LibvirtOps};
use crate::engine::leases::Verdict;
use crate::engine::Engine;

/// What one look at the leases did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reclaimed {
    /// Devices reclaimed, with the reason.
    pub devices: Vec<(String, String)>,
    /// Devices left because libvirt did not answer, or the removal was refused.
    pub skipped: usize,
}

/// Looks at every leased device at `now` (Unix seconds) and reclaims those whose lease ran
/// out. With no leased device, libvirt is not asked anything. Otherwise it is asked once for
/// the domains that run, whatever the number of leased devices; a device whose lease ran out
/// by that list has its domain looked up again, alone, before anything is taken (the list
/// is as old as the look), and the domains' definitions are read once per look, only then.
pub fn reclaim_expired(engine: &Engine, ops: &dyn LibvirtOps, now: u64) -> Reclaimed {
    let mut done = Reclaimed::default();
    let leased = engine.leased_devices();
    if leased.is_empty() {
        return done;
    }
    let running = match ops.active_domains() {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, devices = leased.len(), "cannot tell which domains run; every leased device is kept");
            done.skipped = leased.len();
            return done;
        }
    };
    let mut holdings: Option<Holdings> = None;
    for device in leased {
        let owner = device.owner.clone();
        let Verdict::Expired { idle_s } =
            engine.observe_lease(&device.uuid, running.contains(&owner), now)
        else {
            continue;
        };
        let state = match ops.domain_state(&owner) {
            Ok(s) if s.active => {
                // Started since the list was read.
                engine.observe_lease(&device.uuid, true, now);
                continue;
            }
            Ok(_) => "is not running (shut off or crashed)",
            Err(LibvirtError::NoDomain { .. }) => "does not exist",
            Err(e) => {
                tracing::warn!(uuid = %device.uuid, domain = %owner, error = %e, "cannot tell whether a leased device's domain runs; it is kept");
                done.skipped += 1;
                continue;
            }
        };
        // A guest that holds the device (under whatever name) and runs keeps it.
        if holdings.is_none() {
            match Holdings::read(ops) {
                Ok(h) => holdings = Some(h),
                Err(e) => {
                    tracing::warn!(uuid = %device.uuid, error = %e, "cannot tell which domains hold a leased device; it is kept");
                    done.skipped += 1;
                    continue;
                }
            }
        }
        let held_by_running = holdings.as_ref().and_then(|h| {
            h.of(&device)
                .into_iter()
                .find(|d| ops.domain_state(d).is_ok_and(|s| s.active))
        });
        if let Some(domain) = held_by_running {
            engine.observe_lease(&device.uuid, true, now);
            tracing::info!(uuid = %device.uuid, %domain, "a leased device is kept: a running domain holds it");
            continue;
        }
        let lease = engine.lease_of(&device.uuid).unwrap_or_default();
        let reason = format!(
            "domain {owner:?} {state} for {idle_s} s, past the device's lease of {lease} s"
        );
        match engine.reclaim(&device.uuid, &reason) {
            Ok(_) => done.devices.push((device.uuid.clone(), reason)),
            Err(e) => {
                tracing::warn!(uuid = %device.uuid, error = %e, "could not reclaim a device whose lease ran out; trying again at the next look");
                done.skipped += 1;
            }
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::CreateRequest;
    use crate::host::Host;
    use crate::libvirt::testing::FakeLibvirt;
    use crate::libvirt::DomainState;

    fn leased(e: &Engine, owner: &str, lease: u64) -> String {
        e.create_device(&CreateRequest {
            type_query: "mtty-1".into(),
            owner: owner.into(),
            persistent: false,
            autostart: false,
            lease_s: Some(lease),
            ..CreateRequest::default()
        })
        .expect("create")
        .uuid
    }

    #[test]
    fn only_devices_of_domains_not_running_past_their_lease_are_reclaimed() {
        let dir = tempfile::tempdir().expect("tempdir");
        vgpud_sim::write_profile("mtty", dir.path()).expect("profile");
        let e = Engine::new(Host::simulated(dir.path())).expect("engine");
        let state = |active| DomainState {
            active,
            persistent: true,
        };
        let libvirt = FakeLibvirt::default()
            .with_domain("running-vm", state(true))
            .with_domain("stopped-vm", state(false));
        let runs = leased(&e, "running-vm", 10);
        let stopped = leased(&e, "stopped-vm", 10);
        let ghost = leased(&e, "ghost-vm", 10);
        let unleased = e
            .create_device(&CreateRequest {
                type_query: "mtty-1".into(),
                owner: "ghost-vm".into(),
                persistent: false,
                autostart: false,
                ..CreateRequest::default()
            })
            .expect("create")
            .uuid;
        let t0 = 1_000_000;
        assert_eq!(
            reclaim_expired(&e, &libvirt, t0).devices,
            vec![],
            "the clocks start"
        );
        assert_eq!(reclaim_expired(&e, &libvirt, t0 + 9).devices, vec![]);
        assert_eq!(
            libvirt.listings(),
            0,
            "no domain's XML is read while no lease ran out"
        );
        assert_eq!(
            libvirt.state_lookups(),
            0,
            "one list of the running domains, not a lookup per leased device"
        );
        let done = reclaim_expired(&e, &libvirt, t0 + 10);
        assert_eq!(
            libvirt.listings(),
            1,
            "two leases ran out in one look: the domains are read once"
        );
        assert_eq!(
            libvirt.state_lookups(),
            2,
            "the two domains whose lease ran out are looked up again, alone"
        );
        let mut gone: Vec<&str> = done.devices.iter().map(|(u, _)| u.as_str()).collect();
        gone.sort_unstable();
        let mut want = vec![stopped.as_str(), ghost.as_str()];
        want.sort_unstable();
        assert_eq!(gone, want, "{done:?}");
        assert!(done
            .devices
            .iter()
            .any(|(u, r)| *u == ghost && r.contains("does not exist")));
        assert!(e.device(&runs).is_some() && e.device(&unleased).is_some());
        assert!(e.device(&stopped).is_none() && e.device(&ghost).is_none());
        assert_eq!(
            e.leased_devices().len(),
            1,
            "the reclaimed devices' leases went with them"
        );
    }

    /// A libvirt whose list of running domains is stale (empty) while each domain's own
    /// state is current: a domain started between the list and the reclaim.
    struct StaleList(FakeLibvirt);

    impl LibvirtOps for StaleList {
        fn domains(&self) -> Result<Vec<crate::libvirt::DomainXml>, LibvirtError> {
            self.0.domains()
        }
        fn domain_state(&self, domain: &str) -> Result<DomainState, LibvirtError> {
            self.0.domain_state(domain)
        }
        fn active_domains(&self) -> Result<std::collections::HashSet<String>, LibvirtError> {
            Ok(Default::default())
        }
        fn attach(
            &self,
            domain: &str,
            xml: &str,
            impact: crate::libvirt::Impact,
        ) -> Result<(), LibvirtError> {
            self.0.attach(domain, xml, impact)
        }
        fn detach(
            &self,
            domain: &str,
            xml: &str,
            impact: crate::libvirt::Impact,
        ) -> Result<(), LibvirtError> {
            self.0.detach(domain, xml, impact)
        }
    }

    #[test]
    fn a_domain_that_runs_by_its_own_lookup_keeps_its_device_whatever_the_list_said() {
        let dir = tempfile::tempdir().expect("tempdir");
        vgpud_sim::write_profile("mtty", dir.path()).expect("profile");
        let e = Engine::new(Host::simulated(dir.path())).expect("engine");
        let running = DomainState {
            active: true,
            persistent: true,
        };
        let libvirt = StaleList(FakeLibvirt::default().with_domain("late-vm", running));
        let dev = leased(&e, "late-vm", 10);
        let t0 = 2_000_000;
        assert_eq!(reclaim_expired(&e, &libvirt, t0).devices, vec![]);
        // By the list its lease ran out; by its own lookup the domain runs: kept, and its
        // clock starts again.
        assert_eq!(reclaim_expired(&e, &libvirt, t0 + 10).devices, vec![]);
        assert!(e.device(&dev).is_some());
        // Once it has stopped for a whole lease, it goes.
        libvirt.0.set_active("late-vm", false);
        assert_eq!(reclaim_expired(&e, &libvirt, t0 + 19).devices, vec![]);
        assert_eq!(reclaim_expired(&e, &libvirt, t0 + 28).devices, vec![]);
        let done = reclaim_expired(&e, &libvirt, t0 + 29);
        assert_eq!(done.devices.len(), 1, "{done:?}");
        assert!(done.devices[0].1.contains("is not running"), "{done:?}");
    }
}
