//! The write-ahead journal (`var/lib/vgpud/journal`): one append-only file for the intents of
//! operations in flight and for the durable changes of vgpud's files, with group commit.
//!
//! Each entry is one line, `<crc32 in hex> <JSON>\n`; the checksum covers the JSON. An entry
//! is one of:
//! - `intent`: an operation on a UUID opens (or updates) its intent, before it touches the host;
//! - `close`: the operation ended;
//! - `commit`: files to write and to remove (mdevctl definitions, device records), all or none.
//!
//! **Intents** are written, not synced: what they guard is the host's state (sysfs, driver
//! bindings, VFs, GPU instances), which a power cut takes away with them, while a killed
//! vgpud leaves both the host and the page cache, so the next start reads every intent that
//! was written before the host changed. **Commits** are durable before [`Journal::commit`]
//! returns: concurrent commits share one `fdatasync` (the first caller to find no sync in
//! flight syncs for everyone appended so far; the others wait for it), and the files are then
//! written in place of the journal's entries, in commit order, without a sync of their own
//! (definitions through a temporary file and a rename, so that mdevctl and libvirt never read
//! half of one). Many definitions and records thus cost one wait for the disk. A new
//! journal's name is made durable (its directory synced) before a commit counts on it.
//!
//! The journal writes and syncs through a [`Storage`] (the disk, [`Disk`]), where tests put
//! a double that counts the syncs of each group commit and cuts the power.
//!
//! **Checkpoints** make the written files durable (each file and each directory touched, once)
//! and then rewrite the journal to hold only the intents still open and the entries not yet
//! applied. They run when the journal grows past [`CHECKPOINT_BYTES`], and in the background
//! ([`Journal::checkpoint_if_dirty`], from the daemon's periodic look).
//!
//! **Recovery** ([`recover`], at start, before anything else reads vgpud's files) applies every
//! commit the journal holds again (they are idempotent), makes the files durable, keeps the
//! intents still open for the engine's replay, and rewrites the journal. A torn last line (a
//! crash while appending) ends the journal; a journal that is not a regular file, is larger
//! than [`MAX_JOURNAL_BYTES`] or is not UTF-8 is set aside and reported; an entry that fails
//! its checksum, names a path outside vgpud's files or is an intent of a format version this
//! vgpud does not know ends what is replayed of it, and the journal is set aside whole (so a
//! newer vgpud's entries are kept) and reported. None of these stops vgpud. A commit's files
//! get the mode of their kind, never the mode its line gives, and are written through no
//! symbolic link to a directory (one is refused and reported).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use super::intent::Intent;
use super::storage::{Disk, Storage};
use super::{io_err, FileWrite, PersistError, PersistResult};
use crate::host::Host;
use crate::metrics::cpu::{measure, Part::Persistence};

/// The largest journal vgpud reads at start: far above what checkpoints let it grow to.
pub const MAX_JOURNAL_BYTES: u64 = 64 << 20;

/// The size past which a commit checkpoints the journal.
pub const CHECKPOINT_BYTES: u64 = 4 << 20;

/// The largest entry (one line) vgpud writes or reads.
const MAX_ENTRY_BYTES: usize = 4 << 20;

/// What the journal is called in the log when it is bad.
pub const WHAT: &str = "journal (the operations it holds are not replayed)";

/// What the journal is called in the log when one of its entries is refused.
const REFUSED: &str = "journal entry (it and the entries after it are not replayed)";

/// The folders, below the root, whose files commits may write or remove: how many
/// components below it a file is (`<parent>/<uuid>`, `<uuid>.json`), and the mode every file
/// of it has (mdevctl's 0644 definitions, 0600 records), whatever a line of the journal says.
const COMMIT_DIRS: [(&str, usize, u32); 2] = [
    ("etc/mdevctl.d/", 2, 0o644),
    ("var/lib/vgpud/devices/", 1, 0o600),
];

/// One file a commit writes, by its path below the root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Written {
    path: String,
    /// Written for older vgpuds to read; the mode of the file's kind is used instead.
    mode: u32,
    content: String,
}

/// One entry of the journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "kebab-case")]
enum Entry {
    /// An intent opens or is updated.
    Intent(Intent),
    /// The intent of a UUID is closed.
    Close { uuid: String },
    /// Files written and removed together.
    Commit {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        write: Vec<Written>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        remove: Vec<String>,
    },
}

/// CRC-32 (IEEE 802.3, reflected), as zlib computes it.
fn crc32(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    let mut crc = !0u32;
    for &b in data {
        crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

fn encode(entry: &Entry) -> Vec<u8> {
    let json = serde_json::to_string(entry).unwrap_or_default();
    let mut line = format!("{:08x} ", crc32(json.as_bytes())).into_bytes();
    line.extend_from_slice(json.as_bytes());
    line.push(b'\n');
    line
}

/// One line back into an entry: `Err` says why it is not one.
fn decode(line: &str) -> Result<Entry, String> {
    let (sum, json) = line
        .split_once(' ')
        .ok_or_else(|| "no checksum".to_string())?;
    let sum = u32::from_str_radix(sum, 16).map_err(|_| format!("bad checksum field {sum:?}"))?;
    if sum != crc32(json.as_bytes()) {
        return Err("checksum mismatch".into());
    }
    serde_json::from_str(json).map_err(|e| format!("not an entry: {e}"))
}

/// A path below the root that a commit may touch (relative, plain components, a file of one
/// of [`COMMIT_DIRS`] at its depth), and the mode of its kind.
fn checked(rel: &str) -> Result<u32, String> {
    let plain = Path::new(rel)
        .components()
        .all(|c| matches!(c, Component::Normal(_)));
    let kind = COMMIT_DIRS.iter().find(|(dir, depth, _)| {
        rel.strip_prefix(dir)
            .is_some_and(|below| Path::new(below).components().count() == *depth)
    });
    match kind {
        Some((_, _, mode)) if plain && !rel.contains('\0') => Ok(*mode),
        _ => Err(format!("{rel:?} is not one of vgpud's files")),
    }
}

/// The files of one commit, resolved against the root.
#[derive(Debug, Default)]
struct Ops {
    write: Vec<FileWrite>,
    remove: Vec<PathBuf>,
}

impl Ops {
    fn of(root: &Path, write: &[Written], remove: &[String]) -> Result<Ops, String> {
        let mut ops = Ops::default();
        for w in write {
            ops.write.push(FileWrite {
                mode: checked(&w.path)?,
                path: root.join(&w.path),
                content: w.content.clone().into_bytes(),
            });
        }
        for r in remove {
            checked(r)?;
            ops.remove.push(root.join(r));
        }
        Ok(ops)
    }

    /// Writes and removes the files, without syncing, reusing and keeping spare files in
    /// `spares`; the touched paths go to `dirty`.
    fn apply(&self, dirty: &mut Dirty, spares: &Path) -> PersistResult<()> {
        super::write_files_reusing(&self.write, false, Some(spares))?;
        for w in &self.write {
            dirty.files.insert(w.path.clone());
            if let Some(dir) = w.path.parent() {
                dirty.dirs.insert(dir.to_path_buf());
            }
        }
        for path in &self.remove {
            if super::retire(path, spares)? {
                if let Some(dir) = path.parent() {
                    dirty.dirs.insert(dir.to_path_buf());
                }
            }
        }
        Ok(())
    }
}

/// Files written and directories changed since the last checkpoint.
#[derive(Debug, Default)]
struct Dirty {
    files: BTreeSet<PathBuf>,
    dirs: BTreeSet<PathBuf>,
}

impl Dirty {
    /// Syncs every file that is still a regular file (a link or FIFO put in its place is
    /// neither followed nor waited on), then every directory that still exists.
    fn sync(&self, storage: &dyn Storage) -> PersistResult<()> {
        use std::os::unix::fs::OpenOptionsExt;
        for path in &self.files {
            let file = fs::OpenOptions::new()
                .read(true)
                .custom_flags(
                    (nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits(),
                )
                .open(path);
            match file {
                Ok(f) if f.metadata().is_ok_and(|m| m.is_file()) => storage
                    .sync_file(path, &f)
                    .map_err(io_err("syncing", path))?,
                // Removed or replaced since: the directory's sync covers it.
                _ => continue,
            }
        }
        for dir in &self.dirs {
            match storage.sync_dir(dir) {
                Ok(()) => {}
                Err(PersistError::Io { source, .. })
                    if source.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// A commit appended but not yet applied to the files.
#[derive(Debug)]
struct Pending {
    seq: u64,
    /// Its line in the journal.
    line: Vec<u8>,
    ops: Ops,
    /// Set once applied: the result for its committer.
    result: Option<Result<(), String>>,
}

#[derive(Debug)]
struct Inner {
    file: Option<Arc<fs::File>>,
    /// Bytes in the journal file.
    len: u64,
    /// The journal's name is known durable (its directory synced since it was made).
    named: bool,
    /// Sequence numbers of commits: the last appended, the last made durable and applied.
    appended: u64,
    done: u64,
    /// A caller is syncing, applying or checkpointing (the leader); the others wait.
    leading: bool,
    /// Open intents by UUID, as their journal lines (what a checkpoint keeps).
    open: BTreeMap<String, Vec<u8>>,
    pending: VecDeque<Pending>,
    /// Results of applied commits whose committers have not collected them yet.
    results: HashMap<u64, Result<(), String>>,
    dirty: Dirty,
}

/// The journal of one root. Shared by every user of that root in the process ([`of`]).
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    root: PathBuf,
    inner: Mutex<Inner>,
    turn: Condvar,
    /// How it writes and syncs: the disk, or a test's double.
    storage: Arc<dyn Storage>,
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `ROOT/var/lib/vgpud/journal`.
pub fn path(host: &Host) -> PathBuf {
    host.state("journal")
}

/// The journals of the process, by path.
static JOURNALS: Mutex<BTreeMap<PathBuf, Arc<Journal>>> = Mutex::new(BTreeMap::new());

fn new_journal(host: &Host, storage: Arc<dyn Storage>) -> Arc<Journal> {
    Arc::new(Journal {
        path: path(host),
        root: host.root().to_path_buf(),
        inner: Mutex::new(Inner {
            file: None,
            len: 0,
            named: false,
            appended: 0,
            done: 0,
            leading: false,
            open: BTreeMap::new(),
            pending: VecDeque::new(),
            results: HashMap::new(),
            dirty: Dirty::default(),
        }),
        turn: Condvar::new(),
        storage,
    })
}

/// The journal of `host`'s root, shared in the process.
pub fn of(host: &Host) -> Arc<Journal> {
    let mut all = JOURNALS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    all.entry(path(host))
        .or_insert_with(|| new_journal(host, Arc::new(Disk)))
        .clone()
}

/// Makes `storage` the storage of the journal of `host`'s root (a fresh journal, as at
/// start), for a test to watch its syncs.
#[cfg(test)]
pub(crate) fn install(host: &Host, storage: Arc<dyn Storage>) -> Arc<Journal> {
    let journal = new_journal(host, storage);
    JOURNALS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(path(host), journal.clone());
    journal
}

impl Journal {
    /// Opens the journal file for appending (creating it) if it is not open yet.
    fn file(&self, inner: &mut Inner) -> PersistResult<Arc<fs::File>> {
        if let Some(f) = &inner.file {
            return Ok(f.clone());
        }
        use nix::fcntl::OFlag;
        let (dir, name) = super::split(&self.path)?;
        let file = nix::fcntl::openat(
            super::open_or_create_dir(dir)?,
            name,
            OFlag::O_RDWR
                | OFlag::O_APPEND
                | OFlag::O_CREAT
                | OFlag::O_NOFOLLOW
                | OFlag::O_NONBLOCK
                | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .map(fs::File::from)
        .map_err(|e| io_err("opening", &self.path)(e.into()))?;
        let meta = file.metadata().map_err(io_err("examining", &self.path))?;
        if !meta.is_file() {
            return Err(PersistError::Malformed {
                path: self.path.clone(),
                reason: "not a regular file".into(),
            });
        }
        if !inner.named {
            // The journal's name is durable before a commit's sync of its data counts on it
            // (once per start: a rewrite makes it durable too).
            self.storage.sync_dir(dir)?;
            inner.named = true;
        }
        inner.len = meta.len();
        let file = Arc::new(file);
        inner.file = Some(file.clone());
        Ok(file)
    }

    fn append(&self, inner: &mut Inner, line: &[u8]) -> PersistResult<()> {
        if line.len() > MAX_ENTRY_BYTES {
            return Err(PersistError::Malformed {
                path: self.path.clone(),
                reason: format!(
                    "an entry of {} bytes, more than {MAX_ENTRY_BYTES}",
                    line.len()
                ),
            });
        }
        let file = self.file(inner)?;
        self.storage
            .append(&file, line)
            .map_err(io_err("appending to", &self.path))?;
        inner.len += line.len() as u64;
        Ok(())
    }

    /// Records an intent (opened or updated). Written before the host changes, not synced
    /// (see the module's documentation).
    pub fn open_intent(&self, intent: &Intent) -> PersistResult<()> {
        measure(Persistence, || {
            let line = encode(&Entry::Intent(intent.clone()));
            let mut inner = lock(&self.inner);
            self.append(&mut inner, &line)?;
            inner.open.insert(intent.uuid.clone(), line);
            Ok(())
        })
    }

    /// Closes the intent of a UUID.
    pub fn close_intent(&self, uuid: &str) -> PersistResult<()> {
        measure(Persistence, || self.close_intent_measured(uuid))
    }

    fn close_intent_measured(&self, uuid: &str) -> PersistResult<()> {
        let mut inner = lock(&self.inner);
        if inner.open.remove(uuid).is_none() {
            return Ok(());
        }
        let line = encode(&Entry::Close {
            uuid: uuid.to_string(),
        });
        self.append(&mut inner, &line)
    }

    /// The intents open now, by UUID.
    pub fn open_intents(&self) -> Vec<String> {
        lock(&self.inner).open.keys().cloned().collect()
    }

    /// A file's path below the root and the mode of its kind.
    fn relative(&self, path: &Path) -> PersistResult<(String, u32)> {
        path.strip_prefix(&self.root)
            .ok()
            .and_then(Path::to_str)
            .and_then(|rel| checked(rel).ok().map(|mode| (rel.to_string(), mode)))
            .ok_or_else(|| PersistError::Malformed {
                path: path.to_path_buf(),
                reason: "not one of the files the journal keeps".into(),
            })
    }

    /// Where the spare files of this root are kept.
    fn spares(&self) -> PathBuf {
        self.root.join(super::SPARES_DIR)
    }

    /// Writes `write` and removes `remove`, all or none after a crash, durably: the entry is
    /// synced (with those of concurrent callers) before the files change, and the files are
    /// made durable by a later checkpoint.
    pub fn commit(&self, write: &[FileWrite], remove: &[PathBuf]) -> PersistResult<()> {
        measure(Persistence, || self.commit_measured(write, remove))
    }

    fn commit_measured(&self, write: &[FileWrite], remove: &[PathBuf]) -> PersistResult<()> {
        let mut written = Vec::with_capacity(write.len());
        let mut files = Vec::with_capacity(write.len());
        for w in write {
            let content =
                String::from_utf8(w.content.clone()).map_err(|_| PersistError::Malformed {
                    path: w.path.clone(),
                    reason: "not UTF-8".into(),
                })?;
            let (path, mode) = self.relative(&w.path)?;
            files.push(FileWrite { mode, ..w.clone() });
            written.push(Written {
                path,
                mode,
                content,
            });
        }
        let removed = remove
            .iter()
            .map(|p| self.relative(p).map(|(rel, _)| rel))
            .collect::<PersistResult<Vec<_>>>()?;
        let line = encode(&Entry::Commit {
            write: written,
            remove: removed,
        });
        let mut inner = lock(&self.inner);
        self.append(&mut inner, &line)?;
        inner.appended += 1;
        let seq = inner.appended;
        inner.pending.push_back(Pending {
            seq,
            line,
            ops: Ops {
                write: files,
                remove: remove.to_vec(),
            },
            result: None,
        });
        loop {
            if inner.done >= seq {
                let result = inner.results.remove(&seq).unwrap_or(Ok(()));
                return result.map_err(|reason| PersistError::Malformed {
                    path: self.path.clone(),
                    reason,
                });
            }
            if inner.leading {
                inner = self
                    .turn
                    .wait(inner)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                continue;
            }
            inner = self.lead(inner);
        }
    }

    /// As the leader: syncs everything appended so far, applies those commits in order, and
    /// checkpoints when the journal has grown too large. Returns with the lock held again.
    fn lead<'a>(&'a self, mut inner: MutexGuard<'a, Inner>) -> MutexGuard<'a, Inner> {
        inner.leading = true;
        let target = inner.appended;
        let batch: Vec<Pending> = inner.pending.drain(..).collect();
        let file = inner.file.clone();
        drop(inner);
        let synced = match &file {
            Some(f) => self
                .storage
                .sync_journal(f, batch.len())
                .map_err(|e| format!("syncing the journal: {e}")),
            None => Ok(()),
        };
        let mut dirty = Dirty::default();
        let mut applied = Vec::with_capacity(batch.len());
        for mut p in batch {
            p.result = Some(match &synced {
                Ok(()) => p
                    .ops
                    .apply(&mut dirty, &self.spares())
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.clone()),
            });
            applied.push(p);
        }
        let mut inner = lock(&self.inner);
        for p in applied {
            if let Some(r) = p.result {
                inner.results.insert(p.seq, r);
            }
        }
        inner.dirty.files.extend(dirty.files);
        inner.dirty.dirs.extend(dirty.dirs);
        inner.done = inner.done.max(target);
        if inner.len > CHECKPOINT_BYTES {
            let (again, result) = self.checkpoint(inner);
            inner = again;
            if let Err(e) = result {
                tracing::warn!(error = %e, "could not checkpoint the journal");
            }
        }
        inner.leading = false;
        self.turn.notify_all();
        inner
    }

    /// Makes every file written since the last checkpoint durable, then rewrites the journal
    /// to hold only the open intents and the lines after the last applied commit. The caller
    /// leads (no commit is applied meanwhile); appends go on while the files are synced and
    /// wait only while the journal is replaced.
    fn checkpoint<'a>(
        &'a self,
        mut inner: MutexGuard<'a, Inner>,
    ) -> (MutexGuard<'a, Inner>, PersistResult<()>) {
        let dirty = std::mem::take(&mut inner.dirty);
        drop(inner);
        let synced = dirty.sync(&*self.storage);
        let mut inner = lock(&self.inner);
        if let Err(e) = synced {
            inner.dirty.files.extend(dirty.files);
            inner.dirty.dirs.extend(dirty.dirs);
            return (inner, Err(e));
        }
        let result = self.rewrite(&mut inner);
        (inner, result)
    }

    fn rewrite(&self, inner: &mut Inner) -> PersistResult<()> {
        // The open intents, then the commits appended since the leader took its batch.
        let mut content: Vec<u8> = inner.open.values().flatten().copied().collect();
        for p in &inner.pending {
            content.extend_from_slice(&p.line);
        }
        self.storage.replace(&self.path, content)?;
        inner.named = true;
        inner.file = None;
        self.file(inner).map(|_| ())
    }

    /// The background checkpoint: when files were written or intents closed since the last
    /// one, makes the files durable and shortens the journal. Waits for the leader of a
    /// commit in flight, and leaves the journal to it when commits are waiting.
    pub fn checkpoint_if_dirty(&self) -> PersistResult<()> {
        measure(Persistence, || self.checkpoint_if_dirty_measured())
    }

    fn checkpoint_if_dirty_measured(&self) -> PersistResult<()> {
        let mut inner = lock(&self.inner);
        while inner.leading {
            inner = self
                .turn
                .wait(inner)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        // Files are dirty only through a commit whose line is still in the journal, so a
        // journal no longer than its open intents has nothing to make durable.
        let kept: u64 = inner.open.values().map(|l| l.len() as u64).sum();
        if !inner.pending.is_empty() || inner.len <= kept {
            return Ok(());
        }
        inner.leading = true;
        let (mut inner, result) = self.checkpoint(inner);
        inner.leading = false;
        self.turn.notify_all();
        result
    }
}

/// What [`recover`] found.
#[derive(Debug, Default)]
pub struct Recovered {
    /// The intents still open, in the order they were opened.
    pub intents: Vec<Intent>,
    /// How many commits were applied again.
    pub commits: usize,
}

/// At start, before vgpud reads its files: applies the commits of the journal again, makes
/// the files durable, and rewrites the journal with the intents still open, which it
/// returns. A bad journal is set aside (nothing of it is replayed) and reported.
pub fn recover(host: &Host) -> PersistResult<Recovered> {
    let journal = of(host);
    let mut inner = lock(&journal.inner);
    while inner.leading {
        inner = journal
            .turn
            .wait(inner)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
    }
    inner.file = None;
    inner.named = false;
    inner.open.clear();
    inner.pending.clear();
    inner.len = 0;
    let path = journal.path.clone();
    let text = match super::read_file(&path, MAX_JOURNAL_BYTES, super::Links::Refuse) {
        Ok(t) => t.unwrap_or_default(),
        Err(bad) => {
            super::set_aside(&bad, WHAT);
            String::new()
        }
    };
    let mut recovered = Recovered::default();
    let mut open: BTreeMap<String, (usize, Intent)> = BTreeMap::new();
    let mut dirty = Dirty::default();
    let mut order = 0usize;
    let spares = journal.spares();
    // The first entry refused, and why: it and the entries after it are not replayed.
    let mut refused: Option<String> = None;
    for (number, line) in text.split_inclusive('\n').enumerate() {
        let Some(line) = line.strip_suffix('\n') else {
            tracing::warn!(path = %path.display(), line = number + 1, "the journal ends in a torn entry (a crash while it was written); the entry is dropped");
            break;
        };
        let entry = decode(line).and_then(|entry| match &entry {
            Entry::Intent(i) => super::intent::check(i, &i.uuid).map(|()| entry),
            _ => Ok(entry),
        });
        let entry = match entry {
            Ok(e) => e,
            Err(reason) => {
                refused = Some(format!("line {}: {reason}", number + 1));
                break;
            }
        };
        match entry {
            Entry::Intent(i) => {
                order += 1;
                open.insert(i.uuid.clone(), (order, i));
            }
            Entry::Close { uuid } => {
                open.remove(&uuid);
            }
            Entry::Commit { write, remove } => match Ops::of(host.root(), &write, &remove) {
                Ok(ops) => {
                    if let Err(e) = ops.apply(&mut dirty, &spares) {
                        tracing::warn!(path = %path.display(), line = number + 1, error = %e, "could not apply a journal entry again");
                    }
                    recovered.commits += 1;
                }
                Err(reason) => {
                    refused = Some(format!("line {}: {reason}", number + 1));
                    break;
                }
            },
        }
    }
    if let Err(e) = dirty.sync(&*journal.storage) {
        tracing::warn!(error = %e, "could not sync the files the journal wrote again");
    }
    if let Some(reason) = refused {
        // Kept whole for the operator (or the newer vgpud that wrote it); what came before
        // the refused entry was replayed.
        let bad = super::BadFile::new(&path, reason);
        super::set_aside(&bad, REFUSED);
    }
    let mut intents: Vec<(usize, Intent)> = open.into_values().collect();
    intents.sort_by_key(|(n, _)| *n);
    let mut content = Vec::new();
    for (_, i) in &intents {
        let line = encode(&Entry::Intent(i.clone()));
        content.extend_from_slice(&line);
        inner.open.insert(i.uuid.clone(), line);
    }
    // An empty journal stays as it is (a read-only state directory holds one too).
    if !content.is_empty() || (!text.is_empty() && fs::symlink_metadata(&path).is_ok()) {
        let rewritten = journal.storage.replace(&path, content);
        match rewritten {
            Ok(()) => inner.named = true,
            // Served as it is; every change is refused with the same error.
            Err(e @ PersistError::ReadOnly { .. }) => {
                tracing::warn!(error = %e, "vgpud's state is on a read-only file system: it serves reads and refuses every change");
            }
            Err(e) => return Err(e),
        }
    }
    recovered.intents = intents.into_iter().map(|(_, i)| i).collect();
    Ok(recovered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::intent::{Operation, VERSION};
    use std::time::Duration;

    fn intent(uuid: &str) -> Intent {
        Intent {
            version: VERSION,
            uuid: uuid.into(),
            started: 1,
            operation: Operation::Remove {
                parent: "mtty".into(),
            },
        }
    }

    const U1: &str = "a1b2c3d4-0000-4000-8000-000000000001";
    const U2: &str = "a1b2c3d4-0000-4000-8000-000000000002";

    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn commits_write_files_and_recovery_replays_them_and_open_intents() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let j = of(&host);
        let def = host.etc(&format!("mdevctl.d/mtty/{U1}"));
        j.open_intent(&intent(U1)).expect("intent");
        j.open_intent(&intent(U2)).expect("intent");
        assert_eq!(j.open_intents(), vec![U1.to_string(), U2.to_string()]);
        j.commit(
            &[FileWrite {
                path: def.clone(),
                content: b"{}\n".to_vec(),
                mode: 0o644,
            }],
            &[],
        )
        .expect("commit");
        j.close_intent(U1).expect("close");
        assert_eq!(fs::read_to_string(&def).expect("def"), "{}\n");
        // As after a crash that lost the files but not the journal.
        fs::remove_file(&def).expect("rm");
        let r = recover(&host).expect("recover");
        assert_eq!(r.commits, 1);
        assert_eq!(fs::read_to_string(&def).expect("def"), "{}\n");
        assert_eq!(r.intents, vec![intent(U2)]);
        // The journal now holds only the open intent.
        let text = fs::read_to_string(path(&host)).expect("journal");
        assert_eq!(text.lines().count(), 1, "{text}");
        j.commit(&[], std::slice::from_ref(&def)).expect("remove");
        assert!(!def.exists());
        j.close_intent(U2).expect("close");
        j.checkpoint_if_dirty().expect("checkpoint");
        assert_eq!(fs::read_to_string(path(&host)).expect("journal"), "");
        assert!(recover(&host).expect("recover").intents.is_empty());
    }

    #[test]
    fn a_torn_or_corrupt_tail_ends_the_journal_and_foreign_paths_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let good = String::from_utf8(encode(&Entry::Intent(intent(U1)))).expect("utf8");
        let mut bad = String::from_utf8(encode(&Entry::Intent(intent(U2)))).expect("utf8");
        bad.replace_range(0..1, if bad.starts_with('0') { "1" } else { "0" });
        let outside = String::from_utf8(encode(&Entry::Commit {
            write: vec![Written {
                path: "etc/passwd".into(),
                mode: 0o644,
                content: "x".into(),
            }],
            remove: vec![],
        }))
        .expect("utf8");
        fs::create_dir_all(host.state("")).expect("dir");
        for tail in [bad.clone(), outside, bad[..10].to_string()] {
            fs::write(path(&host), format!("{good}{tail}")).expect("write");
            let r = recover(&host).expect("recover");
            assert_eq!(r.intents, vec![intent(U1)], "{tail}");
            assert!(!dir.path().join("etc/passwd").exists());
        }
    }

    #[test]
    fn commits_touch_only_files_of_vgpuds_folders_at_their_depth_with_fixed_modes() {
        assert_eq!(checked("etc/mdevctl.d/mtty/u"), Ok(0o644));
        assert_eq!(checked("var/lib/vgpud/devices/u.json"), Ok(0o600));
        for rel in [
            "etc/mdevctl.d/u",
            "etc/mdevctl.d/a/b/u",
            "var/lib/vgpud/devices/a/u.json",
            "etc/mdevctl.d/../passwd/u",
            "var/lib/vgpud/journal",
            // At the right depth, but not plain: they would leave vgpud's folders.
            "etc/mdevctl.d/../u",
            "etc/mdevctl.d/mtty/..",
            "var/lib/vgpud/devices/..",
            "var/lib/vgpud/devices/u\0.json",
        ] {
            assert!(checked(rel).is_err(), "{rel}");
        }
        let ops = Ops::of(
            Path::new("/r"),
            &[Written {
                path: "etc/mdevctl.d/mtty/u".into(),
                mode: 0o6777,
                content: String::new(),
            }],
            &[],
        )
        .expect("ops");
        assert_eq!(ops.write[0].mode, 0o644);
    }

    /// A disk that records the files it syncs and fails every directory sync with EIO.
    #[derive(Debug, Default)]
    struct FailingDirs(Mutex<Vec<PathBuf>>);

    impl FailingDirs {
        fn synced(&self) -> MutexGuard<'_, Vec<PathBuf>> {
            self.0.lock().expect("not poisoned")
        }
    }

    impl Storage for FailingDirs {
        fn append(&self, file: &fs::File, line: &[u8]) -> io::Result<()> {
            Disk.append(file, line)
        }
        fn sync_journal(&self, file: &fs::File, commits: usize) -> io::Result<()> {
            Disk.sync_journal(file, commits)
        }
        fn sync_file(&self, path: &Path, file: &fs::File) -> io::Result<()> {
            self.synced().push(path.to_path_buf());
            Disk.sync_file(path, file)
        }
        fn sync_dir(&self, dir: &Path) -> PersistResult<()> {
            Err(io_err("syncing directory", dir)(
                io::Error::from_raw_os_error(nix::libc::EIO),
            ))
        }
        fn replace(&self, path: &Path, content: Vec<u8>) -> PersistResult<()> {
            Disk.replace(path, content)
        }
    }

    #[test]
    fn a_checkpoint_syncs_the_files_still_there_and_follows_no_link_and_waits_on_no_fifo() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("file");
        let link = dir.path().join("link");
        let fifo = dir.path().join("fifo");
        fs::write(&file, "x").expect("file");
        std::os::unix::fs::symlink(&file, &link).expect("link");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo");
        let dirty = Dirty {
            files: [&file, &link, &fifo, &dir.path().join("gone")]
                .into_iter()
                .cloned()
                .collect(),
            dirs: BTreeSet::new(),
        };
        // Opening a FIFO without O_NONBLOCK waits for a writer: the sync runs aside.
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let disk = FailingDirs::default();
            let result = dirty.sync(&disk).map_err(|e| e.to_string());
            let _ = done.send((result, disk.synced().clone()));
        });
        let (result, synced) = finished
            .recv_timeout(Duration::from_secs(10))
            .expect("the sync waited on the FIFO");
        assert_eq!(result, Ok(()));
        assert_eq!(synced, vec![file]);
    }

    #[test]
    fn a_checkpoint_passes_over_a_removed_folder_and_reports_a_failing_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let gone = Dirty {
            files: BTreeSet::new(),
            dirs: [dir.path().join("gone")].into(),
        };
        assert!(gone.sync(&Disk).is_ok());
        let failing = Dirty {
            files: BTreeSet::new(),
            dirs: [dir.path().to_path_buf()].into(),
        };
        let err = failing.sync(&FailingDirs::default()).expect_err("EIO");
        assert!(err.to_string().contains("syncing directory"), "{err}");
    }

    #[test]
    fn an_idle_checkpoint_leaves_the_journal_alone() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let j = of(&host);
        j.open_intent(&intent(U1)).expect("intent");
        j.commit(
            &[FileWrite {
                path: host.state(&format!("devices/{U1}.json")),
                content: b"{}\n".to_vec(),
                mode: 0o600,
            }],
            &[],
        )
        .expect("commit");
        let inode = || fs::metadata(path(&host)).expect("journal").ino();
        let before = inode();
        j.checkpoint_if_dirty().expect("checkpoint");
        let after = inode();
        assert_ne!(
            before, after,
            "the commit's checkpoint rewrites the journal"
        );
        // Only the open intent is left: nothing to make durable, nothing to shorten.
        j.checkpoint_if_dirty().expect("checkpoint");
        assert_eq!(inode(), after);
    }

    #[test]
    fn a_journal_that_is_a_link_is_never_written_through() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let elsewhere = dir.path().join("elsewhere");
        fs::write(&elsewhere, "").expect("file");
        fs::create_dir_all(host.state("")).expect("dir");
        std::os::unix::fs::symlink(&elsewhere, path(&host)).expect("link");
        let j = of(&host);
        assert!(j.open_intent(&intent(U1)).is_err());
        assert_eq!(fs::read_to_string(&elsewhere).expect("elsewhere"), "");
        // Once the link is gone, the journal is made afresh, and closed on exec: the tools
        // vgpud runs never hold it open.
        fs::remove_file(path(&host)).expect("rm");
        j.open_intent(&intent(U1)).expect("a new journal");
        let file = lock(&j.inner).file.clone().expect("open");
        let flags = nix::fcntl::fcntl(&*file, nix::fcntl::FcntlArg::F_GETFD).expect("flags");
        assert_ne!(flags & nix::libc::FD_CLOEXEC, 0);
        assert_eq!(recover(&host).expect("recover").intents, vec![intent(U1)]);
    }

    #[test]
    fn a_removed_file_is_kept_as_a_spare_and_reused_with_the_mode_of_its_kind() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let j = of(&host);
        let record = host.state(&format!("devices/{U1}.json"));
        let definition = host.etc(&format!("mdevctl.d/mtty/{U2}"));
        let write = |path: &Path| FileWrite {
            path: path.to_path_buf(),
            content: b"{}\n".to_vec(),
            mode: 0o777,
        };
        // The caller's mode is not taken: each kind of file has its own.
        j.commit(&[write(&record)], &[]).expect("commit");
        let meta = fs::metadata(&record).expect("record");
        assert_eq!(meta.mode() & 0o7777, 0o600);
        j.commit(&[], std::slice::from_ref(&record))
            .expect("remove");
        assert!(!record.exists());
        let spares = fs::read_dir(dir.path().join(super::super::SPARES_DIR))
            .expect("spares")
            .count();
        assert_eq!(spares, 1);
        j.commit(&[write(&definition)], &[]).expect("commit");
        let reused = fs::metadata(&definition).expect("definition");
        assert_eq!(reused.ino(), meta.ino(), "the spare's inode");
        assert_eq!(reused.mode() & 0o7777, 0o644);
    }

    #[test]
    fn an_entry_of_the_largest_size_is_taken_and_one_byte_more_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let j = of(&host);
        let mut inner = lock(&j.inner);
        assert!(j.append(&mut inner, &vec![b'x'; MAX_ENTRY_BYTES]).is_ok());
        assert!(j
            .append(&mut inner, &vec![b'x'; MAX_ENTRY_BYTES + 1])
            .is_err());
        assert_eq!(inner.len, MAX_ENTRY_BYTES as u64);
    }

    #[test]
    fn a_commit_that_takes_the_journal_past_its_limit_shortens_it_and_one_up_to_it_does_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let j = of(&host);
        let file = host.state(&format!("devices/{U1}.json"));
        let line = |n: usize| {
            encode(&Entry::Commit {
                write: vec![Written {
                    path: format!("var/lib/vgpud/devices/{U1}.json"),
                    mode: 0o600,
                    content: "a".repeat(n),
                }],
                remove: vec![],
            })
            .len()
        };
        let half = CHECKPOINT_BYTES as usize / 2;
        let n = half - line(0);
        assert_eq!(line(n), half);
        let commit = |n: usize| {
            j.commit(
                &[FileWrite {
                    path: file.clone(),
                    content: "a".repeat(n).into_bytes(),
                    mode: 0o600,
                }],
                &[],
            )
            .expect("commit")
        };
        let size = || fs::metadata(path(&host)).expect("journal").len();
        commit(n);
        commit(n);
        assert_eq!(size(), CHECKPOINT_BYTES, "up to the limit: kept");
        commit(0);
        assert_eq!(size(), 0, "past it: the commit's leader checkpoints");
    }

    #[test]
    fn recovery_returns_the_open_intents_in_the_order_they_were_opened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let j = of(&host);
        // Not the order of their UUIDs.
        j.open_intent(&intent(U2)).expect("intent");
        j.open_intent(&intent(U1)).expect("intent");
        assert_eq!(
            recover(&host).expect("recover").intents,
            vec![intent(U2), intent(U1)]
        );
    }

    #[test]
    fn recovery_empties_a_journal_of_commits_and_leaves_an_empty_one_alone() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let commit = encode(&Entry::Commit {
            write: vec![Written {
                path: format!("var/lib/vgpud/devices/{U1}.json"),
                mode: 0o600,
                content: "{}\n".into(),
            }],
            remove: vec![],
        });
        fs::create_dir_all(host.state("")).expect("dir");
        fs::write(path(&host), commit).expect("journal");
        let r = recover(&host).expect("recover");
        assert_eq!(r.commits, 1);
        assert!(host.state(&format!("devices/{U1}.json")).is_file());
        assert_eq!(fs::read_to_string(path(&host)).expect("journal"), "");
        let inode = fs::metadata(path(&host)).expect("journal").ino();
        assert_eq!(recover(&host).expect("recover").commits, 0);
        assert_eq!(fs::metadata(path(&host)).expect("journal").ino(), inode);
    }

    #[test]
    fn an_intent_of_an_unknown_version_sets_the_journal_aside_after_the_entries_before_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let good = String::from_utf8(encode(&Entry::Intent(intent(U1)))).expect("utf8");
        let mut newer = intent(U2);
        newer.version = 99;
        let newer = String::from_utf8(encode(&Entry::Intent(newer))).expect("utf8");
        fs::create_dir_all(host.state("")).expect("dir");
        fs::write(path(&host), format!("{good}{newer}")).expect("write");
        let r = recover(&host).expect("recover");
        assert_eq!(r.intents, vec![intent(U1)]);
        let kept = fs::read_to_string(host.state("journal.bad")).expect("set aside");
        assert_eq!(kept, format!("{good}{newer}"));
        assert_eq!(fs::read_to_string(path(&host)).expect("journal"), good);
    }

    #[test]
    fn a_journal_that_is_a_fifo_or_too_large_is_set_aside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        fs::create_dir_all(host.state("")).expect("dir");
        nix::unistd::mkfifo(
            &path(&host),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .expect("fifo");
        assert!(recover(&host).expect("recover").intents.is_empty());
        assert!(host.state("journal.bad").exists());
        let j = of(&host);
        j.open_intent(&intent(U1)).expect("a new journal");
        assert_eq!(recover(&host).expect("recover").intents, vec![intent(U1)]);
    }

    #[test]
    fn concurrent_commits_all_land_and_share_syncs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let cut = crate::persist::power_cut::PowerCut::install(
            &host,
            std::time::Duration::from_millis(1),
        );
        let j = of(&host);
        let threads: Vec<_> = (0..16)
            .map(|t| {
                let j = j.clone();
                let host = host.clone();
                std::thread::spawn(move || {
                    for n in 0..20 {
                        let p = host.state(&format!("devices/{t}-{n}.json"));
                        j.commit(
                            &[FileWrite {
                                path: p,
                                content: format!("{t} {n}\n").into_bytes(),
                                mode: 0o600,
                            }],
                            &[],
                        )
                        .expect("commit");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("join");
        }
        for t in 0..16 {
            for n in 0..20 {
                let p = host.state(&format!("devices/{t}-{n}.json"));
                assert_eq!(fs::read_to_string(p).expect("file"), format!("{t} {n}\n"));
            }
        }
        let groups = cut.groups();
        assert_eq!(groups.iter().sum::<usize>(), 320, "each commit synced once");
        assert!(
            groups.len() < 320 / 2,
            "{} syncs for 320 commits",
            groups.len()
        );
        assert_eq!(recover(&host).expect("recover").commits, 320);
    }
}
