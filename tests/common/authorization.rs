//! Who may do what, written by hand from the API's documentation (docs/api.md, "Who may do
//! what"; dbus/org.vgpud1.conf; the property reads of src/dbus/access.rs's `call_guard`), and
//! deliberately NOT computed by `vgpud::dbus::access::action_of`, the code under test: a
//! method mapped to the wrong action there must make the tests that use this table fail.
//!
//! Each entry also says how a test calls the method harmlessly with `gdbus call` (object and
//! arguments), on a simulated host of the profile `mtty` with the device [`DEV`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// What a method needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Open to every caller the bus lets through: introspection and `Peer`.
    Open,
    /// `org.vgpud1.read`.
    Read,
    /// `org.vgpud1.manage-devices`.
    ManageDevices,
    /// `org.vgpud1.configure-host`.
    ConfigureHost,
}

impl Need {
    /// The polkit action id, `None` for [`Need::Open`].
    pub fn action(self) -> Option<&'static str> {
        match self {
            Need::Open => None,
            Need::Read => Some("org.vgpud1.read"),
            Need::ManageDevices => Some("org.vgpud1.manage-devices"),
            Need::ConfigureHost => Some("org.vgpud1.configure-host"),
        }
    }
}

/// The device the calls name (tests create it first, as root, with this UUID).
pub const DEV: &str = "a1b2c3d4-0000-4000-8000-000000000001";
/// The simulated GPU of the profile `mtty`.
pub const GPU: &str = "mtty";

/// One method: interface, member, what it needs, the object called, gdbus arguments
/// (`{DEV}` and `{NONE}`, an empty `a{sv}`, are filled in by [`calls`]).
pub type Entry = (&'static str, &'static str, Need, &'static str, &'static str);

const MANAGER: &str = "org.vgpud1.Manager";
const NVIDIA: &str = "org.vgpud1.Nvidia";
const LAYOUTS: &str = "org.vgpud1.Layouts";
const PROPERTIES: &str = "org.freedesktop.DBus.Properties";
const OBJECT_MANAGER: &str = "org.freedesktop.DBus.ObjectManager";
const INTROSPECTABLE: &str = "org.freedesktop.DBus.Introspectable";
const PEER: &str = "org.freedesktop.DBus.Peer";

/// The table. Every method of the API is here, and nothing else (tests/authorization_spec.rs
/// checks both against dbus/org.vgpud1.xml and the live introspection).
pub const SPEC: &[Entry] = &[
    // docs/api.md: org.vgpud1.read.
    (MANAGER, "ListGpus", Need::Read, "/org/vgpud1", ""),
    (MANAGER, "ListTypes", Need::Read, "/org/vgpud1", ""),
    (MANAGER, "ListDevices", Need::Read, "/org/vgpud1", ""),
    (
        MANAGER,
        "GetCapacity",
        Need::Read,
        "/org/vgpud1",
        "mtty-1 {NONE}",
    ),
    (
        MANAGER,
        "GetTypeInfo",
        Need::Read,
        "/org/vgpud1",
        "mtty-1 {NONE}",
    ),
    (MANAGER, "GetHostdevXml", Need::Read, "/org/vgpud1", "{DEV}"),
    (
        MANAGER,
        "RenderHostdevXml",
        Need::Read,
        "/org/vgpud1",
        "{DEV} {NONE}",
    ),
    (
        MANAGER,
        "RenderDomain",
        Need::Read,
        "/org/vgpud1",
        "vm1 \"['{DEV}']\" {NONE}",
    ),
    (
        NVIDIA,
        "ListMigProfiles",
        Need::Read,
        "/org/vgpud1/nvidia",
        "mtty",
    ),
    (
        NVIDIA,
        "GetMetrics",
        Need::Read,
        "/org/vgpud1/nvidia",
        "mtty",
    ),
    (
        LAYOUTS,
        "ListLayouts",
        Need::Read,
        "/org/vgpud1/layouts",
        "",
    ),
    (
        LAYOUTS,
        "DiffLayout",
        Need::Read,
        "/org/vgpud1/layouts",
        "absent",
    ),
    (
        MANAGER,
        "GetDemand",
        Need::Read,
        "/org/vgpud1",
        "mtty-1 {NONE}",
    ),
    (
        MANAGER,
        "GetForecast",
        Need::Read,
        "/org/vgpud1",
        "mtty-1 {NONE}",
    ),
    // docs/api.md: org.vgpud1.manage-devices.
    (
        MANAGER,
        "CreateDevice",
        Need::ManageDevices,
        "/org/vgpud1",
        "mtty-1 {NONE}",
    ),
    (
        MANAGER,
        "RemoveDevice",
        Need::ManageDevices,
        "/org/vgpud1",
        "{DEV} {NONE}",
    ),
    (
        MANAGER,
        "ModifyDevice",
        Need::ManageDevices,
        "/org/vgpud1",
        "{DEV} \"{'persistent': <false>}\"",
    ),
    (
        MANAGER,
        "StartDevice",
        Need::ManageDevices,
        "/org/vgpud1",
        "{DEV} {NONE}",
    ),
    (
        MANAGER,
        "StopDevice",
        Need::ManageDevices,
        "/org/vgpud1",
        "{DEV} {NONE}",
    ),
    (
        MANAGER,
        "AttachDevice",
        Need::ManageDevices,
        "/org/vgpud1",
        "{DEV} vm1 {NONE}",
    ),
    (
        MANAGER,
        "DetachDevice",
        Need::ManageDevices,
        "/org/vgpud1",
        "{DEV} vm1 {NONE}",
    ),
    // docs/api.md: org.vgpud1.configure-host (ApplyLayout "a dry run too").
    (
        MANAGER,
        "SetVfCount",
        Need::ConfigureHost,
        "/org/vgpud1",
        "mtty 'uint32 0' {NONE}",
    ),
    (
        MANAGER,
        "SetHeterogeneousMode",
        Need::ConfigureHost,
        "/org/vgpud1",
        "mtty true {NONE}",
    ),
    (
        NVIDIA,
        "SetMigMode",
        Need::ConfigureHost,
        "/org/vgpud1/nvidia",
        "mtty true {NONE}",
    ),
    (
        NVIDIA,
        "CreateGpuInstance",
        Need::ConfigureHost,
        "/org/vgpud1/nvidia",
        "mtty 1g.10gb {NONE}",
    ),
    (
        NVIDIA,
        "DestroyGpuInstance",
        Need::ConfigureHost,
        "/org/vgpud1/nvidia",
        "mtty 'uint32 1' {NONE}",
    ),
    (
        NVIDIA,
        "SetScheduler",
        Need::ConfigureHost,
        "/org/vgpud1/nvidia",
        "mtty \"{'policy': <'equal-share'>}\"",
    ),
    (
        LAYOUTS,
        "ApplyLayout",
        Need::ConfigureHost,
        "/org/vgpud1/layouts",
        "absent \"{'dry_run': <true>}\"",
    ),
    // Property reads and managed objects carry owners: org.vgpud1.read. Writing a property
    // needs the strictest action (there is no writable property).
    // (On the GPU, which exists in every test; zbus answers UnknownObject before any check.)
    (
        PROPERTIES,
        "Get",
        Need::Read,
        "/org/vgpud1/gpu/mtty",
        "org.vgpud1.Gpu Model",
    ),
    (
        PROPERTIES,
        "GetAll",
        Need::Read,
        "/org/vgpud1/gpu/mtty",
        "org.vgpud1.Gpu",
    ),
    (
        PROPERTIES,
        "Set",
        Need::ConfigureHost,
        "/org/vgpud1/gpu/mtty",
        "org.vgpud1.Gpu HeterogeneousMode '<true>'",
    ),
    (
        OBJECT_MANAGER,
        "GetManagedObjects",
        Need::Read,
        "/org/vgpud1",
        "",
    ),
    // Open.
    (INTROSPECTABLE, "Introspect", Need::Open, "/org/vgpud1", ""),
    (PEER, "Ping", Need::Open, "/org/vgpud1", ""),
    (PEER, "GetMachineId", Need::Open, "/org/vgpud1", ""),
];

/// What `interface.member` needs, by the table; panics for a method the table lacks.
pub fn need(interface: &str, member: &str) -> Need {
    SPEC.iter()
        .find(|e| e.0 == interface && e.1 == member)
        .map(|e| e.2)
        .unwrap_or_else(|| panic!("{interface}.{member} is not in tests/common/authorization.rs"))
}

/// A short label for a method: `Manager.ListGpus`, `Properties.Get`.
pub fn label(interface: &str, member: &str) -> String {
    format!(
        "{}.{member}",
        interface.rsplit('.').next().unwrap_or(interface)
    )
}

/// The calls of the table for tests/polkit/: `LABEL<TAB>INTERFACE.MEMBER<TAB>OBJECT<TAB>ARGS`
/// lines, one per entry.
pub fn calls() -> String {
    SPEC.iter()
        .map(|&(interface, member, _, object, args)| {
            let fill = |s: &str| s.replace("{DEV}", DEV).replace("{NONE}", "'@a{sv} {}'");
            format!(
                "{}\t{interface}.{member}\t{}\t{}\n",
                label(interface, member),
                fill(object),
                fill(args)
            )
        })
        .collect()
}

/// Every `(interface, member)` of the `<method>`s of an introspection document.
pub fn methods_of(xml: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for block in xml.split("<interface name=\"").skip(1) {
        let Some((interface, rest)) = block.split_once('"') else {
            continue;
        };
        let body = rest.split("</interface>").next().unwrap_or(rest);
        for method in body.split("<method name=\"").skip(1) {
            if let Some(name) = method.split('"').next() {
                out.insert((interface.to_string(), name.to_string()));
            }
        }
    }
    out
}

/// The methods of the checked-in introspection data, dbus/org.vgpud1.xml.
pub fn documented_methods() -> BTreeSet<(String, String)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("dbus/org.vgpud1.xml");
    let xml = std::fs::read_to_string(&path).expect("dbus/org.vgpud1.xml");
    methods_of(&xml)
}

/// The table's `(interface, member)` pairs.
pub fn table_methods() -> BTreeSet<(String, String)> {
    SPEC.iter()
        .map(|e| (e.0.to_string(), e.1.to_string()))
        .collect()
}

/// The answers of a run of a tests/polkit/ script: `(caller, label)` → `(outcome, message)`,
/// from its `RESULT` lines (tests/polkit/system-bus.sh `call_each`), and its whole output.
pub struct NamespaceRun {
    /// Each call's outcome (`ok` or the D-Bus error name) and message.
    pub results: BTreeMap<(String, String), (String, String)>,
    /// What the script printed.
    pub stdout: String,
}

/// Runs `tests/polkit/SCRIPT REPO WORK VGPUD SIMROOT ARGS…` in a private mount namespace
/// (`unshare --mount`), two minutes at most, and fails the test if the script fails.
pub fn run_in_namespace(script: &str, simroot: &Path, args: &[&Path]) -> NamespaceRun {
    let work = tempfile::tempdir().expect("tempdir");
    let repo = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("timeout")
        .args(["120", "unshare", "--mount", "--propagation", "private"])
        .arg("bash")
        .arg(format!("{repo}/tests/polkit/{script}"))
        .arg(repo)
        .arg(work.path())
        .arg(super::daemon::vgpud_bin())
        .arg(simroot)
        .args(args)
        .output()
        .expect("unshare (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the namespace run failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let mut results = BTreeMap::new();
    for line in stdout.lines().filter(|l| l.starts_with("RESULT\t")) {
        let f: Vec<&str> = line.splitn(5, '\t').collect();
        results.insert(
            (f[1].to_string(), f[2].to_string()),
            (f[3].to_string(), f.get(4).unwrap_or(&"").to_string()),
        );
    }
    NamespaceRun { results, stdout }
}
