//! vgpud-kubevirt end to end (issue #26): the real plugin binary on a simulated host with a
//! real vgpud on a private dbus-daemon, against a fake kubelet in Python
//! (`tests/kubevirt/fake_kubelet.py`, grpcio with stubs generated here from the plugin's
//! vendored protos by `grpc_tools.protoc`, so another gRPC stack reads the plugin's answers).
//!
//! What virt-launcher parses is KubeVirt's, quoted where it is checked: the variable's name is
//! `ResourceNameToEnvVar(prefix, resourceName)` (kubevirt/kubevirt pkg/util/util.go:
//! `strings.ToUpper`, then `/` and `.` as `_`, joined to the prefix with `_`), the prefixes
//! `MDEV_PCI_RESOURCE` and `PCI_RESOURCE` (pkg/virt-launcher/virtwrap/device/hostdevice/
//! generic/addresspool.go), and the value is split on `,` after one trailing `,` is trimmed
//! (`AddressPool.load`, pkg/virt-launcher/virtwrap/device/hostdevice/addresspool.go).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::daemon::{Daemon, Policy, TestBus, TestHost};

/// The on-demand resource of the tests: `GRID RTX6000-4Q` (nvidia-259), 6 per 24 GB GPU.
const R4Q: &str = "nvidia.com/GRID_RTX6000-4Q";
/// The pool resource: `GRID RTX6000-2Q`.
const R2Q: &str = "nvidia.com/GRID_RTX6000-2Q";
/// What virt-launcher reads for R4Q: `ResourceNameToEnvVar("MDEV_PCI_RESOURCE", R4Q)`
/// written out by hand (upper case, `/` and `.` as `_`).
const ENV_4Q: &str = "MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_RTX6000-4Q";
const OWNER: &str = "vgpud-kubevirt";

/// The fake kubelet, the plugin, vgpud and its bus.
struct Kube {
    py: Child,
    py_in: ChildStdin,
    py_out: BufReader<ChildStdout>,
    plugin: Child,
    plugin_log: PathBuf,
    plugin_dir: PathBuf,
    bus: TestBus,
    _daemon: Daemon,
    _host: TestHost,
    _dir: tempfile::TempDir,
}

fn python_ready(test: &str) -> bool {
    let ok = Command::new("/usr/bin/python3")
        .args(["-c", "import grpc, grpc_tools.protoc"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        common::skip::cannot_run(
            test,
            "python3-grpcio and python3-grpc-tools are missing (tools/install-deps)",
        );
    }
    ok
}

fn plugin_bin() -> PathBuf {
    static BUILT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    if let Err(e) = BUILT.get_or_init(|| common::nvml::cargo_build("vgpud-kubevirt")) {
        panic!("{e}");
    }
    Path::new(common::daemon::vgpud_bin()).with_file_name("vgpud-kubevirt")
}

impl Kube {
    async fn start(resources: &str, grace_s: u64) -> Kube {
        Self::start_on("nvidia-turing", resources, grace_s, |_| {}).await
    }

    /// On a host of `profile`, with `prepare` run on vgpud's bus before the plugin starts.
    async fn start_on(
        profile: &str,
        resources: &str,
        grace_s: u64,
        prepare: impl FnOnce(&TestBus),
    ) -> Kube {
        let host = TestHost::new(&[profile]);
        let bus = TestBus::start(Policy::Open);
        let daemon = Daemon::start(&bus, &host).await;
        prepare(&bus);
        let dir = tempfile::tempdir().expect("tempdir");
        let plugin_dir = dir.path().join("device-plugins");
        std::fs::create_dir(&plugin_dir).expect("plugin dir");
        let pods = dir.path().join("pod-resources.sock");
        let stubs = dir.path().join("stubs");
        std::fs::create_dir(&stubs).expect("stubs dir");
        let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/kubevirt/proto");
        let out = Command::new("/usr/bin/python3")
            .args(["-m", "grpc_tools.protoc", "-I"])
            .arg(&proto)
            .arg(format!("--python_out={}", stubs.display()))
            .arg(format!("--grpc_python_out={}", stubs.display()))
            .args([
                "deviceplugin/v1beta1/api.proto",
                "podresources/v1/api.proto",
            ])
            .output()
            .expect("run grpc_tools.protoc");
        assert!(
            out.status.success(),
            "protoc: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut py = Command::new("/usr/bin/python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kubevirt/fake_kubelet.py"))
            .arg(&stubs)
            .arg(&plugin_dir)
            .arg(&pods)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the fake kubelet");
        let py_in = py.stdin.take().expect("stdin");
        let mut py_out = BufReader::new(py.stdout.take().expect("stdout"));
        let mut line = String::new();
        py_out.read_line(&mut line).expect("fake kubelet ready");
        assert!(line.contains("ready"), "fake kubelet: {line}");

        let config = dir.path().join("kubevirt.toml");
        std::fs::write(
            &config,
            format!(
                "plugin_dir = {:?}\npod_resources_socket = {:?}\nreclaim_grace_s = {grace_s}\n\
                 reclaim_interval_s = 1\n{resources}",
                plugin_dir.display().to_string(),
                pods.display().to_string()
            ),
        )
        .expect("config");
        let plugin_log = dir.path().join("plugin.log");
        let plugin = Command::new(plugin_bin())
            .arg("--config")
            .arg(&config)
            .args(["--bus-address", &bus.address])
            .env("VGPUD_KUBEVIRT_LOG", "vgpud_kubevirt=debug,info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&plugin_log).expect("log"))
            .spawn()
            .expect("start vgpud-kubevirt");
        Kube {
            py,
            py_in,
            py_out,
            plugin,
            plugin_log,
            plugin_dir,
            bus,
            _daemon: daemon,
            _host: host,
            _dir: dir,
        }
    }

    fn cmd(&mut self, v: Value) -> Value {
        writeln!(self.py_in, "{v}").expect("write to the fake kubelet");
        self.py_in.flush().expect("flush");
        let mut line = String::new();
        self.py_out
            .read_line(&mut line)
            .expect("fake kubelet answer");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}\n{}", self.log()))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.plugin_log).unwrap_or_default()
    }

    /// The latest ListAndWatch list of `resource`, with its update count.
    fn list(&mut self, resource: &str) -> Option<(Vec<Value>, u64)> {
        let v = self.cmd(json!({"cmd": "lists"}));
        let l = &v["lists"][resource];
        Some((
            l["devices"].as_array()?.clone(),
            l["updates"].as_u64().unwrap_or(0),
        ))
    }

    /// Waits up to `limit` for `resource`'s list to satisfy `f`; the time it took.
    fn wait_list(
        &mut self,
        resource: &str,
        limit: Duration,
        what: &str,
        f: impl Fn(&[Value]) -> bool,
    ) -> Duration {
        let t0 = Instant::now();
        loop {
            if let Some((devs, _)) = self.list(resource) {
                if f(&devs) {
                    return t0.elapsed();
                }
            }
            if t0.elapsed() > limit {
                panic!(
                    "{resource}: not {what} within {limit:?}: {:?}\n{}",
                    self.list(resource),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn registrations(&mut self) -> Vec<Value> {
        self.cmd(json!({"cmd": "registrations"}))["registrations"]
            .as_array()
            .expect("registrations")
            .clone()
    }

    fn busctl(&self, method: &str, args: &[&str]) -> Result<Value, String> {
        self.bus
            .busctl_call("/org/vgpud1", "org.vgpud1.Manager", method, args)
    }

    /// vgpud's devices as (uuid, gpu, type id, owner).
    fn devices(&self) -> Vec<(String, String, String, String)> {
        let v = self.busctl("ListDevices", &[]).expect("ListDevices");
        v["data"][0]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| {
                let s = |i: usize| r[i].as_str().expect("string").to_string();
                (s(0), s(1), s(2), s(3))
            })
            .collect()
    }

    /// Whether vgpud lists the device `uuid`.
    fn has(&self, uuid: &str) -> bool {
        self.devices().iter().any(|d| d.0 == uuid)
    }

    /// The fake kubelet admits `pod` asking for `count` of `resource`: its answer, which must
    /// be a success.
    fn admit(&mut self, pod: &str, resource: &str, count: u32) -> Value {
        let a = self.cmd(json!({"cmd": "admit", "pod": pod, "resource": resource, "count": count}));
        assert_eq!(a["ok"], true, "admit {pod}: {a}\n{}", self.log());
        a
    }

    fn capacity(&self, ty: &str) -> u64 {
        self.busctl("GetCapacity", &["sa{sv}", ty, "0"])
            .expect("GetCapacity")["data"][0]
            .as_u64()
            .expect("u")
    }

    fn iommu_group(&self, uuid: &str) -> i64 {
        let path = format!("/org/vgpud1/device/{}", escape(uuid));
        let out = self.bus.busctl(&[
            "--json=short",
            "get-property",
            "org.vgpud1",
            &path,
            "org.vgpud1.Device",
            "IommuGroup",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("json");
        v["data"].as_i64().expect("i")
    }
}

/// The one variable an Allocate answered (`env`, the name virt-launcher reads) and the IDs
/// in it, split as virt-launcher does (AddressPool.load: `strings.TrimSuffix(s, ",")`, then
/// `strings.Split(s, ",")`).
fn env_ids(answer: &Value, env: &str) -> (String, Vec<String>) {
    let envs = answer["envs"].as_object().expect("envs");
    assert_eq!(envs.len(), 1, "{envs:?}");
    let value = envs
        .get(env)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no {env}, the variable virt-launcher reads: {envs:?}"));
    let ids = value
        .trim_end_matches(',')
        .split(',')
        .map(str::to_string)
        .collect();
    (value.to_string(), ids)
}

impl Drop for Kube {
    fn drop(&mut self) {
        let _ = self.plugin.kill();
        let _ = self.plugin.wait();
        let _ = self.py.kill();
        let _ = self.py.wait();
    }
}

fn escape(s: &str) -> String {
    let mut out = String::new();
    for (i, b) in s.bytes().enumerate() {
        if b.is_ascii_alphanumeric() && !(i == 0 && b.is_ascii_digit()) {
            out.push(b as char);
        } else {
            out.push_str(&format!("_{b:02x}"));
        }
    }
    out
}

fn healthy(devs: &[Value]) -> usize {
    devs.iter().filter(|d| d["health"] == "Healthy").count()
}

const ON_DEMAND: &str =
    "[[resource]]\ntype = \"GRID RTX6000-4Q\"\nmode = \"on-demand\"\nmax_devices = 256\n";
const POOL: &str =
    "[[resource]]\ntype = \"GRID RTX6000-2Q\"\nmode = \"pool\"\npool = \"k8s-pool\"\n";

#[tokio::test]
async fn registers_and_allocate_answers_what_virt_launcher_parses() {
    if !python_ready("registers_and_allocate_answers_what_virt_launcher_parses") {
        return;
    }
    let mut k = Kube::start(ON_DEMAND, 60).await;
    let cap = k.capacity("nvidia-259");
    assert_eq!(cap, 12, "two RTX 6000 with room for six 4Q each");
    k.wait_list(R4Q, Duration::from_secs(20), "advertised", |d| {
        d.len() == 12
    });

    let regs = k.registrations();
    assert_eq!(regs.len(), 1, "{regs:?}");
    assert_eq!(regs[0]["version"], "v1beta1");
    assert_eq!(regs[0]["resource"], R4Q);
    assert_eq!(regs[0]["endpoint"], "vgpud-nvidia_com_GRID_RTX6000-4Q.sock");
    assert_eq!(regs[0]["preferred"], true);
    assert_eq!(regs[0]["options_preferred"], true);
    assert_eq!(regs[0]["prestart"], false);

    // Every ID carries its GPU's NUMA node: the profile's GPUs are on nodes 0 and 1.
    let (devs, _) = k.list(R4Q).expect("list");
    let mut nodes: Vec<i64> = devs
        .iter()
        .map(|d| d["numa"][0].as_i64().expect("a NUMA node"))
        .collect();
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes, [0, 1]);

    let a = k.admit("vm-a", R4Q, 2);
    let (value, uuids) = env_ids(&a, ENV_4Q);
    let uuids: Vec<&str> = uuids.iter().map(String::as_str).collect();
    assert_eq!(uuids.len(), 2, "{value}");
    let devices = k.devices();
    let mut groups = Vec::new();
    for u in &uuids {
        let d = devices
            .iter()
            .find(|d| d.0 == *u)
            .unwrap_or_else(|| panic!("{u} is not a vgpud device: {devices:?}"));
        assert_eq!(d.2, "nvidia-259");
        assert_eq!(d.3, OWNER);
        groups.push(format!("/dev/vfio/{}", k.iommu_group(u)));
    }
    // Packed: both on one GPU (the preferred allocation and vgpud's placement agree).
    let gpus: Vec<&String> = devices.iter().map(|d| &d.1).collect();
    assert_eq!(gpus[0], gpus[1], "{devices:?}");
    let mut want = vec!["/dev/vfio/vfio".to_string()];
    want.extend(groups);
    let got: Vec<String> = a["devices"]
        .as_array()
        .expect("device specs")
        .iter()
        .map(|d| {
            assert_eq!(d["container"], d["host"]);
            d["host"].as_str().expect("path").to_string()
        })
        .collect();
    let (mut w, mut g) = (want.clone(), got.clone());
    w.sort();
    w.dedup();
    g.sort();
    assert_eq!(
        g, w,
        "the VFIO container and each device's group node, never /dev/vfio"
    );

    // The same IDs again (a retried Allocate) make nothing new.
    let chosen: Vec<Value> = a["chosen"].as_array().expect("chosen").clone();
    let again = k.cmd(json!({"cmd": "allocate", "resource": R4Q, "ids": chosen}));
    assert_eq!(again["envs"][ENV_4Q], a["envs"][ENV_4Q]);
    assert_eq!(k.devices().len(), 2);
    // Made devices stay advertised and healthy; the total is what vgpud could hold.
    k.wait_list(R4Q, Duration::from_secs(2), "12 after two made", |d| {
        d.len() == 12 && healthy(d) == 12
    });
}

#[tokio::test]
async fn external_changes_reach_list_and_watch_within_a_second() {
    if !python_ready("external_changes_reach_list_and_watch_within_a_second") {
        return;
    }
    let mut k = Kube::start(&format!("{ON_DEMAND}{POOL}"), 60).await;
    k.wait_list(R4Q, Duration::from_secs(20), "advertised", |d| {
        d.len() == 12
    });
    k.wait_list(R2Q, Duration::from_secs(5), "an empty pool", |d| {
        d.is_empty()
    });

    // Pool: a device made with busctl for the pool appears.
    let t0 = Instant::now();
    let made = k
        .busctl(
            "CreateDevice",
            &["sa{sv}", "RTX6000-2Q", "1", "owner", "s", "k8s-pool"],
        )
        .map(|v| v["data"][0].as_str().expect("uuid").to_string());
    let uuid = made.unwrap_or_else(|e| panic!("{e}"));
    let dt = k.wait_list(R2Q, Duration::from_secs(1), "showing the new device", |d| {
        d.len() == 1 && d[0]["id"] == uuid.as_str() && d[0]["health"] == "Healthy"
    });
    eprintln!(
        "pool create → ListAndWatch: {dt:?} (busctl included: {:?})",
        t0.elapsed()
    );

    // On demand: that GPU now runs 2Q, so its 4Q room is gone: the list shrinks at once.
    let dt = k.wait_list(
        R4Q,
        Duration::from_secs(1),
        "shrunk to the other GPU's 6",
        |d| d.len() == 6,
    );
    eprintln!("capacity taken by another → ListAndWatch: {dt:?}");

    // A pool device a pod holds, removed behind the plugin's back: Unhealthy, not gone.
    k.admit("vm-p", R2Q, 1);
    k.busctl("RemoveDevice", &["sa{sv}", &uuid, "0"])
        .unwrap_or_else(|e| panic!("{e}"));
    let dt = k.wait_list(R2Q, Duration::from_secs(1), "unhealthy", |d| {
        d.len() == 1 && d[0]["health"] == "Unhealthy"
    });
    eprintln!("removal → Unhealthy: {dt:?}");
    // And the GPU's room for 4Q is back.
    k.wait_list(R4Q, Duration::from_secs(1), "12 again", |d| d.len() == 12);
    // Allocating the gone device is refused cleanly.
    let r = k.cmd(json!({"cmd": "allocate", "resource": R2Q, "ids": [uuid]}));
    assert_eq!(r["ok"], false);
    assert_eq!(r["code"], "FAILED_PRECONDITION", "{r}");

    // An on-demand device a pod holds, removed behind vgpud's back (the kernel's `remove`
    // written as an operator's shell would, through the simulated kernel, which sends the
    // uevent): Unhealthy within a second too.
    let b = k.admit("vm-q", R4Q, 1);
    let (_, held) = env_ids(&b, ENV_4Q);
    let id = b["chosen"][0].as_str().map(str::to_string);
    let out = Command::new(common::daemon::vgpud_bin())
        .arg("--root")
        .arg(&k._host.root)
        .args(["sim-host", "--poke"])
        .arg(format!("sys/bus/mdev/devices/{}/remove", held[0]))
        .arg("1")
        .output()
        .expect("vgpud sim-host --poke");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dt = k.wait_list(
        R4Q,
        Duration::from_secs(1),
        "the held device unhealthy",
        |d| {
            d.iter().any(|e| {
                e["health"] == "Unhealthy" && id.as_deref().is_some_and(|id| e["id"] == id)
            })
        },
    );
    eprintln!("removal behind vgpud's back → Unhealthy: {dt:?}");
}

#[tokio::test]
async fn a_storm_of_200_allocates_never_makes_more_than_the_gpus_hold() {
    if !python_ready("a_storm_of_200_allocates_never_makes_more_than_the_gpus_hold") {
        return;
    }
    let mut k = Kube::start(ON_DEMAND, 60).await;
    k.wait_list(R4Q, Duration::from_secs(20), "advertised", |d| {
        d.len() == 12
    });
    let ids: Vec<String> = (0..200).map(|n| format!("nvidia-259-{n}")).collect();
    let t0 = Instant::now();
    let r = k.cmd(json!({"cmd": "storm", "resource": R4Q, "ids": ids}));
    let took = t0.elapsed();
    let results = r["results"].as_array().expect("results");
    assert_eq!(results.len(), 200);
    let ok: Vec<&Value> = results.iter().filter(|r| r["ok"] == true).collect();
    let refused: Vec<&Value> = results.iter().filter(|r| r["ok"] != true).collect();
    for e in &refused {
        assert_eq!(e["code"], "RESOURCE_EXHAUSTED", "a clean refusal: {e}");
        assert!(
            e["details"]
                .as_str()
                .unwrap_or("")
                .contains("Allocate nvidia-259-"),
            "names the operation and device: {e}"
        );
    }
    let made: Vec<_> = k
        .devices()
        .into_iter()
        .filter(|d| d.2 == "nvidia-259")
        .collect();
    eprintln!(
        "200 Allocates in {took:?}: {} made, {} refused",
        ok.len(),
        refused.len()
    );
    assert_eq!(ok.len(), 12, "every bit of room used, no more");
    assert_eq!(made.len(), 12, "{made:?}");
    let mut answered: Vec<&str> = ok
        .iter()
        .map(|r| r["envs"][ENV_4Q].as_str().expect("uuid"))
        .collect();
    answered.sort();
    answered.dedup();
    assert_eq!(answered.len(), 12, "each Allocate its own device");
    assert!(answered.iter().all(|u| made.iter().any(|d| d.0 == *u)));
    // The list follows: the 12 made, healthy, and nothing more to offer.
    k.wait_list(R4Q, Duration::from_secs(2), "the 12 made", |d| {
        d.len() == 12 && healthy(d) == 12
    });
}

#[tokio::test]
async fn on_demand_devices_are_reclaimed_after_their_pod_leaves_and_never_before() {
    if !python_ready("on_demand_devices_are_reclaimed_after_their_pod_leaves_and_never_before") {
        return;
    }
    let grace = 2;
    let mut k = Kube::start(ON_DEMAND, grace).await;
    k.wait_list(R4Q, Duration::from_secs(20), "advertised", |d| {
        d.len() == 12
    });
    let a = k.admit("vm-a", R4Q, 1);
    let b = k.admit("vm-b", R4Q, 1);
    let ua = a["envs"][ENV_4Q].as_str().expect("uuid").to_string();
    let ub = b["envs"][ENV_4Q].as_str().expect("uuid").to_string();

    // Held: kept well past the grace.
    std::thread::sleep(Duration::from_secs(grace * 2 + 1));
    assert!(
        k.has(&ua) && k.has(&ub),
        "a held device is never reclaimed\n{}",
        k.log()
    );

    // vm-a leaves PodResources: its device goes after the grace, not before; vm-b's stays.
    k.cmd(json!({"cmd": "delete_pod", "pod": "vm-a"}));
    let left = Instant::now();
    while left.elapsed() < Duration::from_millis(grace * 1000 - 300) {
        assert!(
            k.has(&ua),
            "reclaimed {:?} after its pod left, before the grace of {grace} s",
            left.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    while k.has(&ua) {
        assert!(
            left.elapsed() < Duration::from_secs(grace + 4),
            "not reclaimed within the grace and two looks\n{}",
            k.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "reclaimed {:?} after its pod left (grace {grace} s)",
        left.elapsed()
    );
    assert!(k.has(&ub), "vm-b still holds its device");
    assert!(k.log().contains("reclaimed"), "{}", k.log());
}

#[tokio::test]
async fn nothing_is_reclaimed_while_pod_resources_cannot_be_asked() {
    if !python_ready("nothing_is_reclaimed_while_pod_resources_cannot_be_asked") {
        return;
    }
    let grace = 1;
    let mut k = Kube::start(ON_DEMAND, grace).await;
    k.wait_list(R4Q, Duration::from_secs(20), "advertised", |d| {
        d.len() == 12
    });
    let a = k.admit("vm-a", R4Q, 1);
    let ua = a["envs"][ENV_4Q].as_str().expect("uuid").to_string();
    // kubelet's PodResources goes away, and so does the pod: nobody can say the device is
    // free, so it stays however long that lasts.
    assert_eq!(k.cmd(json!({"cmd": "pods_down"}))["ok"], true);
    k.cmd(json!({"cmd": "delete_pod", "pod": "vm-a"}));
    std::thread::sleep(Duration::from_secs(grace * 4 + 1));
    assert!(
        k.has(&ua),
        "reclaimed without PodResources' word\n{}",
        k.log()
    );
    // Back: the device goes after the grace.
    assert_eq!(k.cmd(json!({"cmd": "pods_up"}))["ok"], true);
    let t0 = Instant::now();
    while k.has(&ua) {
        assert!(
            t0.elapsed() < Duration::from_secs(grace + 4),
            "not reclaimed once PodResources answers\n{}",
            k.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test]
async fn registers_again_after_kubelet_restarts() {
    if !python_ready("registers_again_after_kubelet_restarts") {
        return;
    }
    let mut k = Kube::start(ON_DEMAND, 60).await;
    k.wait_list(R4Q, Duration::from_secs(20), "advertised", |d| {
        d.len() == 12
    });
    assert_eq!(k.registrations().len(), 1);
    let sock = k.plugin_dir.join("vgpud-nvidia_com_GRID_RTX6000-4Q.sock");
    assert!(sock.exists());
    for round in 2..=3 {
        let r = k.cmd(json!({"cmd": "restart"}));
        assert_eq!(r["ok"], true, "{r}");
        let t0 = Instant::now();
        while k.registrations().len() < round {
            assert!(
                t0.elapsed() < Duration::from_secs(3),
                "no registration {round} within 3 s of kubelet's restart\n{}",
                k.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "registered again {:?} after kubelet came back",
            t0.elapsed()
        );
        assert!(sock.exists(), "the plugin serves its socket again");
        let regs = k.registrations();
        assert_eq!(regs[round - 1]["resource"], R4Q);
        // The new kubelet gets the list afresh over the new socket.
        k.wait_list(
            R4Q,
            Duration::from_secs(2),
            "listed to the new kubelet",
            |d| d.len() == 12,
        );
    }
}

#[tokio::test]
async fn sriov_vgpus_are_pci_resources_with_the_vf_addresses() {
    if !python_ready("sriov_vgpus_are_pci_resources_with_the_vf_addresses") {
        return;
    }
    const R: &str = "nvidia.com/NVIDIA_L40S-4Q";
    // ResourceNameToEnvVar("PCI_RESOURCE", R), by hand.
    const ENV: &str = "PCI_RESOURCE_NVIDIA_COM_NVIDIA_L40S-4Q";
    let mut k = Kube::start_on(
        "nvidia-l40s",
        "[[resource]]\ntype = \"NVIDIA L40S-4Q\"\nmode = \"on-demand\"\n",
        60,
        |bus| {
            // sriov-manage enables all 32 VFs of each GPU or none.
            let gpus = bus
                .busctl_call("/org/vgpud1", "org.vgpud1.Manager", "ListGpus", &[])
                .expect("ListGpus");
            for g in gpus["data"][0].as_array().expect("rows") {
                let addr = g[0].as_str().expect("address");
                bus.busctl_call(
                    "/org/vgpud1",
                    "org.vgpud1.Manager",
                    "SetVfCount",
                    &["sua{sv}", addr, "32", "0"],
                )
                .unwrap_or_else(|e| panic!("SetVfCount {addr}: {e}"));
            }
        },
    )
    .await;
    let cap = k.capacity("L40S-4Q");
    assert!(cap > 0, "the L40S host has room for 4Q");
    k.wait_list(R, Duration::from_secs(20), "advertised", |d| {
        d.len() as u64 == cap
    });
    let a = k.admit("vm-a", R, 2);
    let (value, bdfs) = env_ids(&a, ENV);
    let bdfs: Vec<&str> = bdfs.iter().map(String::as_str).collect();
    assert_eq!(bdfs.len(), 2, "{value}");
    let devices = k.devices();
    assert_eq!(devices.len(), 2);
    for (uuid, ..) in &devices {
        let path = format!("/org/vgpud1/device/{}", escape(uuid));
        let out = k.bus.busctl(&[
            "--json=short",
            "get-property",
            "org.vgpud1",
            &path,
            "org.vgpud1.Device",
            "Address",
        ]);
        let v: Value = serde_json::from_slice(&out.stdout).expect("json");
        let vf = v["data"].as_str().expect("Address");
        assert!(bdfs.contains(&vf), "{vf} (the VF of {uuid}) is in {value}");
    }
    let nodes: Vec<&str> = a["devices"]
        .as_array()
        .expect("specs")
        .iter()
        .map(|d| d["host"].as_str().expect("path"))
        .collect();
    assert!(nodes.contains(&"/dev/vfio/vfio"), "{nodes:?}");
    assert_eq!(
        nodes.len(),
        3,
        "the container and each VF's group: {nodes:?}"
    );
}

/// p50 and p99 of `ms`.
fn percentiles(mut ms: Vec<f64>) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

/// The plugin's resident memory (kB) and CPU time (clock ticks) from /proc.
fn rss_and_cpu(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let f: Vec<&str> = stat
        .rsplit_once(')')
        .expect("comm")
        .1
        .split_whitespace()
        .collect();
    // utime and stime: fields 14 and 15, the 12th and 13th after the command name.
    let cpu = f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime");
    (rss, cpu)
}

/// Figures, not checks: `cargo test --test kubevirt_plugin -- --ignored --nocapture`.
/// Allocate latency (the fake kubelet's clock, gRPC both ways included) on demand and from a
/// pool, a pool change's way to ListAndWatch, and the idle plugin's memory and CPU.
#[tokio::test]
#[ignore = "a benchmark: run with --ignored --nocapture"]
async fn bench_allocate_latency_and_idle_cost() {
    if !python_ready("bench_allocate_latency_and_idle_cost") {
        return;
    }
    const R1Q: &str = "nvidia.com/GRID_RTX8000-1Q";
    const N: usize = 100;
    let resources = "[[resource]]\ntype = \"GRID RTX8000-1Q\"\nmode = \"on-demand\"\nmax_devices = 256\n\
                     [[resource]]\ntype = \"GRID RTX8000-2Q\"\nmode = \"pool\"\npool = \"k8s-pool\"\n";
    let mut k = Kube::start_on("large", resources, 600, |_| {}).await;
    k.wait_list(R1Q, Duration::from_secs(30), "advertised", |d| {
        !d.is_empty()
    });
    let ids: Vec<String> = (0..N).map(|n| format!("nvidia-264-{n}")).collect();
    let r = k.cmd(json!({"cmd": "bench", "resource": R1Q, "ids": ids}));
    assert_eq!(r["ok"], true, "{r}\n{}", k.log());
    let ms: Vec<f64> = r["ms"]
        .as_array()
        .expect("ms")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    let (p50, p99) = percentiles(ms);
    eprintln!("on demand: {N} Allocates (each a CreateDevice): p50 {p50:.2} ms, p99 {p99:.2} ms");

    // A pool of N devices made by another client, then one change's way to ListAndWatch.
    const R2Q: &str = "nvidia.com/GRID_RTX8000-2Q";
    let c = vgpud_client::Client::connect(&vgpud_client::BusChoice::Address(k.bus.address.clone()))
        .await
        .expect("client");
    let mut pool = Vec::new();
    for _ in 0..N {
        let (u, _) = c
            .create_device(
                "RTX8000-2Q",
                &vgpud_client::Options::new()
                    .str("owner", "k8s-pool")
                    .bool("persistent", false),
            )
            .await
            .expect("create a pool device");
        pool.push(u);
    }
    k.wait_list(R2Q, Duration::from_secs(5), "the pool", |d| d.len() == N);
    let r = k.cmd(json!({"cmd": "bench", "resource": R2Q, "ids": pool}));
    assert_eq!(r["ok"], true, "{r}");
    let ms: Vec<f64> = r["ms"]
        .as_array()
        .expect("ms")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    let (p50, p99) = percentiles(ms);
    eprintln!("pool: {N} Allocates (devices made): p50 {p50:.2} ms, p99 {p99:.2} ms");
    let mut seen = Vec::new();
    for _ in 0..20 {
        let (u, _) = c
            .create_device(
                "RTX8000-2Q",
                &vgpud_client::Options::new()
                    .str("owner", "k8s-pool")
                    .bool("persistent", false),
            )
            .await
            .expect("create");
        let t0 = Instant::now();
        loop {
            let (d, _) = k.list(R2Q).expect("list");
            if d.iter().any(|d| d["id"] == u.as_str()) {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(2), "not listed");
        }
        seen.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let (p50, p99) = percentiles(seen);
    eprintln!(
        "CreateDevice reply → ListAndWatch update (20 changes): p50 {p50:.2} ms, max {p99:.2} ms"
    );

    // Idle: nothing changes for 10 s.
    std::thread::sleep(Duration::from_secs(2));
    let (rss, cpu0) = rss_and_cpu(k.plugin.id());
    std::thread::sleep(Duration::from_secs(10));
    let (_, cpu1) = rss_and_cpu(k.plugin.id());
    eprintln!(
        "idle: RSS {rss} kB, CPU {} ticks in 10 s (100 ticks = 1 s)",
        cpu1 - cpu0
    );
}
