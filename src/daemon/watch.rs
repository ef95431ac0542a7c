//! Watching for changes vgpud must notice while it runs: new, changed or removed mdevctl
//! definitions (inotify on `etc/mdevctl.d`, since mdevctl sends no events), which make vgpud
//! look at the host; devices and GPUs that changed behind vgpud's back come as kernel uevents
//! (`daemon::uevents`), and only when no uevent socket could be opened does this task look at
//! the whole host every `interval`. vgpud's own changes to the definitions (noted by
//! [`crate::persist::own_changes`], and its temporary files) wake nothing, so a storm of
//! creates never makes it look at the whole host. Every `interval` it also checkpoints the
//! journal (`persist::journal`) in the background, which costs nothing when nothing is
//! dirty.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::engine::Engine;
use crate::persist::mdevctl;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::sync::mpsc;

/// Runs until its task is dropped: checkpoints the journal every `interval` (and looks at
/// the whole host then, with `periodic_looks`, when no uevent can be listened to), and looks
/// at once (after 50 ms to let a burst of writes settle) when a definition changes. What a
/// look finds goes out through the engine's event stream.
pub async fn run(engine: Arc<Engine>, interval: Duration, periodic_looks: bool) {
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let base = mdevctl::base_dir(engine.host());
    if let Err(e) = std::fs::create_dir_all(&base) {
        tracing::warn!(path = %base.display(), error = %e, "cannot create the definitions directory");
    }
    match spawn_definition_watcher(base.clone(), tx) {
        Ok(()) => tracing::debug!(path = %base.display(), "watching definitions"),
        Err(e) => {
            tracing::warn!(path = %base.display(), error = %e, "cannot watch definitions; relying on the periodic look")
        }
    }
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is at once: the look at start was just made.
    ticker.tick().await;
    loop {
        let reason = tokio::select! {
            _ = ticker.tick() => periodic_looks.then_some("no-listener"),
            Some(()) = rx.recv() => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                while rx.try_recv().is_ok() {}
                Some("definitions")
            }
        };
        let e = engine.clone();
        let checkpoint = tokio::task::spawn_blocking(move || {
            crate::persist::journal::of(e.host()).checkpoint_if_dirty()
        });
        if let Ok(Err(e)) = checkpoint.await {
            tracing::warn!(error = %e, "could not checkpoint the journal");
        }
        if let Some(reason) = reason {
            full_look(&engine, reason).await;
        }
    }
}

/// One full look at the host ([`Engine::poll`]), counted in the metrics and logged with
/// its reason.
pub(super) async fn full_look(engine: &Arc<Engine>, reason: &'static str) {
    crate::metrics::counters().full_look(reason);
    let started = std::time::Instant::now();
    let e = engine.clone();
    let result = tokio::task::spawn_blocking(move || {
        let changes = e.events().batch(|| e.poll());
        e.warm_types();
        changes
    })
    .await;
    match result {
        Ok(Ok(changes)) => {
            let elapsed_ms = super::millis(started.elapsed());
            let (added, removed, updated) = (
                changes.added.len(),
                changes.removed.len(),
                changes.updated.len(),
            );
            // The fallback's periodic looks are logged only when they find something.
            if reason != "no-listener" || added + removed + updated > 0 {
                tracing::info!(
                    reason,
                    added,
                    removed,
                    updated,
                    elapsed_ms,
                    "full look at the host"
                );
            }
        }
        Ok(Err(e)) => tracing::warn!(reason, error = %e, "could not look at the host"),
        Err(e) => tracing::error!(error = %e, "the host watcher task failed"),
    }
}

/// Reads NVML for the MIG-capable GPUs every `interval` (GPU instances made or destroyed by
/// other tools send no uevent); never under a GPU's lock (see
/// [`Engine::refresh_nvidia_all`]).
pub async fn nvml_timer(engine: Arc<Engine>, interval: Duration) {
    if engine.control().availability().is_err() {
        return;
    }
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let e = engine.clone();
        let done = tokio::task::spawn_blocking(move || e.events().batch(|| e.refresh_nvidia_mig()));
        if let Err(e) = done.await {
            tracing::error!(error = %e, "the NVML timer task failed");
        }
    }
}

const MASK: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_CLOSE_WRITE)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_DELETE_SELF);

/// Watches `base` and each parent directory in it on a thread of its own; every event
/// becomes one wake-up of the watcher.
fn spawn_definition_watcher(base: PathBuf, tx: mpsc::Sender<()>) -> nix::Result<()> {
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC)?;
    crate::persist::own_changes::watching(&base);
    let mut dirs = std::collections::HashMap::new();
    dirs.insert(inotify.add_watch(&base, MASK)?, base.clone());
    watch_children(&inotify, &base, &mut dirs);
    std::thread::Builder::new()
        .name("vgpud-inotify".into())
        .spawn(move || loop {
            match inotify.read_events() {
                Ok(events) => {
                    let new_dir = events
                        .iter()
                        .any(|e| e.mask.contains(AddWatchFlags::IN_ISDIR));
                    if new_dir {
                        watch_children(&inotify, &base, &mut dirs);
                    }
                    let foreign = events.iter().any(|e| {
                        let own = own(e, &dirs);
                        if !own {
                            tracing::debug!(name = ?e.name, mask = ?e.mask, "a change to the definitions");
                        }
                        !own
                    });
                    // A full channel already holds a wake-up.
                    if foreign && tx.try_send(()).is_err() && tx.is_closed() {
                        return;
                    }
                }
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "the definition watcher stopped");
                    return;
                }
            }
        })
        .map(|_| ())
        .map_err(|_| nix::errno::Errno::EAGAIN)
}

fn watch_children(
    inotify: &Inotify,
    base: &Path,
    dirs: &mut std::collections::HashMap<nix::sys::inotify::WatchDescriptor, PathBuf>,
) {
    if let Ok(entries) = std::fs::read_dir(base) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                // Adding a watch twice returns the same descriptor: harmless.
                if let Ok(wd) = inotify.add_watch(&path, MASK) {
                    dirs.insert(wd, path);
                }
            }
        }
    }
}

/// Whether an event is vgpud's own doing: on one of its temporary files, or a change it
/// noted. A lost event (queue overflow) or a watched directory going is never own.
fn own(
    event: &nix::sys::inotify::InotifyEvent,
    dirs: &std::collections::HashMap<nix::sys::inotify::WatchDescriptor, PathBuf>,
) -> bool {
    let (Some(name), Some(dir)) = (&event.name, dirs.get(&event.wd)) else {
        return false;
    };
    let name = name.to_string_lossy();
    if name.starts_with('.') && name.contains(".vgpud-tmp-") {
        return true;
    }
    crate::persist::own_changes::take(&dir.join(&*name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::{self, FileWrite};

    /// Every event of `inotify` read so far: (event, whether vgpud made it).
    fn drain(
        inotify: &Inotify,
        dirs: &std::collections::HashMap<nix::sys::inotify::WatchDescriptor, PathBuf>,
    ) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        while let Ok(events) = inotify.read_events() {
            for e in &events {
                out.push((format!("{:?} {:?}", e.name, e.mask), own(e, dirs)));
            }
        }
        out
    }

    #[test]
    fn vgpuds_own_writes_wake_nothing_and_anyone_elses_do() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().join("etc/mdevctl.d");
        let parent = base.join("mtty");
        std::fs::create_dir_all(&parent).expect("dirs");
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).expect("init");
        crate::persist::own_changes::watching(&base);
        let mut dirs = std::collections::HashMap::new();
        dirs.insert(inotify.add_watch(&base, MASK).expect("watch"), base.clone());
        watch_children(&inotify, &base, &mut dirs);
        let def = parent.join("a1b2c3d4-0000-4000-8000-00000000000a");
        let spares = dir.path().join(persist::SPARES_DIR);
        let write = || {
            persist::write_files_reusing(
                &[FileWrite {
                    path: def.clone(),
                    content: b"{}".to_vec(),
                    mode: 0o644,
                }],
                false,
                Some(&spares),
            )
            .expect("write")
        };
        // A new file, a removal kept as a spare, a write that reuses it, a replacement.
        write();
        assert!(persist::retire(&def, &spares).expect("retire"));
        assert_eq!(std::fs::read_dir(&spares).expect("spares").count(), 1);
        write();
        write();
        let events = drain(&inotify, &dirs);
        assert!(!events.is_empty());
        assert!(events.iter().all(|(_, own)| *own), "{events:?}");
        // mdevctl or an operator writing the file.
        std::fs::write(&def, "{ }").expect("foreign write");
        let events = drain(&inotify, &dirs);
        assert!(events.iter().any(|(_, own)| !own), "{events:?}");
    }
}
