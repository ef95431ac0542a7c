//! The oVirt VDSM hook (`integrations/ovirt/`), run the way VDSM runs hooks
//! (vdsm/common/hooks.py `_runHooksDir`): the executable in its hook directory, the domain
//! XML in a file named by `_hook_domxml`, the VM's custom properties and `vmId` in the
//! environment, the rewritten XML read back from that file, the exit code judged (0 ok, 1
//! and 2 failures; a failed before_vm_start fails the VM's start). The XML is the one oVirt
//! engine 4.5 sends (`tests/data/ovirt/engine-4.5-vm.xml`); vgpud runs on a simulated host
//! on a private bus, given to the hook as DBUS_SYSTEM_BUS_ADDRESS. The hook runs under
//! Debian's `/usr/bin/python3` with python3-dbus, as on a VDSM host, without VDSM's
//! `hooking` module (it uses it where it can import it).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::setup::Setup;
use vgpud_client::{Client, Options};

/// Debian's interpreter, with python3-dbus.
const PYTHON: &str = "/usr/bin/python3";

/// The VM of the recorded XML.
const VM_UUID: &str = "5b3e1a7c-2f4d-4a8e-9c61-7d0e3b2a9f15";
const VM_NAME: &str = "vdi-win10-07";

/// The hook's fixed namespace for device UUIDs.
const NAMESPACE: &str = "aba631ce-a174-43ca-8fc5-c04cea8d38a8";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The UUID the hook derives for vGPU `index` of the recorded VM.
fn derived(index: usize) -> String {
    let ns = uuid::Uuid::parse_str(NAMESPACE).expect("namespace");
    uuid::Uuid::new_v5(&ns, format!("{VM_UUID}/{index}").as_bytes()).to_string()
}

/// Fails, never skips, without `/usr/bin/python3` and python3-dbus.
fn require_python() {
    let out = Command::new(PYTHON)
        .args(["-c", "import dbus"])
        .env_remove("PYTHONPATH")
        .env_remove("PYTHONHOME")
        .output()
        .unwrap_or_else(|e| panic!("{PYTHON} cannot run ({e}): apt-get install python3"));
    assert!(
        out.status.success(),
        "`import dbus` fails under {PYTHON}: install the Debian package python3-dbus \
         (tools/install-deps does):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A copy of the recorded domain XML, as VDSM writes it to a temporary file.
fn domxml(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::copy(repo().join("tests/data/ovirt/engine-4.5-vm.xml"), &path).expect("copy xml");
    path
}

/// Runs `integrations/ovirt/PHASE/50_vgpud` as VDSM does; `props` are the VM's custom
/// properties.
fn run_hook(phase: &str, bus: &str, xml: &Path, props: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(PYTHON);
    cmd.arg(
        repo()
            .join("integrations/ovirt")
            .join(phase)
            .join("50_vgpud"),
    )
    .env_remove("PYTHONPATH")
    .env_remove("PYTHONHOME")
    .env_remove("vgpud")
    .env_remove("mdev_type")
    .env_remove("vgpud_params")
    .env("DBUS_SYSTEM_BUS_ADDRESS", bus)
    .env("_hook_domxml", xml)
    .env("vmId", VM_UUID);
    for (k, v) in props {
        cmd.env(k, v);
    }
    cmd.output().expect("run the hook")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs the hook and requires exit code 0.
fn hook_ok(phase: &str, s: &Setup, xml: &Path, props: &[(&str, &str)]) -> String {
    let out = run_hook(phase, &s.bus.address, xml, props);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{phase} failed: {}",
        stderr(&out)
    );
    stderr(&out)
}

/// One `<hostdev>` of a domain.
#[derive(Debug, Default, Clone, PartialEq)]
struct Hostdev {
    ty: String,
    managed: Option<String>,
    display: Option<String>,
    ramfb: Option<String>,
    /// The mdev UUID, or the PCI address `dddd:bb:ss.f`.
    source: String,
}

/// The domain's hostdevs (checked to be in `<devices>`).
fn hostdevs(xml: &str) -> Vec<Hostdev> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut out = Vec::new();
    let mut stack: Vec<String> = Vec::new();
    let mut current: Option<Hostdev> = None;
    loop {
        let ev = reader.read_event().expect("well-formed XML");
        let (start, empty) = match &ev {
            Event::Start(e) => (Some(e.clone()), false),
            Event::Empty(e) => (Some(e.clone()), true),
            _ => (None, false),
        };
        if let Some(e) = start {
            let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
            let attrs: std::collections::HashMap<String, String> = e
                .attributes()
                .map(|a| {
                    let a = a.expect("attribute");
                    (
                        String::from_utf8_lossy(a.key.as_ref()).into_owned(),
                        a.unescape_value().expect("value").into_owned(),
                    )
                })
                .collect();
            let parent = stack.last().map(String::as_str);
            if name == "hostdev" {
                assert_eq!(parent, Some("devices"), "a hostdev outside <devices>");
                current = Some(Hostdev {
                    ty: attrs.get("type").cloned().unwrap_or_default(),
                    managed: attrs.get("managed").cloned(),
                    display: attrs.get("display").cloned(),
                    ramfb: attrs.get("ramfb").cloned(),
                    source: String::new(),
                });
            } else if name == "address" && parent == Some("source") {
                if let Some(h) = current.as_mut() {
                    h.source = match attrs.get("uuid") {
                        Some(u) => u.clone(),
                        None => {
                            let n = |k: &str| {
                                let v = attrs.get(k).map(String::as_str).unwrap_or("0");
                                u32::from_str_radix(v.trim_start_matches("0x"), 16).expect("hex")
                            };
                            format!(
                                "{:04x}:{:02x}:{:02x}.{:x}",
                                n("domain"),
                                n("bus"),
                                n("slot"),
                                n("function")
                            )
                        }
                    };
                }
            }
            if empty {
                if name == "hostdev" {
                    out.extend(current.take());
                }
            } else {
                stack.push(name);
            }
        }
        match ev {
            Event::End(e) => {
                if e.name().as_ref() == b"hostdev" {
                    out.extend(current.take());
                }
                stack.pop();
            }
            Event::Eof => break,
            _ => {}
        }
    }
    out
}

/// Validates the rewritten domain with libvirt's schema, after dropping the two things the
/// engine writes that the schema lacks (see the comment in the recorded XML).
fn validate(xml: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("domain.xml");
    let fixed = xml
        .replace(
            "<seclabel model=\"dac\" type=\"none\" relabel=\"no\"",
            "<seclabel model=\"dac\" relabel=\"no\"",
        )
        .replace("<source file=\"\" ", "<source ");
    std::fs::write(&path, fixed).expect("write");
    let out = Command::new("virt-xml-validate")
        .arg(&path)
        .arg("domain")
        .output()
        .expect("virt-xml-validate (Debian package libvirt-clients)");
    assert!(
        out.status.success(),
        "virt-xml-validate: {}{}\n{xml}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn client(s: &Setup) -> Client {
    Client::from_connection(s.conn.clone())
        .await
        .expect("client")
}

/// The devices vgpud lists, as (uuid, gpu, owner).
async fn devices(c: &Client) -> Vec<(String, String, String)> {
    let mut v: Vec<_> = c
        .list_devices()
        .await
        .expect("ListDevices")
        .into_iter()
        .map(|d| (d.uuid, d.gpu, d.owner))
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn before_vm_start_makes_the_vgpus_idempotently_and_after_vm_destroy_removes_them() {
    require_python();
    let s = Setup::new(&["nvidia-turing"]).await;
    let c = client(&s).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let props = [("vgpud", "RTX6000-4Q,RTX6000-4Q")];

    // A VM without the property: the hook leaves the XML alone and asks vgpud nothing.
    let plain = domxml(dir.path(), "plain.xml");
    let before = std::fs::read_to_string(&plain).expect("read");
    hook_ok("before_vm_start", &s, &plain, &[]);
    assert_eq!(std::fs::read_to_string(&plain).expect("read"), before);
    hook_ok("after_vm_destroy", &s, &plain, &[]);
    assert!(devices(&c).await.is_empty());

    let xml = domxml(dir.path(), "first.xml");
    let log = hook_ok("before_vm_start", &s, &xml, &props);
    eprintln!("{log}");
    let text = std::fs::read_to_string(&xml).expect("read back");
    validate(&text);
    let hd = hostdevs(&text);
    let want = [derived(0), derived(1)];
    assert_eq!(
        hd.iter().map(|h| h.source.clone()).collect::<Vec<_>>(),
        want,
        "one mdev hostdev per vGPU, with the derived UUIDs: {text}"
    );
    for (i, h) in hd.iter().enumerate() {
        assert_eq!(h.ty, "mdev");
        assert_eq!(h.display.as_deref(), Some("on"), "display on by default");
        let ramfb = if i == 0 { Some("on") } else { None };
        assert_eq!(h.ramfb.as_deref(), ramfb, "ramfb on the first vGPU only");
    }
    // The rest of the engine's XML is kept.
    assert!(text.contains("<ovirt-vm:vgpud>RTX6000-4Q,RTX6000-4Q|separate</ovirt-vm:vgpud>"));
    assert!(text.contains("vdsm-no-mac-spoofing"));

    let listed = devices(&c).await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    for (uuid, _gpu, owner) in &listed {
        assert!(want.contains(uuid));
        assert_eq!(owner, VM_NAME, "the owner is the VM's name");
        let d = c.device(uuid).await.expect("device");
        assert!(!d.persistent, "transient");
        assert!(d.active);
        assert_eq!(d.type_name, "GRID RTX6000-4Q");
    }

    // VDSM retries the start with a fresh copy: the same devices, nothing more.
    let again = domxml(dir.path(), "again.xml");
    hook_ok("before_vm_start", &s, &again, &props);
    assert_eq!(devices(&c).await, listed, "idempotent");
    assert_eq!(
        hostdevs(&std::fs::read_to_string(&again).expect("read")),
        hd
    );
    // The hook over its own output: the hostdevs are replaced, not added twice.
    hook_ok("before_vm_start", &s, &xml, &props);
    assert_eq!(
        hostdevs(&std::fs::read_to_string(&xml).expect("read")),
        hd,
        "no hostdev twice"
    );
    assert_eq!(devices(&c).await, listed);

    // A device of another VM stays; after_vm_destroy removes this VM's.
    let (other, _) = c
        .create_device("RTX6000-4Q", &Options::new().str("owner", "other-vm"))
        .await
        .expect("another VM's vGPU");
    hook_ok("after_vm_destroy", &s, &xml, &props);
    let left = devices(&c).await;
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].0, other);
    // Again (VDSM's own teardown may have removed an mdev first): nothing to do, success.
    hook_ok("after_vm_destroy", &s, &xml, &props);
}

#[tokio::test]
async fn compact_packs_separate_spreads_and_nodisplay_drops_the_display() {
    require_python();
    let s = Setup::new(&["nvidia-turing"]).await;
    let c = client(&s).await;
    let dir = tempfile::tempdir().expect("tempdir");

    let xml = domxml(dir.path(), "separate.xml");
    hook_ok(
        "before_vm_start",
        &s,
        &xml,
        &[
            (
                "vgpud",
                "nodisplay,RTX6000-4Q|separate,RTX6000-4Q|separate|frame_rate_limiter=0",
            ),
            ("vgpud_params", "frame_rate_limiter=1"),
        ],
    );
    let hd = hostdevs(&std::fs::read_to_string(&xml).expect("read"));
    assert_eq!(hd.len(), 2);
    for h in &hd {
        assert_eq!(h.display, None, "nodisplay: {h:?}");
        assert_eq!(h.ramfb, None, "nodisplay: {h:?}");
    }
    let gpus: std::collections::BTreeSet<String> =
        devices(&c).await.into_iter().map(|d| d.1).collect();
    assert_eq!(gpus.len(), 2, "separate (spread): one vGPU on each GPU");
    let params = |d: &vgpud_client::DeviceDetails| d.attributes.get("nvidia/vgpu_params").cloned();
    let d0 = c.device(&derived(0)).await.expect("device");
    let d1 = c.device(&derived(1)).await.expect("device");
    assert_eq!(
        params(&d0).as_deref(),
        Some("frame_rate_limiter=1"),
        "vgpud_params for a vGPU that names none"
    );
    assert_eq!(
        params(&d1).as_deref(),
        Some("frame_rate_limiter=0"),
        "its own"
    );
    hook_ok("after_vm_destroy", &s, &xml, &[("vgpud", "x")]);
    assert!(
        devices(&c).await.is_empty(),
        "removed by derived UUID and owner"
    );

    let xml = domxml(dir.path(), "compact.xml");
    hook_ok(
        "before_vm_start",
        &s,
        &xml,
        &[("mdev_type", "RTX6000-4Q|compact,RTX6000-4Q|compact")],
    );
    let gpus: std::collections::BTreeSet<String> =
        devices(&c).await.into_iter().map(|d| d.1).collect();
    assert_eq!(gpus.len(), 1, "compact (pack): both vGPUs on one GPU");
    hook_ok("after_vm_destroy", &s, &xml, &[("mdev_type", "x")]);
    assert!(devices(&c).await.is_empty());
}

#[tokio::test]
async fn no_capacity_fails_the_start_clearly_and_leaves_nothing() {
    require_python();
    let s = Setup::new(&["nvidia-turing"]).await;
    let c = client(&s).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let xml = domxml(dir.path(), "full.xml");
    let before = std::fs::read_to_string(&xml).expect("read");
    // Two RTX 6000 take one 24Q each: the third cannot be had.
    let out = run_hook(
        "before_vm_start",
        &s.bus.address,
        &xml,
        &[("vgpud", "RTX6000-24Q,RTX6000-24Q,RTX6000-24Q")],
    );
    let err = stderr(&out);
    eprintln!("{err}");
    assert_eq!(
        out.status.code(),
        Some(2),
        "exit 2: VDSM fails the start and runs no further hooks: {err}"
    );
    assert!(
        err.contains("no capacity for vGPU 3 of 3 (RTX6000-24Q) for VM vdi-win10-07"),
        "{err}"
    );
    assert!(devices(&c).await.is_empty(), "the two made are removed");
    assert_eq!(
        std::fs::read_to_string(&xml).expect("read"),
        before,
        "the XML is left as it was"
    );

    // A type nobody offers and a malformed property fail the same way, saying why.
    let out = run_hook(
        "before_vm_start",
        &s.bus.address,
        &xml,
        &[("vgpud", "NoSuchType-1Q")],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("org.vgpud1.Error.NotFound"),
        "{}",
        stderr(&out)
    );
    let out = run_hook(
        "before_vm_start",
        &s.bus.address,
        &xml,
        &[("vgpud", "RTX6000-4Q|sideways")],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("sideways"), "{}", stderr(&out));

    // vgpud not there: a clear failure too.
    let out = run_hook(
        "before_vm_start",
        "unix:path=/nonexistent/bus",
        &xml,
        &[("vgpud", "RTX6000-4Q")],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot reach vgpud on the system bus"),
        "{}",
        stderr(&out)
    );
    assert!(devices(&c).await.is_empty());
}

#[tokio::test]
async fn an_sriov_vgpu_becomes_a_pci_hostdev() {
    require_python();
    let s = Setup::new(&["nvidia-l40s"]).await;
    let c = client(&s).await;
    let gpus = c.list_gpus().await.expect("ListGpus");
    for g in &gpus {
        c.set_vf_count(&g.address, 32, &Options::new())
            .await
            .expect("SetVfCount");
    }
    let types = c.list_types().await.expect("ListTypes");
    let ty = types
        .iter()
        .find(|t| t.name.ends_with("-4Q"))
        .unwrap_or_else(|| panic!("a 4Q type on the L40S: {types:?}"))
        .name
        .clone();
    let dir = tempfile::tempdir().expect("tempdir");
    let xml = domxml(dir.path(), "sriov.xml");
    hook_ok("before_vm_start", &s, &xml, &[("vgpud", &ty)]);
    let text = std::fs::read_to_string(&xml).expect("read");
    validate(&text);
    let hd = hostdevs(&text);
    assert_eq!(hd.len(), 1, "{text}");
    let d = c.device(&derived(0)).await.expect("device");
    assert_eq!(d.kind, "sriov-vgpu");
    assert_eq!(hd[0].ty, "pci", "the VF as a PCI hostdev: {text}");
    assert_eq!(
        hd[0].managed.as_deref(),
        Some("no"),
        "the VF stays on the NVIDIA driver"
    );
    assert_eq!(hd[0].source, d.address, "the device's VF");
    assert_eq!(hd[0].display, None);

    // Again: the same VF, the hostdev replaced, not added.
    hook_ok("before_vm_start", &s, &xml, &[("vgpud", &ty)]);
    assert_eq!(hostdevs(&std::fs::read_to_string(&xml).expect("read")), hd);

    hook_ok("after_vm_destroy", &s, &xml, &[("vgpud", &ty)]);
    assert!(devices(&c).await.is_empty());
}

/// The real polkitd and a system-type dbus-daemon with the project's policy files, in a
/// private mount namespace (tests/polkit/system-bus.sh, as tests/polkit.rs), and the hook run as VDSM's
/// user would be: not root, a member of the group vgpud; then as nobody, who is refused.
/// Arguments: REPO WORK VGPUD SIMROOT XML VM_UUID. Prints `RESULT<TAB>who<TAB>phase<TAB>rc`,
/// `STDERR<TAB>who<TAB>phase<TAB>text`, `HOSTDEVS<TAB>who<TAB>n` and `DEVICES<TAB>when<TAB>n`.
const NAMESPACE_SCRIPT: &str = r#"
set -euo pipefail
repo=$1 work=$2 vgpud=$3 simroot=$4 xml=$5 vm=$6
. "$repo/tests/polkit/system-bus.sh"
start_system_bus "$repo" "$work" "$vgpud" "$simroot" vdsm-test 64910

devices() {
  n=$(busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" call org.vgpud1 /org/vgpud1 org.vgpud1.Manager ListDevices | awk '{print $2}')
  printf 'DEVICES\t%s\t%s\n' "$1" "$n"
}
hook() { # WHO UID PHASE
  who=$1 uid=$2 phase=$3
  [ -f "$work/$who.xml" ] || { cp "$xml" "$work/$who.xml"; chown "$uid:$uid" "$work/$who.xml"; }
  case $who in
    vdsm) as=(setpriv --reuid=vdsm-test --regid=vdsm-test --init-groups) ;;
    nobody) as=(setpriv --reuid=65534 --regid=65534 --clear-groups) ;;
  esac
  rc=0
  "${as[@]}" env -u PYTHONPATH -u PYTHONHOME _hook_domxml="$work/$who.xml" vmId="$vm" \
    vgpud="RTX6000-4Q,RTX6000-4Q|separate" \
    /usr/bin/python3 "$repo/integrations/ovirt/$phase/50_vgpud" 2>"$work/err" || rc=$?
  printf 'RESULT\t%s\t%s\t%s\n' "$who" "$phase" "$rc"
  printf 'STDERR\t%s\t%s\t%s\n' "$who" "$phase" "$(tr '\n\t' '  ' <"$work/err")"
  printf 'HOSTDEVS\t%s\t%s\n' "$who" "$(grep -o '<hostdev ' "$work/$who.xml" | wc -l)"
}
echo "READY polkitd and vgpud are on the bus"
hook vdsm 64910 before_vm_start
devices after-start
hook vdsm 64910 after_vm_destroy
devices after-destroy
hook nobody 65534 before_vm_start
devices after-nobody
"#;

#[test]
fn the_hook_works_as_a_member_of_the_group_vgpud_under_the_real_polkit_policy() {
    let test = "the_hook_works_as_a_member_of_the_group_vgpud_under_the_real_polkit_policy";
    if !common::skip::require_root(
        test,
        "to make a mount namespace, bind-mount polkit's files and run the hook as other users",
    ) {
        return;
    }
    require_python();
    assert!(
        Path::new("/usr/lib/polkit-1/polkitd").exists(),
        "the real polkitd is needed (Debian package polkitd; tools/install-deps installs it)"
    );
    let host = common::daemon::TestHost::new(&["nvidia-turing"]);
    let work = tempfile::tempdir().expect("tempdir");
    let script = work.path().join("namespace.sh");
    std::fs::write(&script, NAMESPACE_SCRIPT).expect("script");
    let ns_work = work.path().join("ns");
    std::fs::create_dir(&ns_work).expect("ns dir");
    let out = Command::new("timeout")
        .args([
            "120",
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "bash",
        ])
        .arg(&script)
        .arg(repo())
        .arg(&ns_work)
        .arg(common::daemon::vgpud_bin())
        .arg(&host.root)
        .arg(repo().join("tests/data/ovirt/engine-4.5-vm.xml"))
        .arg(VM_UUID)
        .output()
        .expect("unshare (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the namespace run failed ({}):\n{stdout}\n{err}",
        out.status
    );
    let field = |kind: &str, key: &[&str]| -> String {
        stdout
            .lines()
            .map(|l| l.split('\t').collect::<Vec<_>>())
            .find(|f| f[0] == kind && f[1..=key.len()] == *key)
            .and_then(|f| f.get(key.len() + 1).map(|s| s.to_string()))
            .unwrap_or_else(|| panic!("no {kind} {key:?} line:\n{stdout}\n{err}"))
    };
    eprintln!("{stdout}");
    let ctx = format!("\n{stdout}");
    assert_eq!(
        field("RESULT", &["vdsm", "before_vm_start"]),
        "0",
        "VDSM's user in the group vgpud starts the VM{ctx}"
    );
    assert_eq!(field("HOSTDEVS", &["vdsm"]), "2", "{ctx}");
    assert_eq!(field("DEVICES", &["after-start"]), "2", "{ctx}");
    assert_eq!(field("RESULT", &["vdsm", "after_vm_destroy"]), "0", "{ctx}");
    assert_eq!(field("DEVICES", &["after-destroy"]), "0", "{ctx}");
    // Someone outside the group is refused, and told what to do.
    assert_eq!(
        field("RESULT", &["nobody", "before_vm_start"]),
        "2",
        "{ctx}"
    );
    let refusal = field("STDERR", &["nobody", "before_vm_start"]);
    assert!(
        refusal.contains("org.freedesktop.DBus.Error.AccessDenied")
            && refusal.contains("usermod -aG vgpud vdsm"),
        "{refusal}{ctx}"
    );
    assert_eq!(field("HOSTDEVS", &["nobody"]), "0", "{ctx}");
    assert_eq!(field("DEVICES", &["after-nobody"]), "0", "{ctx}");
}
