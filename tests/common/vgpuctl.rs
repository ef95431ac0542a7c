//! The vgpuctl binary next to vgpud, built once per test binary (`cargo build -p vgpuctl`:
//! vgpuctl is a package of its own, which `cargo test` of this crate would not rebuild, so a
//! stale one is never tested).

use std::path::{Path, PathBuf};

/// Its path, after building it.
pub fn bin() -> PathBuf {
    static BUILT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let built = BUILT.get_or_init(|| super::nvml::cargo_build("vgpuctl"));
    if let Err(e) = built {
        panic!("{e}");
    }
    let path = Path::new(super::daemon::vgpud_bin()).with_file_name("vgpuctl");
    assert!(
        path.is_file(),
        "{} is missing after the build",
        path.display()
    );
    path
}
