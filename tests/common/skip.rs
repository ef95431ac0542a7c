//! Tests that cannot run here say so: they fail, unless `VGPUD_ALLOW_SKIP=1` lets them skip
//! with a `SKIPPED: <test>: <reason>` line on stderr. CI runs as root with every tool
//! installed and never sets it, so there nothing is skipped.

use std::io::Write;

/// The environment variable that lets a test which cannot run here skip instead of failing.
pub const ALLOW_SKIP_ENV: &str = "VGPUD_ALLOW_SKIP";

/// Whether `VGPUD_ALLOW_SKIP=1`.
pub fn skips_allowed() -> bool {
    std::env::var_os(ALLOW_SKIP_ENV).is_some_and(|v| v == "1")
}

/// Reports that `test` cannot run here because of `reason`: prints `SKIPPED: …` to stderr
/// and returns when skips are allowed (the caller then returns), panics otherwise.
#[track_caller]
pub fn cannot_run(test: &str, reason: &str) {
    // Straight to the process's stderr, past the test harness's capture, so the line shows
    // in `cargo test`'s output also when the skipped test passes.
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {test}: {reason}");
    assert!(
        skips_allowed(),
        "{test} cannot run here: {reason}. It is not skipped silently: run it as root (CI \
         does), or set {ALLOW_SKIP_ENV}=1 to skip it"
    );
}

/// `true` when running as root; otherwise [`cannot_run`] (`SKIPPED` and `false` with
/// `VGPUD_ALLOW_SKIP=1`, else a failure). `why` says what needs root.
#[track_caller]
pub fn require_root(test: &str, why: &str) -> bool {
    if nix::unistd::Uid::effective().is_root() {
        return true;
    }
    cannot_run(test, &format!("needs root ({why})"));
    false
}
