//! tests/run's stage table: tests/stage-summary counts canned cargo, fuzz/run and tests/vm/run
//! output, and tests/run itself (its real script, with a stand-in `cargo` first on PATH) prints
//! the table also when a stage fails, and exits non-zero then.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `tests/stage-summary count KIND RC` on `output`, with `env`: its "PASSED FAILED SKIPPED".
fn count(kind: &str, rc: i32, output: &str, env: &[(&str, &str)]) -> (u32, u32, u32) {
    let mut cmd = Command::new(repo().join("tests/stage-summary"));
    cmd.args(["count", kind, &rc.to_string()])
        .env_remove("VGPUD_ALLOW_SKIP")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().expect("tests/stage-summary");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(output.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let n: Vec<u32> = text
        .split_whitespace()
        .map(|w| w.parse().expect("a count"))
        .collect();
    assert_eq!(n.len(), 3, "{text}");
    (n[0], n[1], n[2])
}

const CARGO_TEST: &str = "\
running 4 tests
test a ... SKIPPED: a: needs root (mount namespaces)
ok
test b ... ignored
test c ... ok
test d ... ok

test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.20s

running 7 tests
test e ... FAILED
test result: FAILED. 5 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.00s

   Doc-tests vgpud
test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
";

#[test]
fn cargo_test_output_is_summed_and_loud_skips_count_as_skipped() {
    // Without VGPUD_ALLOW_SKIP a SKIPPED line comes with a failure cargo counted already.
    assert_eq!(count("cargo-test", 101, CARGO_TEST, &[]), (8, 2, 1));
    // With it, the test that skipped is no pass: skipped, and off the passed.
    assert_eq!(
        count("cargo-test", 101, CARGO_TEST, &[("VGPUD_ALLOW_SKIP", "1")]),
        (7, 2, 2)
    );
    // A build that failed before any test ran.
    assert_eq!(
        count("cargo-test", 101, "error[E0425]: cannot find value", &[]),
        (0, 0, 0)
    );
}

#[test]
fn fuzz_and_vm_output_give_their_counts() {
    let fuzz_ok = "fuzz/run: mdevctl for 15s\nfuzz/run: 15s per target\n\
                   mdevctl 1000 execs 66 exec/s cov 12\nfuzz/run: 9 targets, no crash\n";
    assert_eq!(count("fuzz", 0, fuzz_ok, &[]), (9, 0, 0));
    let fuzz_bad = "fuzz/run: 2 of 9 targets failed: config layout (inputs in fuzz/artifacts/)\n";
    assert_eq!(count("fuzz", 1, fuzz_bad, &[]), (7, 2, 0));
    // The driver's own line comes first; tests/vm/run's total is the last.
    let vm = "PASS vm.boot\n150 passed, 0 failed\nFAIL vm.storm: slow\n161 passed, 1 failed\n";
    assert_eq!(count("vm", 1, vm, &[]), (161, 1, 0));
    assert_eq!(count("step", 0, "", &[]), (1, 0, 0));
    assert_eq!(count("step", 1, "error: lint", &[]), (0, 1, 0));
}

/// A stand-in `cargo` in `dir`: `fmt` passes, `clippy` fails, `test` prints `canned`.
fn fake_cargo(dir: &Path, canned: &str) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    std::fs::write(dir.join("canned"), canned).expect("canned");
    let script = format!(
        "#!/bin/sh\ncase \"$1\" in\n  fmt) exit 0 ;;\n  clippy) echo 'error: a lint' >&2; exit 3 ;;\n  \
         test) cat '{}'; exit 0 ;;\n  *) echo \"cargo $1: not in this test\" >&2; exit 9 ;;\nesac\n",
        dir.join("canned").display()
    );
    let cargo = bin.join("cargo");
    std::fs::write(&cargo, script).expect("cargo");
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    bin
}

fn tests_run(stages: &str, bin: &Path) -> Output {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new(repo().join("tests/run"))
        .env("TESTS_RUN_STAGES", stages)
        .env("PATH", path)
        .env_remove("VGPUD_ALLOW_SKIP")
        .output()
        .expect("tests/run")
}

/// The table's row of `stage`, as words.
fn row<'a>(stdout: &'a str, stage: &str) -> Vec<&'a str> {
    let (_, table) = stdout
        .split_once("==== tests/run: summary")
        .unwrap_or_else(|| panic!("no summary:\n{stdout}"));
    table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.first() == Some(&stage))
        .unwrap_or_else(|| panic!("no row {stage}:\n{stdout}"))
}

#[test]
fn a_failing_stage_ends_the_run_non_zero_and_the_table_is_printed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = fake_cargo(dir.path(), CARGO_TEST);
    let out = tests_run("fmt,clippy,build", &bin);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "clippy's status\n{stdout}");
    assert!(stdout.contains("==== tests/run [2/3] clippy"), "{stdout}");
    assert_eq!(row(&stdout, "fmt")[..5], ["fmt", "ok", "1", "0", "0"]);
    assert_eq!(
        row(&stdout, "clippy")[..5],
        ["clippy", "failed", "0", "1", "0"]
    );
    // The stage after the failed one is not run (the stand-in cargo would fail it otherwise).
    assert_eq!(
        row(&stdout, "build"),
        ["build", "not-run", "-", "-", "-", "-"]
    );
    assert_eq!(
        row(&stdout, "total")[..5],
        ["total", "failed", "1", "1", "0"]
    );
    assert!(
        stdout.contains("tests/run: exit status 3 (failed: clippy)"),
        "{stdout}"
    );
}

#[test]
fn the_test_stage_counts_what_cargo_test_printed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = fake_cargo(dir.path(), "test result: ok. 12 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 1.00s\n");
    let out = tests_run("test", &bin);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("==== tests/run [1/1] test"), "{stdout}");
    assert_eq!(row(&stdout, "test")[..5], ["test", "ok", "12", "0", "2"]);
    assert!(stdout.contains("tests/run: exit status 0"), "{stdout}");
}

#[test]
fn an_unknown_stage_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = fake_cargo(dir.path(), "");
    let out = tests_run("fmt,lint", &bin);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no stage lint"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("[1/"));
}
