//! When each GPU was last re-shaped, for the hysteresis of [`super::reshape`]: kept in
//! `var/lib/vgpud/reshapes` (a line `GPU SECONDS` per GPU after the header
//! `vgpud-reshapes 1`), written atomically and durably at each re-shape and read at start,
//! so a restart does not allow one more re-shape per GPU. A bad file (a link, a FIFO, too
//! large, not the format) is set aside as `reshapes.bad` with a warning, and no GPU has a
//! time; a write that fails is logged, never fatal (the time is still kept in memory).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::host::Host;
use crate::persist;

/// The file's name, below the state directory.
pub const FILE: &str = "reshapes";
/// The most GPUs kept (more than a host has).
pub const MAX_GPUS: usize = 4096;
const MAGIC: &str = "vgpud-reshapes 1";
/// The longest GPU name taken (a PCI address has 12 characters).
const MAX_GPU_LEN: usize = 64;

/// When each GPU (by address) was last re-shaped, Unix seconds.
#[derive(Debug)]
pub struct LastReshapes {
    path: PathBuf,
    times: Mutex<BTreeMap<String, u64>>,
}

impl LastReshapes {
    /// The times kept for `host`; a bad file is set aside.
    pub fn load(host: &Host) -> Self {
        let path = host.state(FILE);
        let times = match persist::read_state_file(&path, persist::MAX_STATE_FILE_BYTES) {
            Ok(None) => BTreeMap::new(),
            Ok(Some(text)) => decode(&text).unwrap_or_else(|reason| {
                persist::set_aside(&persist::BadFile::new(&path, reason), "re-shape times file");
                BTreeMap::new()
            }),
            Err(bad) => {
                persist::set_aside(&bad, "re-shape times file");
                BTreeMap::new()
            }
        };
        LastReshapes {
            path,
            times: Mutex::new(times),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, u64>> {
        // Every update is one insert: a poisoned lock still holds consistent data.
        self.times.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// When `gpu` was last re-shaped.
    pub fn of(&self, gpu: &str) -> Option<u64> {
        self.lock().get(gpu).copied()
    }

    /// Records that `gpu` was re-shaped at `now`, durably before this returns.
    pub fn stamp(&self, gpu: &str, now: u64) {
        let mut times = self.lock();
        if !times.contains_key(gpu) && (times.len() >= MAX_GPUS || !plain(gpu)) {
            tracing::warn!(%gpu, "the re-shape time of this GPU is not kept");
            return;
        }
        times.insert(gpu.to_string(), now);
        if let Err(e) = persist::write_state_file(&self.path, encode(&times).as_bytes()) {
            tracing::warn!(%gpu, error = %e, "could not record the re-shape time: a restart may allow one more re-shape of the GPU");
        }
    }
}

/// Whether `gpu` can be a word of the file.
fn plain(gpu: &str) -> bool {
    !gpu.is_empty()
        && gpu.len() <= MAX_GPU_LEN
        && gpu
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'.' | b'_' | b'-'))
}

fn encode(times: &BTreeMap<String, u64>) -> String {
    let mut text = format!("{MAGIC}\n");
    for (gpu, t) in times {
        text.push_str(&format!("{gpu} {t}\n"));
    }
    text
}

fn decode(text: &str) -> Result<BTreeMap<String, u64>, String> {
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC) {
        return Err(format!("its first line is not {MAGIC:?}"));
    }
    let mut times = BTreeMap::new();
    for (i, line) in lines.enumerate() {
        let bad = || format!("line {} is not \"GPU SECONDS\"", i + 2);
        let (gpu, t) = line.split_once(' ').ok_or_else(bad)?;
        let t: u64 = t.parse().map_err(|_| bad())?;
        if !plain(gpu) || times.insert(gpu.to_string(), t).is_some() {
            return Err(bad());
        }
        if times.len() > MAX_GPUS {
            return Err(format!("more than {MAX_GPUS} GPUs"));
        }
    }
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::{LastReshapes, FILE};
    use crate::host::Host;

    #[test]
    fn re_shape_times_outlive_a_restart_and_a_bad_file_is_set_aside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::simulated(dir.path());
        let last = LastReshapes::load(&host);
        assert_eq!(last.of("0000:01:00.0"), None);
        last.stamp("0000:01:00.0", 1_000);
        last.stamp("0000:02:00.0", 2_000);
        last.stamp("0000:01:00.0", 3_000);
        // Not a word of the file: kept nowhere.
        last.stamp("../x y", 4_000);
        assert_eq!(last.of("../x y"), None);
        let again = LastReshapes::load(&host);
        assert_eq!(again.of("0000:01:00.0"), Some(3_000));
        assert_eq!(again.of("0000:02:00.0"), Some(2_000));

        let path = host.state(FILE);
        let bad = host.state("reshapes.bad");
        for text in [
            "vgpud-reshapes 2\n",
            "vgpud-reshapes 1\n0000:01:00.0 soon\n",
            "vgpud-reshapes 1\n0000:01:00.0 1\n0000:01:00.0 2\n",
            "vgpud-reshapes 1\n../etc 1\n",
        ] {
            std::fs::write(&path, text).expect("write");
            assert_eq!(LastReshapes::load(&host).of("0000:01:00.0"), None, "{text}");
            assert!(bad.exists() && !path.exists(), "{text}");
            std::fs::remove_file(&bad).expect("rm");
        }
        // A FIFO, a link and a huge file are set aside, never read (nor a hang).
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .expect("mkfifo");
        assert_eq!(LastReshapes::load(&host).of("0000:01:00.0"), None);
        assert!(bad.exists() && !path.exists());
        std::fs::remove_file(&bad).expect("rm");
        std::os::unix::fs::symlink("/etc/hostname", &path).expect("symlink");
        assert_eq!(LastReshapes::load(&host).of("0000:01:00.0"), None);
        assert!(!path.exists());
        std::fs::remove_file(&bad).expect("rm");
        std::fs::write(&path, "a".repeat(2 << 20)).expect("write");
        assert_eq!(LastReshapes::load(&host).of("0000:01:00.0"), None);
        assert!(bad.exists());
        // After a bad file, a re-shape writes a good one.
        let fresh = LastReshapes::load(&host);
        fresh.stamp("0000:01:00.0", 5_000);
        assert_eq!(LastReshapes::load(&host).of("0000:01:00.0"), Some(5_000));
    }
}
