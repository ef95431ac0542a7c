//! A power cut for tests: [`PowerCut`] is a [`Storage`] that counts the journal's syncs by
//! commit group and remembers what the disk holds durably. From "power off" (said by the test,
//! or at a chosen call of the seam) every write and sync fails; [`PowerCut::restore`] then
//! brings the tree back to what survives a real cut: the journal to its last synced length
//! (or gone, when its name was never synced), vgpud's definitions and records to their
//! content at their last sync (a file whose name was synced but not its data is empty). With
//! a generator, it keeps a random part of what was not synced instead (a torn journal tail,
//! torn or half-kept files), as a disk may.
//!
//! The tests: a single commit costs one sync of the journal, concurrent commits share syncs,
//! and power cuts at random points of create storms lose no acknowledged device and leave
//! nothing half-written believed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::storage::{Disk, Storage};
use super::{journal, PersistError, PersistResult};
use crate::host::Host;

/// A small deterministic generator (xorshift), so a failing run replays from its seed.
#[derive(Debug)]
pub(crate) struct Rng(pub u64);

impl Rng {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

#[derive(Debug, Default)]
struct State {
    /// The power is off: every call fails.
    off: bool,
    /// Calls of the seam so far, and the one at which the power goes off.
    calls: u64,
    cut_at: Option<u64>,
    /// The size of each group commit, one per sync of the journal.
    groups: Vec<usize>,
    /// Whether the journal's name is durable, and how much of it.
    journal_named: bool,
    journal_synced: u64,
    /// Files' content at their last sync, by path.
    data: BTreeMap<PathBuf, Vec<u8>>,
    /// The watched files the disk holds durably, and their content.
    durable: BTreeMap<PathBuf, Vec<u8>>,
}

/// The double (see the module's documentation). Writes go to the real files; what is durable
/// is kept aside.
#[derive(Debug)]
pub(crate) struct PowerCut {
    journal: PathBuf,
    /// `etc/mdevctl.d` (definitions one folder down) and `var/lib/vgpud/devices`.
    definitions: PathBuf,
    records: PathBuf,
    /// How long a sync of the journal takes (a disk's wait, during which groups form).
    latency: Duration,
    state: Mutex<State>,
}

fn off() -> io::Error {
    io::Error::from_raw_os_error(nix::errno::Errno::EIO as i32)
}

/// The regular files of `dir` that are not temporaries.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect()
}

impl PowerCut {
    /// A double for the journal of `host`, taking what exists now as durable.
    pub fn new(host: &Host, latency: Duration) -> Arc<PowerCut> {
        let cut = PowerCut {
            journal: journal::path(host),
            definitions: host.etc("mdevctl.d"),
            records: host.state("devices"),
            latency,
            state: Mutex::new(State::default()),
        };
        {
            let mut st = cut.lock();
            cut.settle(&mut st);
        }
        Arc::new(cut)
    }

    /// Installs a new double as the storage of `host`'s journal.
    pub fn install(host: &Host, latency: Duration) -> Arc<PowerCut> {
        let cut = PowerCut::new(host, latency);
        journal::install(host, cut.clone());
        cut
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The watched directories now: the records' and each parent's of definitions.
    fn dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self.records.clone()];
        if let Ok(parents) = fs::read_dir(&self.definitions) {
            dirs.extend(
                parents
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
        dirs
    }

    fn watched(&self, dir: &Path) -> bool {
        dir == self.records || dir.parent() == Some(self.definitions.as_path())
    }

    /// The watched files now, with their content.
    fn tree(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        self.dirs()
            .iter()
            .flat_map(|d| files_in(d))
            .filter_map(|p| fs::read(&p).ok().map(|c| (p, c)))
            .collect()
    }

    /// Takes what the disk holds now as durable (at the start and at power on).
    fn settle(&self, st: &mut State) {
        st.durable = self.tree();
        st.data = st.durable.clone();
        let len = fs::symlink_metadata(&self.journal).map(|m| m.len()).ok();
        st.journal_named = len.is_some();
        st.journal_synced = len.unwrap_or(0);
    }

    /// One call of the seam: fails once the power is off.
    fn gate(&self, st: &mut State) -> io::Result<()> {
        st.calls += 1;
        if st.cut_at == Some(st.calls) {
            st.off = true;
        }
        if st.off {
            return Err(off());
        }
        Ok(())
    }

    /// [`PowerCut::gate`] for a call that names its path in its error; the state locked.
    fn gated(&self, action: &'static str, path: &Path) -> PersistResult<MutexGuard<'_, State>> {
        let mut st = self.lock();
        self.gate(&mut st).map_err(|source| PersistError::Io {
            action,
            path: path.to_path_buf(),
            source,
        })?;
        Ok(st)
    }

    /// The power goes off at the `n`th call of the seam from now (1: the next).
    pub fn cut_after(&self, n: u64) {
        let mut st = self.lock();
        st.cut_at = Some(st.calls + n.max(1));
    }

    /// The power goes off now.
    pub fn power_off(&self) {
        self.lock().off = true;
    }

    pub fn is_off(&self) -> bool {
        self.lock().off
    }

    /// The size of each group commit so far, one per sync of the journal.
    pub fn groups(&self) -> Vec<usize> {
        self.lock().groups.clone()
    }

    /// After "power off", once nothing writes any more: the tree as the disk holds it (see
    /// the module's documentation), and the power on again.
    pub fn restore(&self, mut torn: Option<&mut Rng>) {
        let mut st = self.lock();
        st.off = true;
        let len = fs::symlink_metadata(&self.journal).map(|m| m.len()).ok();
        match len {
            Some(_) if !st.journal_named => {
                fs::remove_file(&self.journal).expect("the journal's name is lost");
            }
            Some(len) => {
                let unsynced = len.saturating_sub(st.journal_synced);
                let kept = match torn.as_deref_mut() {
                    Some(rng) => rng.below(unsynced + 1),
                    None => 0,
                };
                fs::OpenOptions::new()
                    .write(true)
                    .open(&self.journal)
                    .and_then(|f| f.set_len(st.journal_synced.min(len) + kept))
                    .expect("the journal cut to what was synced");
            }
            None => {}
        }
        let now = self.tree();
        let paths: BTreeSet<&PathBuf> = now.keys().chain(st.durable.keys()).collect();
        for path in paths {
            let current = now.get(path);
            let durable = st.durable.get(path);
            if current == durable {
                continue;
            }
            // Unsynced: lost, kept, or torn (half its bytes).
            let fate = torn.as_deref_mut().map_or(0, |rng| rng.below(3));
            let content = match (fate, current) {
                (1, Some(c)) => Some(c.clone()),
                (2, Some(c)) => Some(c[..c.len() / 2].to_vec()),
                _ => durable.cloned(),
            };
            match content {
                Some(c) => {
                    let dir = path.parent().expect("a parent");
                    fs::create_dir_all(dir).expect("parent");
                    fs::write(path, c).expect("restored");
                    let mode = if dir == self.records { 0o600 } else { 0o644 };
                    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("mode");
                }
                None => fs::remove_file(path).expect("removed"),
            }
        }
        self.settle(&mut st);
        st.off = false;
        st.cut_at = None;
    }
}

impl Storage for PowerCut {
    fn append(&self, file: &fs::File, line: &[u8]) -> io::Result<()> {
        let mut st = self.lock();
        self.gate(&mut st)?;
        Disk.append(file, line)
    }

    fn sync_journal(&self, file: &fs::File, commits: usize) -> io::Result<()> {
        {
            let mut st = self.lock();
            self.gate(&mut st)?;
        }
        // What was appended before the sync began is durable when it ends.
        let len = file.metadata()?.len();
        std::thread::sleep(self.latency);
        let mut st = self.lock();
        if st.off {
            return Err(off());
        }
        st.journal_synced = st.journal_synced.max(len);
        st.groups.push(commits);
        Ok(())
    }

    fn sync_file(&self, path: &Path, _file: &fs::File) -> io::Result<()> {
        let mut st = self.lock();
        self.gate(&mut st)?;
        let content = fs::read(path)?;
        st.data.insert(path.to_path_buf(), content);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> PersistResult<()> {
        let mut st = self.gated("syncing directory", dir)?;
        if Some(dir) == self.journal.parent() {
            st.journal_named = self.journal.exists();
        }
        if self.watched(dir) {
            let now: BTreeSet<PathBuf> = files_in(dir).into_iter().collect();
            st.durable
                .retain(|p, _| p.parent() != Some(dir) || now.contains(p));
            for p in now {
                let content = st.data.get(&p).cloned().unwrap_or_default();
                st.durable.insert(p, content);
            }
        }
        Ok(())
    }

    fn replace(&self, path: &Path, content: Vec<u8>) -> PersistResult<()> {
        let mut st = self.gated("replacing", path)?;
        let len = content.len() as u64;
        Disk.replace(path, content)?;
        if path == self.journal {
            st.journal_named = true;
            st.journal_synced = len;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{CreateRequest, Engine};
    use crate::persist::{mdevctl, state, FileWrite};

    fn record(host: &Host, n: usize) -> FileWrite {
        FileWrite {
            path: host.state(&format!("devices/{n}.json")),
            content: format!("{n}\n").into_bytes(),
            mode: 0o600,
        }
    }

    #[test]
    fn a_single_commit_costs_one_sync_of_the_journal_and_survives_a_power_cut() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let cut = PowerCut::install(&host, Duration::ZERO);
        let j = journal::of(&host);
        j.commit(&[record(&host, 1)], &[]).expect("commit");
        assert_eq!(cut.groups(), vec![1], "one commit, one sync of the journal");
        cut.power_off();
        cut.restore(None);
        assert!(
            !host.state("devices/1.json").exists(),
            "not synced by itself"
        );
        let r = journal::recover(&host).expect("recover");
        assert_eq!(r.commits, 1);
        assert_eq!(
            fs::read(host.state("devices/1.json")).expect("replayed"),
            b"1\n"
        );
    }

    #[test]
    fn concurrent_commits_share_syncs_of_the_journal() {
        const N: usize = 64;
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let cut = PowerCut::install(&host, Duration::from_millis(5));
        let j = journal::of(&host);
        let start = Arc::new(std::sync::Barrier::new(N));
        let threads: Vec<_> = (0..N)
            .map(|n| {
                let (j, host, start) = (j.clone(), host.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    j.commit(&[record(&host, n)], &[])
                })
            })
            .collect();
        for t in threads {
            t.join().expect("join").expect("commit");
        }
        let groups = cut.groups();
        eprintln!(
            "{N} concurrent commits: {} syncs of the journal, groups {groups:?}",
            groups.len()
        );
        assert_eq!(groups.iter().sum::<usize>(), N, "every commit synced once");
        assert!(
            groups.len() < N / 2,
            "{} syncs for {N} commits",
            groups.len()
        );
    }

    /// What clients were told, by UUID: created (and not removed since), removed, and
    /// created but the removal failed (the power went off during it: either may hold).
    #[derive(Debug, Default)]
    struct Ledger {
        created: BTreeMap<String, crate::engine::DeviceInfo>,
        removed: BTreeSet<String>,
        unsure: BTreeSet<String>,
    }

    fn storm(engine: &Arc<Engine>, cut: &Arc<PowerCut>, seed: u64) -> Ledger {
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let take = |l: &Mutex<Ledger>| -> Ledger {
            let mut l = l.lock().expect("ledger");
            std::mem::take(&mut *l)
        };
        let clients: Vec<_> = (0..12u64)
            .map(|t| {
                let (engine, cut, ledger) = (engine.clone(), cut.clone(), ledger.clone());
                std::thread::spawn(move || {
                    let mut rng = Rng((seed ^ (t + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1);
                    let mut mine: Vec<String> = Vec::new();
                    for _ in 0..10 {
                        if cut.is_off() {
                            break;
                        }
                        if !mine.is_empty() && rng.below(4) == 0 {
                            let uuid = mine.swap_remove(rng.below(mine.len() as u64) as usize);
                            let removed = engine.remove_device(&uuid).is_ok();
                            let mut l = ledger.lock().expect("ledger");
                            l.created.remove(&uuid);
                            match removed {
                                true => l.removed.insert(uuid),
                                false => l.unsure.insert(uuid),
                            };
                            continue;
                        }
                        let req = CreateRequest {
                            type_query: "RTX6000-1Q".into(),
                            ..CreateRequest::default()
                        };
                        if let Ok(info) = engine.create_device(&req) {
                            mine.push(info.uuid.clone());
                            let mut l = ledger.lock().expect("ledger");
                            l.created.insert(info.uuid.clone(), info);
                        }
                    }
                })
            })
            .collect();
        // The daemon's background checkpoints, so that cuts fall in them too.
        let checkpoints = {
            let (engine, cut) = (engine.clone(), cut.clone());
            std::thread::spawn(move || {
                while !cut.is_off() {
                    let _ = journal::of(engine.host()).checkpoint_if_dirty();
                    std::thread::sleep(Duration::from_millis(25));
                }
            })
        };
        for c in clients {
            c.join().expect("client");
        }
        // Past the storm without a cut: the power goes off after it.
        cut.power_off();
        checkpoints.join().expect("checkpoints");
        take(&ledger)
    }

    #[test]
    fn power_cuts_during_create_storms_lose_no_acknowledged_device_and_believe_nothing_torn() {
        let seed = std::env::var("VGPUD_POWER_CUT_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        let rounds: u64 = std::env::var("VGPUD_POWER_CUTS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(8);
        eprintln!("power cut seed {seed} (VGPUD_POWER_CUT_SEED={seed} replays it), {rounds} cuts");
        let mut rng = Rng(seed | 1);
        let mut total = (0, 0, 0);
        for round in 0..rounds {
            let dir = tempfile::tempdir().expect("tempdir");
            vgpud_sim::write_profile("nvidia-turing", dir.path()).expect("profile");
            let host = Host::simulated(dir.path());
            let cut = PowerCut::install(&host, Duration::from_micros(500));
            let engine = Arc::new(Engine::new(host.clone()).expect("engine"));
            let at = 1 + rng.below(300);
            cut.cut_after(at);
            let ledger = storm(&engine, &cut, rng.below(u64::MAX));
            // Its last checkpoint fails: the power is off.
            drop(engine);
            let torn = round % 2 == 1;
            cut.restore(torn.then_some(&mut rng));
            // The host's own state goes with the power: no device exists at the next boot.
            for d in ["sys", "dev", "run"] {
                fs::remove_dir_all(dir.path().join(d)).expect("the kernel's state gone");
            }
            vgpud_sim::write_profile("nvidia-turing", dir.path()).expect("boot");
            let syncs = cut.groups().len();
            eprintln!(
                "round {round}: power cut at seam call {at}{}, {} creates and {} removes acknowledged ({} removes cut), {syncs} journal syncs",
                if torn { " (torn tails)" } else { "" },
                ledger.created.len(),
                ledger.removed.len(),
                ledger.unsure.len()
            );
            total.0 += ledger.created.len();
            total.1 += ledger.removed.len();
            total.2 += syncs;

            // The real start: the journal's recovery, the intents' replay, the first look.
            let engine = Engine::new(host.clone()).expect("engine after the power cut");
            let defs = mdevctl::read_all(&host).expect("definitions");
            let records = state::read_all(&host).expect("records");
            let ctx = format!("seed {seed}, round {round}, cut at {at}");
            assert!(
                defs.set_aside.is_empty(),
                "{ctx}: torn definitions: {:?}",
                defs.set_aside
            );
            let bad: Vec<_> = fs::read_dir(state::dir(&host))
                .map(|d| d.flatten().map(|e| e.file_name()).collect())
                .unwrap_or_default();
            let bad: Vec<_> = bad
                .iter()
                .filter(|n| n.to_string_lossy().ends_with(".bad"))
                .collect();
            assert!(bad.is_empty(), "{ctx}: torn records set aside: {bad:?}");
            assert!(
                !host.state("journal.bad").exists(),
                "{ctx}: the journal was set aside"
            );
            let listed = engine.list_devices();
            for (uuid, info) in &ledger.created {
                let def = defs.defined.iter().find(|d| &d.uuid == uuid);
                assert!(
                    def.is_some_and(|d| d.parent == info.parent && d.mdev_type == info.type_id),
                    "{ctx}: the acknowledged device {uuid} lost its definition"
                );
                assert!(
                    records
                        .iter()
                        .any(|r| &r.uuid == uuid && r.parent == info.parent),
                    "{ctx}: the acknowledged device {uuid} lost its record"
                );
                assert!(
                    listed.iter().any(|d| &d.uuid == uuid && d.persistent),
                    "{ctx}: the acknowledged device {uuid} is not listed as persistent"
                );
            }
            for uuid in &ledger.removed {
                assert!(
                    !defs.defined.iter().any(|d| &d.uuid == uuid)
                        && !records.iter().any(|r| &r.uuid == uuid),
                    "{ctx}: the acknowledged removal of {uuid} came back"
                );
            }
        }
        eprintln!(
            "{rounds} power cuts: {} acknowledged creates and {} removes checked, {} journal syncs",
            total.0, total.1, total.2
        );
        assert!(
            total.0 > 0,
            "no create was acknowledged: nothing was checked"
        );
    }
}
