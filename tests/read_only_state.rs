//! Issue #22 item 12: vgpud on a host whose `var/lib/vgpud` is read-only (a read-only bind
//! mount in a private mount namespace, which stops root too) starts, serves reads, refuses
//! every change with a named error that says the state directory is read-only, and keeps
//! running.

mod common;

use std::path::{Path, PathBuf};

use common::daemon::{Daemon, Policy, TestBus, TestHost};
use common::proxy::{error_message, error_name, opts, ManagerProxy};
use nix::mount::{mount, umount2, MntFlags, MsFlags};

/// The read-only bind mount, undone on drop (so the temporary tree can be removed).
struct ReadOnly(PathBuf);

impl ReadOnly {
    /// Makes `dir` read-only for this thread and the processes it starts: a private mount
    /// namespace of the calling thread, and a read-only bind mount of `dir` on itself.
    fn mount(dir: &Path) -> ReadOnly {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).expect("unshare the mounts");
        let none: Option<&str> = None;
        mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)
            .expect("make the mounts private");
        mount(Some(dir), dir, none, MsFlags::MS_BIND, none).expect("bind mount");
        let ro = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
        mount(none, dir, none, ro, none).expect("remount read-only");
        ReadOnly(dir.to_path_buf())
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        let _ = umount2(&self.0, MntFlags::MNT_DETACH);
    }
}

// One thread: the mount namespace is the test thread's, and vgpud is started from it.
#[tokio::test(flavor = "current_thread")]
async fn a_read_only_state_directory_serves_reads_and_refuses_changes() {
    if !common::skip::require_root(
        "a_read_only_state_directory_serves_reads_and_refuses_changes",
        "a read-only bind mount in a private mount namespace",
    ) {
        return;
    }
    let host = TestHost::new(&["mtty"]);
    let state = host.path("var/lib/vgpud");
    std::fs::create_dir_all(&state).expect("state directory");
    // An empty journal, as a clean stop leaves it.
    std::fs::write(state.join("journal"), "").expect("journal");
    let _ro = ReadOnly::mount(&state);
    assert!(
        std::fs::write(state.join("probe"), "x").is_err(),
        "the state directory is read-only"
    );

    let bus = TestBus::start(Policy::Open);
    let mut d = Daemon::start_args(&bus, &host, &["--poll-interval-ms", "100"]).await;
    let conn = bus.connect().await;
    let m = ManagerProxy::new(&conn).await.expect("manager");
    let gpus = m.list_gpus().await.expect("ListGpus");
    assert!(!gpus.is_empty(), "the GPUs are listed");
    let e = m
        .create_device("mtty-1", opts(&[("owner", "vm")]))
        .await
        .expect_err("a change is refused");
    assert_eq!(error_name(&e), "org.vgpud1.Error.Failed", "{e}");
    let message = error_message(&e);
    eprintln!("refused: {}: {message}", error_name(&e));
    assert!(
        message.contains("read-only") && message.contains(&state.display().to_string()),
        "the message says the state directory is read-only: {message}"
    );
    assert!(m.list_devices().await.expect("ListDevices").is_empty());
    // Still serving, after the refusal and a few journal checkpoints.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(d.is_running(), "vgpud exited:\n{}", d.log_text());
    assert!(!m.list_gpus().await.expect("ListGpus again").is_empty());
    let status = d.stop_within(std::time::Duration::from_secs(10));
    assert!(
        status.is_some(),
        "vgpud stops on SIGTERM:\n{}",
        d.log_text()
    );
}
