//! Golden files: expected outputs kept under `tests/golden/`.
//!
//! [`assert_golden`] compares an output with its golden file byte for byte. Run the tests
//! with `VGPUD_REGENERATE_GOLDEN=1` to (re)write the golden files from the current output
//! instead; review the diff with `git diff tests/golden` before committing it.

use std::fs;
use std::path::{Component, Path, PathBuf};

/// The environment variable that switches [`assert_golden`] to rewriting.
pub const REGENERATE_ENV: &str = "VGPUD_REGENERATE_GOLDEN";

/// `tests/golden/` in the crate.
pub fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("golden")
}

/// Whether golden files are being rewritten (`VGPUD_REGENERATE_GOLDEN=1`).
pub fn regenerating() -> bool {
    std::env::var_os(REGENERATE_ENV).is_some_and(|v| v == "1")
}

/// Checks `actual` against `tests/golden/<relative>` byte for byte, or writes it there when
/// [`regenerating`]. Panics with the first differing line when they differ, or when the
/// golden file is missing.
#[track_caller]
pub fn assert_golden(relative: impl AsRef<Path>, actual: impl AsRef<[u8]>) {
    let relative = relative.as_ref();
    let actual = actual.as_ref();
    assert!(
        relative
            .components()
            .all(|c| matches!(c, Component::Normal(_))),
        "golden path {} must be relative, without `..`",
        relative.display()
    );
    let path = golden_dir().join(relative);

    if regenerating() {
        if fs::read(&path).ok().as_deref() == Some(actual) {
            return;
        }
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        }
        fs::write(&path, actual).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        eprintln!("golden: rewrote {}", path.display());
        return;
    }

    let expected = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) => panic!(
            "golden file {} unreadable ({e}); run with {REGENERATE_ENV}=1 to create it.\n\
             --- actual ---\n{}",
            path.display(),
            String::from_utf8_lossy(actual)
        ),
    };
    if expected == actual {
        return;
    }
    let expected = String::from_utf8_lossy(&expected);
    let actual = String::from_utf8_lossy(actual);
    panic!(
        "output differs from golden file {}\n{}\n\
         (if the change is intended, rerun with {REGENERATE_ENV}=1 and review `git diff`)\n\
         --- actual ---\n{actual}",
        path.display(),
        first_difference(&expected, &actual),
    );
}

/// A description of the first line where `expected` and `actual` differ.
fn first_difference(expected: &str, actual: &str) -> String {
    let mut e = expected.split_inclusive('\n');
    let mut a = actual.split_inclusive('\n');
    let mut line = 1;
    loop {
        match (e.next(), a.next()) {
            (Some(x), Some(y)) if x == y => line += 1,
            (x, y) => {
                return format!(
                    "first difference at line {line}:\n  expected: {:?}\n  actual:   {:?}",
                    x.unwrap_or("<end of file>"),
                    y.unwrap_or("<end of file>")
                )
            }
        }
    }
}
