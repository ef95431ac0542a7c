//! The scenario of the real-kernel suite (`tests/vm/run`). Inside the qemu VM it runs vgpud
//! without `--simulate` on the real sysfs (the kernel's mtty sample and emulated PCI devices
//! behind an emulated Intel IOMMU); on the build machine it runs the same scenario on a
//! simulated tree (`--mode sim`) so that the two runs' outcomes can be compared.
//!
//! It starts its own dbus-daemon and vgpud, prints `PASS name` / `FAIL name: why` per check,
//! `FACT key = value` for every outcome the simulated run must reproduce, `INFO …` for what
//! only the real kernel can show, `FIGURE name=value` for measured times (figures, never
//! checks: the `storm` section, real kernel only), and ends with `N passed, M failed` (exit
//! status 1 on any failure).

use std::ffi::CString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vgpud_client::{DeviceProxy, GpuProxy, ManagerProxy, Opts};
use zbus::{OwnedObjectPath, Variant};

mod storm;
mod uevents;

const U1: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";
const U2: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1002";
const P1: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1003";
const T1: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1004";
const X1: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1005";
const PT1: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1006";
const PT2: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1007";
const PT3: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1008";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Real,
    Sim,
}

struct Args {
    mode: Mode,
    root: PathBuf,
    vgpud: PathBuf,
    dbus_daemon: PathBuf,
    work: PathBuf,
    mdevctl: Option<PathBuf>,
    facts: Option<PathBuf>,
    sections: Vec<String>,
    /// The vgpud the storm section measures (an optimized build; mdevctl is one).
    storm_vgpud: Option<PathBuf>,
}

fn parse_args() -> Args {
    let mut a = Args {
        mode: Mode::Real,
        root: PathBuf::from("/"),
        vgpud: PathBuf::from("vgpud"),
        dbus_daemon: PathBuf::from("dbus-daemon"),
        work: PathBuf::from("/tmp/vm-driver"),
        mdevctl: None,
        facts: None,
        sections: vec!["mdev".into(), "pci".into()],
        storm_vgpud: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--mode" => a.mode = if v == "sim" { Mode::Sim } else { Mode::Real },
            "--root" => a.root = v.into(),
            "--vgpud" => a.vgpud = v.into(),
            "--dbus-daemon" => a.dbus_daemon = v.into(),
            "--work" => a.work = v.into(),
            "--mdevctl" => a.mdevctl = Some(v.into()),
            "--facts" => a.facts = Some(v.into()),
            "--sections" => a.sections = v.split(',').map(str::to_string).collect(),
            "--storm-vgpud" => a.storm_vgpud = Some(v.into()),
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// The checks' results and the outcomes to compare.
struct Report {
    passed: u32,
    failed: u32,
    facts: Vec<String>,
}

impl Report {
    fn check(&mut self, name: &str, ok: bool, detail: impl std::fmt::Display) {
        if ok {
            self.passed += 1;
            println!("PASS {name}");
        } else {
            self.failed += 1;
            println!("FAIL {name}: {detail}");
        }
    }
    fn fact(&mut self, key: &str, value: impl std::fmt::Display) {
        let line = format!("{key} = {value}");
        println!("FACT {line}");
        self.facts.push(line);
    }
}

fn info(s: impl std::fmt::Display) {
    println!("INFO {s}");
}

fn error_name(e: &zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(name, _, _) => name.to_string(),
        other => format!("not a method error: {other}"),
    }
}

fn error_text(e: &zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(name, Some(msg), _) => format!("{name}: {msg}"),
        other => other.to_string(),
    }
}

fn opts<'a>(pairs: &[(&'a str, Variant<'a>)]) -> Opts<'a> {
    pairs.iter().map(|(k, v)| (*k, v.clone())).collect()
}

fn link_name(p: &Path) -> Option<String> {
    std::fs::read_link(p)
        .ok()
        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
}

/// Sorted entry names of a directory, links marked `@`, directories `/`.
fn listing(p: &Path) -> String {
    let mut v: Vec<String> = std::fs::read_dir(p)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    match e.file_type() {
                        Ok(t) if t.is_symlink() => format!("{n}@"),
                        Ok(t) if t.is_dir() => format!("{n}/"),
                        _ => n,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v.join(" ")
}

fn read_trim(p: &Path) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| format!("<{e}>"))
}

/// The private bus and the vgpud on it.
struct World {
    args: Args,
    bus: Child,
    address: String,
    daemon: Option<Child>,
    starts: u32,
    conn: Option<zbus::Connection>,
    /// Where vgpud serves its metrics (`--metrics-listen`), when a section asks for them.
    metrics: Option<String>,
}

impl World {
    fn start_bus(args: Args) -> World {
        std::fs::create_dir_all(&args.work).expect("work dir");
        let socket = args.work.join("bus");
        let _ = std::fs::remove_file(&socket);
        let cfg = args.work.join("bus.conf");
        std::fs::write(
            &cfg,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"#,
                socket.display()
            ),
        )
        .expect("bus config");
        let mut bus = Command::new(&args.dbus_daemon)
            .arg("--nofork")
            .arg(format!("--config-file={}", cfg.display()))
            .arg("--print-address")
            .stdout(Stdio::piped())
            .spawn()
            .expect("start dbus-daemon");
        let mut line = String::new();
        BufReader::new(bus.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("bus address");
        World {
            args,
            bus,
            address: line.trim().to_string(),
            daemon: None,
            starts: 0,
            conn: None,
            metrics: None,
        }
    }

    fn root(&self, rel: &str) -> PathBuf {
        self.args.root.join(rel)
    }

    fn real(&self) -> bool {
        self.args.mode == Mode::Real
    }

    /// Starts vgpud and waits until it owns `org.vgpud1`.
    async fn start_vgpud(&mut self) -> Result<Duration, String> {
        self.starts += 1;
        let log = std::fs::File::create(self.args.work.join(format!("vgpud-{}.log", self.starts)))
            .map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&self.args.vgpud);
        cmd.arg("--root")
            .arg(&self.args.root)
            .args(["--bus-address", &self.address])
            .args(["--poll-interval-ms", "500", "--restore-timeout-s", "5"])
            .args(["--libvirt-uri", "test:///default"])
            .env("VGPUD_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log);
        if self.args.mode == Mode::Sim {
            cmd.arg("--simulate");
        }
        if let Some(addr) = &self.metrics {
            cmd.args(["--metrics-listen", addr]);
        }
        let t0 = Instant::now();
        self.daemon = Some(cmd.spawn().map_err(|e| format!("spawn vgpud: {e}"))?);
        if self.conn.is_none() {
            self.conn = Some(
                zbus::connection::Builder::address(self.address.as_str())
                    .build()
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        let conn = self.conn.clone().expect("conn");
        while t0.elapsed() < Duration::from_secs(60) {
            if let Some(d) = self.daemon.as_mut() {
                if let Ok(Some(st)) = d.try_wait() {
                    return Err(format!("vgpud exited: {st}"));
                }
            }
            let reply = conn
                .call_method(
                    Some("org.freedesktop.DBus"),
                    "/org/freedesktop/DBus",
                    Some("org.freedesktop.DBus"),
                    "NameHasOwner",
                    &("org.vgpud1",),
                )
                .await
                .map_err(|e| e.to_string())?;
            if reply
                .body()
                .deserialize::<bool>()
                .map_err(|e| e.to_string())?
            {
                return Ok(t0.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err("vgpud did not take org.vgpud1 within 60 s".into())
    }

    /// kill -9.
    fn kill_vgpud(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            let _ = d.kill();
            let _ = d.wait();
        }
    }

    /// SIGTERM, then wait: vgpud stops as on a shutdown; the bus stays.
    fn term_vgpud(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(d.id() as i32, libc::SIGTERM) };
            let _ = d.wait();
        }
    }

    fn stop(&mut self) {
        self.term_vgpud();
        let _ = self.bus.kill();
        let _ = self.bus.wait();
    }

    async fn manager(&self) -> ManagerProxy<'static> {
        ManagerProxy::new(self.conn.as_ref().expect("conn"))
            .await
            .expect("manager proxy")
    }

    async fn device(&self, path: &OwnedObjectPath) -> DeviceProxy<'static> {
        DeviceProxy::builder(self.conn.as_ref().expect("conn"))
            .path(path.clone())
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
            .expect("device proxy")
    }

    async fn gpu(&self, path: &OwnedObjectPath) -> GpuProxy<'static> {
        GpuProxy::builder(self.conn.as_ref().expect("conn"))
            .path(path.clone())
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
            .expect("gpu proxy")
    }

    /// `type id → available` for the mtty parent.
    async fn mtty_available(&self) -> String {
        match self.manager().await.list_types().await {
            Ok(types) => {
                let mut v: Vec<String> = types
                    .iter()
                    .filter(|t| t.0 == "mtty")
                    .map(|t| format!("{}:{}", t.1, t.5))
                    .collect();
                v.sort();
                v.join(" ")
            }
            Err(e) => format!("<ListTypes: {}>", error_text(&e)),
        }
    }

    /// The kernel's view of the available counts (`available_instances`).
    fn kernel_available(&self) -> String {
        ["mtty-1", "mtty-2"]
            .iter()
            .map(|t| {
                format!(
                    "{t}:{}",
                    read_trim(&self.root(&format!(
                        "sys/class/mdev_bus/mtty/mdev_supported_types/{t}/available_instances"
                    )))
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    async fn device_listed(&self, uuid: &str) -> Option<(String, String, String, String)> {
        self.manager()
            .await
            .list_devices()
            .await
            .ok()?
            .into_iter()
            .find(|d| d.0 == uuid)
            .map(|d| (d.1, d.2, d.3, d.4.to_string()))
    }
}

// ---- VFIO -----------------------------------------------------------------------------------

const VFIO_TYPE: libc::c_ulong = b';' as libc::c_ulong;
const fn vfio_io(nr: libc::c_ulong) -> libc::c_ulong {
    (VFIO_TYPE << 8) | (100 + nr)
}
const VFIO_GET_API_VERSION: libc::c_ulong = vfio_io(0);
const VFIO_CHECK_EXTENSION: libc::c_ulong = vfio_io(1);
const VFIO_SET_IOMMU: libc::c_ulong = vfio_io(2);
const VFIO_GROUP_GET_STATUS: libc::c_ulong = vfio_io(3);
const VFIO_GROUP_SET_CONTAINER: libc::c_ulong = vfio_io(4);
const VFIO_GROUP_GET_DEVICE_FD: libc::c_ulong = vfio_io(6);
const VFIO_DEVICE_GET_INFO: libc::c_ulong = vfio_io(7);
const VFIO_TYPE1_IOMMU: libc::c_ulong = 1;
const VFIO_TYPE1V2_IOMMU: libc::c_ulong = 3;
const VFIO_GROUP_FLAGS_VIABLE: u32 = 1;

#[repr(C)]
struct GroupStatus {
    argsz: u32,
    flags: u32,
}

#[repr(C)]
#[derive(Default)]
struct DeviceInfo {
    argsz: u32,
    flags: u32,
    num_regions: u32,
    num_irqs: u32,
    cap_offset: u32,
    pad: u32,
}

fn open_rw(path: &str) -> Result<libc::c_int, String> {
    let c = CString::new(path).expect("path");
    // SAFETY: a valid C string.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        Err(format!("open {path}: {}", std::io::Error::last_os_error()))
    } else {
        Ok(fd)
    }
}

/// What QEMU does with a VFIO group before it can use a device: open the container and the
/// group, check the group is viable, set the container and the IOMMU type, get a device fd.
/// Returns one line describing each device.
fn vfio_handshake(group: i32, devices: &[&str]) -> Result<String, String> {
    let container = open_rw("/dev/vfio/vfio")?;
    let group_fd = match open_rw(&format!("/dev/vfio/{group}")) {
        Ok(fd) => fd,
        Err(e) => {
            // SAFETY: our fd.
            unsafe { libc::close(container) };
            return Err(e);
        }
    };
    let result = (|| {
        let err = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
        // SAFETY: the ioctls below get the arguments the VFIO uapi defines.
        unsafe {
            let api = libc::ioctl(container, VFIO_GET_API_VERSION as _);
            if api != 0 {
                return Err(format!("VFIO_GET_API_VERSION gave {api}, not 0"));
            }
            let v2 = libc::ioctl(container, VFIO_CHECK_EXTENSION as _, VFIO_TYPE1V2_IOMMU) == 1;
            let v1 = libc::ioctl(container, VFIO_CHECK_EXTENSION as _, VFIO_TYPE1_IOMMU) == 1;
            if !v1 && !v2 {
                return Err("the container supports no type1 IOMMU".into());
            }
            let mut st = GroupStatus {
                argsz: std::mem::size_of::<GroupStatus>() as u32,
                flags: 0,
            };
            if libc::ioctl(group_fd, VFIO_GROUP_GET_STATUS as _, &mut st) < 0 {
                return Err(err("VFIO_GROUP_GET_STATUS"));
            }
            if st.flags & VFIO_GROUP_FLAGS_VIABLE == 0 {
                return Err(format!(
                    "group {group} is not viable (flags {:#x}): a member is not on a VFIO driver",
                    st.flags
                ));
            }
            let c: libc::c_int = container;
            if libc::ioctl(group_fd, VFIO_GROUP_SET_CONTAINER as _, &c) < 0 {
                return Err(err("VFIO_GROUP_SET_CONTAINER"));
            }
            let ty = if v2 {
                VFIO_TYPE1V2_IOMMU
            } else {
                VFIO_TYPE1_IOMMU
            };
            if libc::ioctl(container, VFIO_SET_IOMMU as _, ty) < 0 {
                return Err(err("VFIO_SET_IOMMU"));
            }
            let mut out = vec![format!("api 0, iommu type {ty}, group {group} viable")];
            for d in devices {
                let name = CString::new(*d).expect("name");
                let fd = libc::ioctl(group_fd, VFIO_GROUP_GET_DEVICE_FD as _, name.as_ptr());
                if fd < 0 {
                    return Err(err(&format!("VFIO_GROUP_GET_DEVICE_FD {d}")));
                }
                let mut info = DeviceInfo {
                    argsz: std::mem::size_of::<DeviceInfo>() as u32,
                    ..Default::default()
                };
                let r = libc::ioctl(fd, VFIO_DEVICE_GET_INFO as _, &mut info);
                libc::close(fd);
                if r < 0 {
                    return Err(err(&format!("VFIO_DEVICE_GET_INFO {d}")));
                }
                out.push(format!(
                    "{d}: fd ok, flags {:#x} (pci {}), {} regions, {} irqs",
                    info.flags,
                    info.flags & 2 != 0,
                    info.num_regions,
                    info.num_irqs
                ));
            }
            Ok(out.join("; "))
        }
    })();
    // SAFETY: our fds.
    unsafe {
        libc::close(group_fd);
        libc::close(container);
    }
    result
}

// ---- the scenario ---------------------------------------------------------------------------

/// Where vgpud serves its metrics (`--metrics-listen`): in the VM a fixed port of its
/// loopback; on the simulated host a port that was free at the start.
static METRICS: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The address for [`METRICS`].
fn metrics_address(real: bool) -> String {
    if real {
        return "127.0.0.1:9835".into();
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or_else(|_| "127.0.0.1:9835".into(), |a| a.to_string())
}

/// vgpud's metrics as it serves them; `None` when they cannot be read.
pub(crate) fn metrics_text() -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(METRICS.get()?).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    Some(text)
}

/// The uevents vgpud applied so far, by their labels (subsystem and action).
pub(crate) fn uevent_counts() -> Vec<(String, f64)> {
    let text = metrics_text().unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (labels, v) = l.strip_prefix("vgpud_uevents_total")?.rsplit_once(' ')?;
            Some((labels.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// The uevents applied between two [`uevent_counts`], in words, sorted.
pub(crate) fn uevents_text(before: &[(String, f64)], after: &[(String, f64)]) -> String {
    let mut seen: Vec<String> = after
        .iter()
        .filter_map(|(labels, n)| {
            let was = before
                .iter()
                .find(|(l, _)| l == labels)
                .map_or(0.0, |(_, v)| *v);
            (n - was > 0.0).then(|| format!("{labels} {}", n - was))
        })
        .collect();
    // In a stable order: the metrics list their labels in no fixed one.
    seen.sort();
    if seen.is_empty() {
        "no uevent applied".into()
    } else {
        format!("uevents applied: {}", seen.join(", "))
    }
}

/// The uevents vgpud applied since `before` ([`uevent_counts`]) by subsystem and action, of
/// the subsystems it names (`other`, such as a DRM or network device's, is left out: the
/// simulator does not send those). They arrive after a call's answer: read until the counts
/// stay the same for 300 ms, 3 s at most.
async fn uevents_since(before: &[(String, f64)]) -> String {
    let named = |counts: Vec<(String, f64)>| -> Vec<(String, f64)> {
        counts
            .into_iter()
            .filter(|(labels, _)| !labels.contains("subsystem=\"other\""))
            .collect()
    };
    let before = named(before.to_vec());
    let mut seen = uevents_text(&before, &named(uevent_counts()));
    let (deadline, mut steady) = (Instant::now() + Duration::from_secs(3), Instant::now());
    while Instant::now() < deadline && steady.elapsed() < Duration::from_millis(300) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = uevents_text(&before, &named(uevent_counts()));
        if now != seen {
            (seen, steady) = (now, Instant::now());
        }
    }
    seen
}

async fn mdev_section(w: &mut World, r: &mut Report) {
    let m = w.manager().await;

    // Discovery.
    let gpus = m.list_gpus().await.unwrap_or_default();
    let parent = gpus.iter().find(|g| g.0 == "mtty");
    r.check(
        "mdev.discovery.parent",
        parent.is_some(),
        format!("ListGpus has no mtty: {gpus:?}"),
    );
    if let Some(p) = parent {
        r.fact(
            "mdev.parent",
            format!("model={:?} driver={:?} modes={:?}", p.1, p.2, p.3),
        );
        let g = w.gpu(&p.4).await;
        r.fact(
            "mdev.parent.iommu_group",
            g.iommu_group()
                .await
                .map_err(|e| error_text(&e))
                .map_or_else(|e| e, |v| v.to_string()),
        );
    }
    let types = m.list_types().await.unwrap_or_default();
    let mut mtty_types: Vec<_> = types.iter().filter(|t| t.0 == "mtty").collect();
    mtty_types.sort();
    for t in &mtty_types {
        r.fact(
            &format!("mdev.type.{}", t.1),
            format!("name={:?} fb={} max={} available={}", t.2, t.3, t.4, t.5),
        );
    }
    let avail0 = w.mtty_available().await;
    r.check(
        "mdev.discovery.types",
        avail0 == "mtty-1:24 mtty-2:12"
            && mtty_types
                .iter()
                .any(|t| t.1 == "mtty-1" && t.2 == "Single port serial")
            && mtty_types
                .iter()
                .any(|t| t.1 == "mtty-2" && t.2 == "Dual port serial"),
        format!("types {mtty_types:?}"),
    );
    r.check(
        "mdev.discovery.kernel_counts",
        w.kernel_available() == avail0,
        format!("kernel {} vs vgpud {avail0}", w.kernel_available()),
    );

    // Create.
    let uevents0 = uevent_counts();
    let created = m
        .create_device(
            "mtty-2",
            opts(&[
                ("uuid", Variant::from(U1)),
                ("owner", Variant::from("vm-a")),
            ]),
        )
        .await;
    r.check(
        "mdev.create",
        matches!(&created, Ok((u, _)) if u == U1),
        format!("{:?}", created.as_ref().map_err(error_text)),
    );
    let dev = w.root(&format!("sys/bus/mdev/devices/{U1}"));
    let ty = link_name(&dev.join("mdev_type"));
    let group = link_name(&dev.join("iommu_group"));
    let node = group.as_ref().map(|g| w.root(&format!("dev/vfio/{g}")));
    r.fact("mdev.create.mdev_type", format!("{ty:?}"));
    r.fact("mdev.create.has_iommu_group", group.is_some());
    // The kernel hands out the lowest free group number: the simulated tree has the VM's groups.
    r.fact("mdev.create.iommu_group", format!("{group:?}"));
    r.fact("mdev.create.vfio_dev", listing(&dev.join("vfio-dev")));
    r.fact(
        "mdev.create.dev_vfio_node",
        node.as_ref().is_some_and(|n| n.exists()),
    );
    r.fact(
        "mdev.create.parent_link",
        std::fs::canonicalize(&dev)
            .ok()
            .and_then(|p| p.parent().map(|p| p.ends_with("mtty/mtty")))
            .unwrap_or(false),
    );
    info(format!("mdev device directory: {}", listing(&dev)));
    // The uevents the create brought, as vgpud applied them: the simulated kernel must send
    // what the real one does.
    r.fact("mdev.create.uevents", uevents_since(&uevents0).await);
    info(format!(
        "mtty parent directory: {}",
        listing(&w.root("sys/class/mdev_bus/mtty/"))
    ));
    info(format!(
        "mtty parent uevent: {:?}",
        std::fs::read_to_string(w.root("sys/class/mdev_bus/mtty/uevent"))
    ));
    info(format!(
        "mdev vfio-dev: {}; dev/vfio: {}",
        listing(&dev.join("vfio-dev")),
        listing(&w.root("dev/vfio"))
    ));
    info(format!(
        "type directory: {}",
        listing(&w.root("sys/class/mdev_bus/mtty/mdev_supported_types/mtty-2"))
    ));
    r.check(
        "mdev.create.sysfs",
        ty.as_deref() == Some("mtty-2") && node.as_ref().is_some_and(|n| n.exists()),
        format!("mdev_type {ty:?}, iommu_group {group:?}, node {node:?}"),
    );
    // Not compared: the simulator's /dev/vfio/N is a regular file standing in for the node.
    if w.real() {
        if let Some(n) = &node {
            use std::os::unix::fs::FileTypeExt;
            let ft = std::fs::metadata(n).map(|m| m.file_type());
            info(format!(
                "{} is a character device: {:?}",
                n.display(),
                ft.map(|f| f.is_char_device())
            ));
        }
    }
    if let Ok((_, path)) = &created {
        let d = w.device(path).await;
        let props = (
            d.kind().await.unwrap_or_default(),
            d.parent().await.unwrap_or_default(),
            d.type_id().await.unwrap_or_default(),
            d.owner().await.unwrap_or_default(),
            d.active().await.unwrap_or_default(),
            d.iommu_group().await.unwrap_or(-2),
        );
        r.fact(
            "mdev.create.device",
            format!(
                "kind={} parent={} type={} owner={} active={}",
                props.0, props.1, props.2, props.3, props.4
            ),
        );
        r.check(
            "mdev.create.iommu_group_property",
            group.as_deref() == Some(props.5.to_string().as_str()),
            format!("IommuGroup {} vs sysfs {group:?}", props.5),
        );
    }
    let avail1 = w.mtty_available().await;
    r.fact("mdev.available.after_create", &avail1);
    r.check(
        "mdev.available.after_create",
        avail1 == "mtty-1:22 mtty-2:11" && w.kernel_available() == avail1,
        format!("vgpud {avail1}, kernel {}", w.kernel_available()),
    );
    // The VFIO handshake is a real-kernel-only check, never a FACT: the simulator's
    // /dev/vfio/N is a regular file, so its ioctls cannot work.
    if w.real() {
        if let Some(g) = &group {
            let h = vfio_handshake(g.parse().unwrap_or(-1), &[U1]);
            r.check(
                "mdev.vfio_handshake",
                h.is_ok(),
                format!("{:?}", h.as_ref().err()),
            );
            if let Ok(s) = h {
                info(format!("mdev handshake: {s}"));
            }
        }
    }

    // Duplicate UUID through vgpud.
    let dup = m
        .create_device("mtty-1", opts(&[("uuid", Variant::from(U1))]))
        .await;
    let dup_name = dup.as_ref().err().map(error_name).unwrap_or("ok".into());
    r.fact("mdev.duplicate.error", &dup_name);
    r.check(
        "mdev.duplicate.vgpud",
        dup_name == "org.vgpud1.Error.Exists",
        format!("{:?}", dup.as_ref().map_err(error_text)),
    );
    if let Err(e) = &dup {
        info(format!("duplicate through vgpud: {}", error_text(e)));
    }
    if w.real() {
        // The kernel's own answer to a duplicate UUID, and vgpud's answer to a UUID another
        // tool used behind its back. Only the real kernel: on the simulated tree a write by another process than vgpud is a
        // plain file write (the simulator's side effects are applied by vgpud's own writes),
        // so there is no kernel to answer it.
        let kernel = std::fs::write(
            w.root("sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1/create"),
            U1,
        );
        let errno = kernel.as_ref().err().and_then(|e| e.raw_os_error());
        info(format!("kernel on a duplicate create: {kernel:?}"));
        r.check(
            "mdev.duplicate.kernel_eexist",
            errno == Some(libc::EEXIST),
            format!("{kernel:?}"),
        );
        let direct = std::fs::write(
            w.root("sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1/create"),
            U2,
        );
        let behind = m
            .create_device("mtty-1", opts(&[("uuid", Variant::from(U2))]))
            .await;
        info(format!(
            "direct create of {U2}: {direct:?}; then CreateDevice with it: {:?}",
            behind.as_ref().map_err(error_text)
        ));
        r.check(
            "mdev.duplicate.behind_vgpud",
            direct.is_ok()
                && behind.as_ref().err().map(error_name).as_deref()
                    == Some("org.vgpud1.Error.Exists"),
            format!("{:?}", behind.as_ref().map_err(error_text)),
        );
        let _ = std::fs::write(w.root(&format!("sys/bus/mdev/devices/{U2}/remove")), "1");
    }

    // Fill the parent: 22 ports left → 11 mtty-2, then no capacity.
    let mut filled = Vec::new();
    for _ in 0..11 {
        match m
            .create_device("mtty-2", opts(&[("persistent", Variant::from(false))]))
            .await
        {
            Ok((u, _)) => filled.push(u),
            Err(e) => {
                info(format!("fill: {}", error_text(&e)));
                break;
            }
        }
    }
    r.fact("mdev.fill.created", filled.len());
    let avail_full = w.mtty_available().await;
    r.fact("mdev.fill.available", &avail_full);
    let over = m.create_device("mtty-1", opts(&[])).await;
    let over_name = over.as_ref().err().map(error_name).unwrap_or("ok".into());
    r.fact("mdev.fill.over_error", &over_name);
    r.check(
        "mdev.capacity",
        filled.len() == 11
            && avail_full == "mtty-1:0 mtty-2:0"
            && w.kernel_available() == avail_full
            && over_name == "org.vgpud1.Error.NoCapacity",
        format!(
            "created {}, available {avail_full} (kernel {}), 12th: {:?}",
            filled.len(),
            w.kernel_available(),
            over.as_ref().map_err(error_text)
        ),
    );
    if w.real() {
        // Only the real kernel: on the simulated tree a write by another process than vgpud is a
        // plain file write (the simulator's side effects are applied by vgpud's own writes),
        // so there is no kernel to answer it.
        let kernel = std::fs::write(
            w.root("sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1/create"),
            U2,
        );
        info(format!("kernel on a create with no ports left: {kernel:?}"));
        let _ = std::fs::write(w.root(&format!("sys/bus/mdev/devices/{U2}/remove")), "1");
    }
    let mut removed = 0;
    for u in &filled {
        if m.remove_device(u, opts(&[])).await.is_ok() {
            removed += 1;
        }
    }
    r.fact("mdev.fill.removed", removed);

    // Remove.
    let uevents0 = uevent_counts();
    let rm = m.remove_device(U1, opts(&[])).await;
    r.fact("mdev.remove.uevents", uevents_since(&uevents0).await);
    let gone = !dev.exists();
    let node_gone = node.as_ref().is_none_or(|n| !n.exists());
    r.fact("mdev.remove.sysfs_gone", gone);
    r.fact("mdev.remove.dev_vfio_node_gone", node_gone);
    let avail2 = w.mtty_available().await;
    r.fact("mdev.remove.available", &avail2);
    r.check(
        "mdev.remove",
        rm.is_ok() && gone && node_gone && avail2 == "mtty-1:24 mtty-2:12",
        format!(
            "{:?}, sysfs gone {gone}, node gone {node_gone}, available {avail2}",
            rm.as_ref().map_err(error_text)
        ),
    );
    r.check(
        "mdev.remove.kernel_counts",
        w.kernel_available() == avail2,
        format!("kernel {} vs vgpud {avail2}", w.kernel_available()),
    );

    persistence(w, r).await;
}

async fn persistence(w: &mut World, r: &mut Report) {
    let m = w.manager().await;
    let p = m
        .create_device(
            "mtty-1",
            opts(&[
                ("uuid", Variant::from(P1)),
                ("owner", Variant::from("vm-p")),
            ]),
        )
        .await;
    let t = m
        .create_device(
            "mtty-2",
            opts(&[
                ("uuid", Variant::from(T1)),
                ("owner", Variant::from("vm-t")),
                ("persistent", Variant::from(false)),
            ]),
        )
        .await;
    let def = w.root(&format!("etc/mdevctl.d/mtty/{P1}"));
    r.fact("persist.definition_written", def.exists());
    r.fact(
        "persist.transient_has_no_definition",
        !w.root(&format!("etc/mdevctl.d/mtty/{T1}")).exists(),
    );
    r.check(
        "persist.create",
        p.is_ok() && t.is_ok() && def.exists(),
        format!(
            "{:?} {:?}",
            p.as_ref().map_err(error_text),
            t.as_ref().map_err(error_text)
        ),
    );
    if let Some(mdevctl) = w.args.mdevctl.clone() {
        let list = |a: &[&str]| {
            Command::new(&mdevctl)
                .env("MDEVCTL_ENV_ROOT", &w.args.root)
                .args(a)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_else(|e| format!("<{e}>"))
        };
        let active = list(&["list"]);
        let defined = list(&["list", "--defined"]);
        info(format!(
            "mdevctl list: {}",
            active.trim().replace('\n', " | ")
        ));
        let ok_active = active.contains(&format!("{P1} mtty mtty-1"))
            && active.contains(&format!("{T1} mtty mtty-2"));
        let ok_defined = defined.contains(&format!("{P1} mtty mtty-1")) && !defined.contains(T1);
        r.fact("persist.mdevctl_sees_active", ok_active);
        r.fact("persist.mdevctl_sees_defined", ok_defined);
        r.check(
            "persist.mdevctl",
            ok_active && ok_defined,
            format!("list: {active:?}; --defined: {defined:?}"),
        );
    }

    // kill -9 and restart: vgpud adopts what the kernel has, with its records.
    w.kill_vgpud();
    let started = w.start_vgpud().await;
    r.check("persist.restart", started.is_ok(), format!("{started:?}"));
    let lp = w.device_listed(P1).await;
    let lt = w.device_listed(T1).await;
    r.fact(
        "persist.after_kill.persistent",
        format!("{lp:?}").replace(P1, "P1"),
    );
    r.fact(
        "persist.after_kill.transient",
        format!("{lt:?}").replace(T1, "T1"),
    );
    let mut ok =
        lp.as_ref().is_some_and(|d| d.2 == "vm-p") && lt.as_ref().is_some_and(|d| d.2 == "vm-t");
    if let Some(d) = &lp {
        let dev = w
            .device(&OwnedObjectPath::try_from(d.3.clone()).expect("path"))
            .await;
        let (a, pe) = (
            d_active(&dev).await,
            dev.persistent().await.unwrap_or(false),
        );
        r.fact(
            "persist.after_kill.persistent_props",
            format!("active={a} persistent={pe}"),
        );
        ok &= a && pe;
    }
    r.check(
        "persist.reconcile_after_kill",
        ok && w.root(&format!("sys/bus/mdev/devices/{P1}")).exists(),
        format!("{lp:?} {lt:?}"),
    );
    r.fact("persist.after_kill.available", w.mtty_available().await);

    if w.real() {
        // Behind vgpud's back while it is down: the transient device goes, another tool makes
        // one. At start vgpud forgets the first and adopts the second. Only the real kernel: on the simulated tree a write by another process than vgpud is a
        // plain file write (the simulator's side effects are applied by vgpud's own writes),
        // so there is no kernel to answer it.
        w.kill_vgpud();
        let rm = std::fs::write(w.root(&format!("sys/bus/mdev/devices/{T1}/remove")), "1");
        let mk = std::fs::write(
            w.root("sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1/create"),
            X1,
        );
        let started = w.start_vgpud().await;
        let lt = w.device_listed(T1).await;
        let lx = w.device_listed(X1).await;
        r.check(
            "persist.reconcile_external_changes",
            rm.is_ok()
                && mk.is_ok()
                && started.is_ok()
                && lt.is_none()
                && lx
                    .as_ref()
                    .is_some_and(|d| d.0 == "mtty" && d.1 == "mtty-1" && d.2.is_empty()),
            format!("remove {rm:?}, create {mk:?}, start {started:?}, T1 {lt:?}, X1 {lx:?}"),
        );
        let avail = w.mtty_available().await;
        r.check(
            "persist.counts_after_external_changes",
            avail == "mtty-1:22 mtty-2:11" && w.kernel_available() == avail,
            format!("vgpud {avail}, kernel {}", w.kernel_available()),
        );
        let rx = m_remove(w, X1).await;
        r.check("persist.remove_adopted", rx.is_ok(), format!("{rx:?}"));
    } else {
        let rt = m_remove(w, T1).await;
        info(format!("remove T1: {rt:?}"));
    }
    let rp = m_remove(w, P1).await;
    let def_gone = !def.exists();
    r.fact("persist.remove.definition_gone", def_gone);
    let avail = w.mtty_available().await;
    r.fact("persist.end.available", &avail);
    r.check(
        "persist.remove",
        rp.is_ok() && def_gone && avail == "mtty-1:24 mtty-2:12",
        format!("{rp:?}, definition gone {def_gone}, available {avail}"),
    );
}

async fn d_active(d: &DeviceProxy<'_>) -> bool {
    d.active().await.unwrap_or(false)
}

async fn m_remove(w: &World, uuid: &str) -> Result<(), String> {
    w.manager()
        .await
        .remove_device(uuid, opts(&[]))
        .await
        .map_err(|e| error_text(&e))
}

/// PCI functions by vendor:device and class prefix, sorted by address.
fn find_pci(w: &World, vendor: &str, device: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(w.root("sys/bus/pci/devices"))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|a| {
                    let d = w.root(&format!("sys/bus/pci/devices/{a}"));
                    read_trim(&d.join("vendor")) == vendor && read_trim(&d.join("device")) == device
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn pci_driver(w: &World, addr: &str) -> String {
    link_name(&w.root(&format!("sys/bus/pci/devices/{addr}/driver"))).unwrap_or_default()
}

fn pci_group(w: &World, addr: &str) -> Option<String> {
    link_name(&w.root(&format!("sys/bus/pci/devices/{addr}/iommu_group")))
}

/// The framebuffers, `fb0 0000:00:03.0 bochs-drmdrmfb, fb1 …` (`sys/class/graphics/fb<N>`:
/// the device its `device` link names, its `name`).
fn framebuffers(w: &World) -> String {
    let dir = w.root("sys/class/graphics");
    let mut fbs: Vec<(u32, String)> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    let i: u32 = n.strip_prefix("fb")?.parse().ok()?;
                    let device = std::fs::canonicalize(dir.join(&n).join("device"))
                        .ok()
                        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
                        .unwrap_or_else(|| "-".into());
                    Some((
                        i,
                        format!("{n} {device} {}", read_trim(&dir.join(&n).join("name"))),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    fbs.sort();
    fbs.into_iter()
        .map(|(_, s)| s)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The console drivers, `vtcon0 (S) dummy device bind 0, vtcon1 …`.
fn vtconsoles(w: &World) -> String {
    let dir = w.root("sys/class/vtconsole");
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v.iter()
        .map(|id| {
            format!(
                "{id} {} bind {}",
                read_trim(&dir.join(id).join("name")),
                read_trim(&dir.join(id).join("bind"))
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether fbcon is bound (a console driver named "frame buffer device" with `bind` 1).
fn fbcon_bound(w: &World) -> bool {
    vtconsoles(w)
        .split(", ")
        .any(|v| v.contains("frame buffer device") && v.ends_with("bind 1"))
}

/// What the console looks like now, for INFO lines: framebuffers, console drivers, the
/// foreground console, and (real kernel) /proc/fb.
fn console_info(w: &World, when: &str) {
    info(format!("{when}: sys/class/graphics: {}", framebuffers(w)));
    info(format!("{when}: sys/class/vtconsole: {}", vtconsoles(w)));
    if w.real() {
        info(format!(
            "{when}: /proc/fb: {:?}",
            std::fs::read_to_string("/proc/fb").unwrap_or_default()
        ));
    }
}

async fn pci_section(w: &mut World, r: &mut Report) {
    let m = w.manager().await;
    let iommus: Vec<_> = std::fs::read_dir(w.root("sys/class/iommu"))
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    r.check(
        "pci.iommu_present",
        !iommus.is_empty(),
        "sys/class/iommu is empty",
    );

    // The emulated devices: two std VGAs 1234:1111 on bochs-drm (the console adapter, the boot
    // VGA device on the root bus, and GPU A with the e1000e 8086:10d3 as its function 1), and
    // GPU B, a qxl 1b36:0100 behind a PCIe-to-PCI bridge next to the edu device 1234:11e8.
    // The whole PCI tree, for the simulated profile shaped like this host.
    let mut all: Vec<String> = std::fs::read_dir(w.root("sys/bus/pci/devices"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    all.sort();
    for a in &all {
        let d = w.root(&format!("sys/bus/pci/devices/{a}"));
        info(format!(
            "pci {a} {}:{} class {} group {:?} driver {:?} parent {:?}",
            read_trim(&d.join("vendor")),
            read_trim(&d.join("device")),
            read_trim(&d.join("class")),
            pci_group(w, a),
            pci_driver(w, a),
            std::fs::canonicalize(&d)
                .ok()
                .and_then(|p| p.parent().map(|p| p.display().to_string()))
        ));
        info(format!(
            "pci {a} subsystem {}:{} revision {} numa_node {} boot_vga {:?} pci_bus {:?} net {:?} resource {:?}",
            read_trim(&d.join("subsystem_vendor")),
            read_trim(&d.join("subsystem_device")),
            read_trim(&d.join("revision")),
            read_trim(&d.join("numa_node")),
            std::fs::read_to_string(d.join("boot_vga")).ok().map(|s| s.trim().to_string()),
            listing(&d.join("pci_bus")),
            listing(&d.join("net")),
            std::fs::read_to_string(d.join("resource"))
                .unwrap_or_default()
                .lines()
                .filter(|l| !l.starts_with("0x0000000000000000 0x0000000000000000"))
                .collect::<Vec<_>>()
                .join(", "),
        ));
    }
    info(format!(
        "sys/bus/pci/drivers: {}",
        listing(&w.root("sys/bus/pci/drivers"))
    ));
    info(format!(
        "sys/class/iommu: {}",
        listing(&w.root("sys/class/iommu"))
    ));
    info(format!(
        "sys/kernel/iommu_groups: {}",
        listing(&w.root("sys/kernel/iommu_groups"))
    ));
    info(format!(
        "sys/class/graphics: {}",
        listing(&w.root("sys/class/graphics"))
    ));
    info(format!("dev/vfio: {}", listing(&w.root("dev/vfio"))));
    let vgas = find_pci(w, "0x1234", "0x1111");
    let qxls = find_pci(w, "0x1b36", "0x0100");
    let nics = find_pci(w, "0x8086", "0x10d3");
    let edus = find_pci(w, "0x1234", "0x11e8");
    info(format!(
        "VGA {vgas:?}, qxl {qxls:?}, e1000e {nics:?}, edu {edus:?}"
    ));
    for a in vgas.iter().chain(&qxls).chain(&nics).chain(&edus) {
        info(format!(
            "{a}: class {} group {:?} driver {:?}",
            read_trim(&w.root(&format!("sys/bus/pci/devices/{a}/class"))),
            pci_group(w, a),
            pci_driver(w, a)
        ));
    }
    for fb in std::fs::read_dir(w.root("sys/class/graphics"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
    {
        let dir = w.root(&format!("sys/class/graphics/{fb}"));
        info(format!(
            "sys/class/graphics/{fb} -> {:?}: {}",
            std::fs::canonicalize(&dir).ok(),
            listing(&dir)
        ));
    }
    info(format!(
        "sys/class/tty/tty0/active {}; proc/cmdline {:?}",
        read_trim(&w.root("sys/class/tty/tty0/active")),
        read_trim(&w.root("proc/cmdline"))
    ));
    console_info(w, "at start");
    let slot = |a: &str| a.rsplit_once('.').map_or(a, |(s, _)| s).to_string();
    // The console adapter: the boot VGA device. GPU A: the VGA whose function 1 is the e1000e.
    let console = vgas
        .iter()
        .find(|a| read_trim(&w.root(&format!("sys/bus/pci/devices/{a}/boot_vga"))) == "1")
        .cloned();
    let gpu_a = vgas
        .iter()
        .find(|a| nics.contains(&format!("{}.1", slot(a))))
        .cloned();
    let nic = gpu_a.as_ref().map(|a| format!("{}.1", slot(a)));
    let (Some(console), Some(gpu_a), Some(gpu_b), Some(nic), Some(edu)) =
        (console, gpu_a, qxls.first(), nic, edus.first())
    else {
        r.check(
            "pci.devices_present",
            false,
            "the VM lacks an emulated device",
        );
        return;
    };
    let (gpu_b, edu) = (gpu_b.clone(), edu.clone());
    r.fact(
        "pci.nic_is_function_1_of_gpu_a",
        nic.strip_suffix(".1") == gpu_a.strip_suffix(".0"),
    );
    r.fact(
        "pci.nic_shares_group_with_gpu_a",
        pci_group(w, &nic) == pci_group(w, &gpu_a),
    );
    r.fact(
        "pci.edu_shares_group_with_gpu_b",
        pci_group(w, &edu) == pci_group(w, &gpu_b),
    );
    r.fact(
        "pci.console_alone_in_its_group",
        std::fs::read_dir(w.root(&format!(
            "sys/kernel/iommu_groups/{}/devices",
            pci_group(w, &console).unwrap_or_default()
        )))
        .map(|d| d.count())
        .unwrap_or(0)
            == 1,
    );
    r.fact("pci.nic_driver", pci_driver(w, &nic));
    // Both std VGAs on bochs-drm, each with its framebuffer; fbcon draws on the console's.
    let fbs_at_start = framebuffers(w);
    r.fact("pci.console.framebuffers", &fbs_at_start);
    r.fact("pci.console.vtconsoles", vtconsoles(w));
    r.fact(
        "pci.console.tty0",
        read_trim(&w.root("sys/class/tty/tty0/active")),
    );
    r.check(
        "pci.bochs_drm_on_both_vgas",
        pci_driver(w, &console) == "bochs-drm" && pci_driver(w, &gpu_a) == "bochs-drm",
        format!(
            "drivers {:?}, {:?}",
            pci_driver(w, &console),
            pci_driver(w, &gpu_a)
        ),
    );
    r.check(
        "pci.fbcon_on_the_console_adapter",
        fbs_at_start.starts_with(&format!("fb0 {console} bochs-drmdrmfb, fb1 {gpu_a} "))
            && fbcon_bound(w),
        format!(
            "framebuffers {fbs_at_start}; console drivers {}",
            vtconsoles(w)
        ),
    );
    let gpus = m.list_gpus().await.unwrap_or_default();
    let mut ok = true;
    for a in [&gpu_a, &gpu_b, &console] {
        match gpus.iter().find(|g| &g.0 == a) {
            Some(g) => {
                let p = w.gpu(&g.4).await;
                let grp = p.iommu_group().await.unwrap_or(-2);
                let modes = p.sharing_modes().await.unwrap_or_default();
                let which = if a == &gpu_a {
                    "a"
                } else if a == &gpu_b {
                    "b"
                } else {
                    "console"
                };
                r.fact(
                    &format!("pci.gpu.{which}"),
                    format!(
                        "driver={:?} modes={modes:?} model={:?} group={grp}",
                        g.2, g.1
                    ),
                );
                if pci_group(w, a).as_deref() != Some(grp.to_string().as_str()) {
                    ok = false;
                    info(format!(
                        "{a}: IommuGroup {grp} vs sysfs {:?}",
                        pci_group(w, a)
                    ));
                }
                ok &= modes.iter().any(|m| m == "passthrough");
            }
            None => ok = false,
        }
    }
    let listed_others = gpus.iter().any(|g| g.0 == nic || g.0 == edu);
    r.fact("pci.non_display_listed", listed_others);
    r.check(
        "pci.discovery",
        ok && !listed_others,
        format!("ListGpus {gpus:?}"),
    );

    // A NIC is not a GPU.
    let nic_try = m
        .create_device(
            "passthrough",
            opts(&[("parent", Variant::from(nic.as_str()))]),
        )
        .await;
    let e = nic_try
        .as_ref()
        .err()
        .map(error_name)
        .unwrap_or("ok".into());
    r.fact("pci.passthrough_nic.error", &e);
    r.check(
        "pci.refuse_nic",
        e == "org.vgpud1.Error.InvalidArgument",
        format!("{:?}", nic_try.as_ref().map_err(error_text)),
    );

    // A GPU whose group holds a foreign device (the edu) is refused without force.
    let b_try = m
        .create_device(
            "passthrough",
            opts(&[("parent", Variant::from(gpu_b.as_str()))]),
        )
        .await;
    let e = b_try.as_ref().err().map(error_name).unwrap_or("ok".into());
    r.fact("pci.passthrough_shared_group.error", &e);
    r.check(
        "pci.refuse_shared_group",
        e == "org.vgpud1.Error.Unsafe" && pci_driver(w, &gpu_b).is_empty(),
        format!("{:?}", b_try.as_ref().map_err(error_text)),
    );

    // The console adapter is refused: fbcon draws tty1 on its framebuffer.
    let c_try = m
        .create_device(
            "passthrough",
            opts(&[("parent", Variant::from(console.as_str()))]),
        )
        .await;
    let e = c_try.as_ref().err().map(error_name).unwrap_or("ok".into());
    let msg = c_try.as_ref().err().map(error_text).unwrap_or_default();
    r.fact("pci.console.error", &e);
    r.fact("pci.console.message", &msg);
    r.check(
        "pci.refuse_console",
        e == "org.vgpud1.Error.Busy"
            && msg.contains("fbcon")
            && msg.contains("force")
            && pci_driver(w, &console) == "bochs-drm"
            && framebuffers(w) == fbs_at_start,
        format!("{msg:?}, driver {:?}", pci_driver(w, &console)),
    );

    // GPU A (the second adapter, its framebuffer fb1) with its function 1 (the e1000e, like a
    // GPU's audio function) goes to vfio-pci: a framebuffer that is not the console's is no
    // reason to refuse.
    let uevents0 = uevent_counts();
    let a_try = m
        .create_device(
            "passthrough",
            opts(&[
                ("parent", Variant::from(gpu_a.as_str())),
                ("uuid", Variant::from(PT1)),
                ("owner", Variant::from("vm-pt")),
            ]),
        )
        .await;
    let drivers = (pci_driver(w, &gpu_a), pci_driver(w, &nic));
    r.fact("pci.passthrough.drivers", format!("{drivers:?}"));
    r.fact("pci.passthrough.uevents", uevents_since(&uevents0).await);
    console_info(w, "GPU A passed through");
    r.fact("pci.passthrough.framebuffers", framebuffers(w));
    r.fact("pci.passthrough.vtconsoles", vtconsoles(w));
    r.fact(
        "pci.passthrough.nic_interfaces",
        std::fs::read_dir(w.root(&format!("sys/bus/pci/devices/{nic}/net")))
            .map(|d| d.count())
            .unwrap_or(0),
    );
    r.check(
        "pci.passthrough",
        a_try.is_ok() && drivers == ("vfio-pci".into(), "vfio-pci".into()),
        format!(
            "{:?}, drivers {drivers:?}",
            a_try.as_ref().map_err(error_text)
        ),
    );
    let group_a = pci_group(w, &gpu_a).unwrap_or_default();
    r.fact(
        "pci.passthrough.vfio_dev",
        format!(
            "A {}, A.1 {}",
            listing(&w.root(&format!("sys/bus/pci/devices/{gpu_a}/vfio-dev"))),
            listing(&w.root(&format!("sys/bus/pci/devices/{nic}/vfio-dev")))
        ),
    );
    info(format!(
        "passed-through {gpu_a}: {}; vfio-dev: {}; dev/vfio: {}",
        listing(&w.root(&format!("sys/bus/pci/devices/{gpu_a}"))),
        listing(&w.root(&format!("sys/bus/pci/devices/{gpu_a}/vfio-dev"))),
        listing(&w.root("dev/vfio"))
    ));
    if let Ok((_, path)) = &a_try {
        let d = w.device(path).await;
        let f = d.functions().await.unwrap_or_default();
        r.fact(
            "pci.passthrough.functions",
            format!("{f:?}").replace(&gpu_a, "A").replace(&nic, "A.1"),
        );
        r.check(
            "pci.passthrough.functions",
            f.contains(&(gpu_a.clone(), "bochs-drm".into()))
                && f.contains(&(nic.clone(), "e1000e".into())),
            format!("{f:?}"),
        );
        let g = d.iommu_group().await.unwrap_or(-2);
        r.check(
            "pci.passthrough.group",
            g.to_string() == group_a && w.root(&format!("dev/vfio/{group_a}")).exists(),
            format!("IommuGroup {g}, sysfs {group_a}"),
        );
    }
    let xml = m.get_hostdev_xml(PT1).await.unwrap_or_default();
    r.check(
        "pci.hostdev_xml",
        xml.matches("<hostdev").count() == 2
            && (xml.contains("function=\"0x1\"") || xml.contains("function='0x1'")),
        &xml,
    );
    // Real kernel only (not a FACT): the simulator's /dev/vfio/N is a regular file.
    if w.real() {
        let h = vfio_handshake(group_a.parse().unwrap_or(-1), &[&gpu_a, &nic]);
        r.check(
            "pci.vfio_handshake",
            h.is_ok(),
            format!("{:?}", h.as_ref().err()),
        );
        if let Ok(s) = h {
            info(format!("passthrough handshake: {s}"));
        }
    }

    // kill -9 while passed through; the restarted vgpud knows the device and the drivers.
    w.kill_vgpud();
    let started = w.start_vgpud().await;
    let listed = w.device_listed(PT1).await;
    r.fact(
        "pci.after_kill.listed",
        format!("{listed:?}").replace(&gpu_a, "A"),
    );
    r.check(
        "pci.reconcile_after_kill",
        started.is_ok()
            && listed.as_ref().is_some_and(|d| d.2 == "vm-pt")
            && pci_driver(w, &nic) == "vfio-pci",
        format!("{started:?} {listed:?}"),
    );

    // Removal gives the functions back.
    let uevents0 = uevent_counts();
    let rm = m_remove(w, PT1).await;
    r.fact(
        "pci.passthrough.remove.uevents",
        uevents_since(&uevents0).await,
    );
    // The e1000e probe is asynchronous to nothing here (drivers_probe), but give it a moment.
    let t0 = Instant::now();
    while (pci_driver(w, &nic) != "e1000e" || pci_driver(w, &gpu_a) != "bochs-drm")
        && t0.elapsed() < Duration::from_secs(5)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let drivers = (pci_driver(w, &gpu_a), pci_driver(w, &nic));
    let overrides = (
        read_trim(&w.root(&format!("sys/bus/pci/devices/{gpu_a}/driver_override"))),
        read_trim(&w.root(&format!("sys/bus/pci/devices/{nic}/driver_override"))),
    );
    let net = std::fs::read_dir(w.root(&format!("sys/bus/pci/devices/{nic}/net")))
        .map(|d| d.count())
        .unwrap_or(0);
    r.fact("pci.remove.drivers", format!("{drivers:?}"));
    r.fact("pci.remove.driver_override", format!("{overrides:?}"));
    console_info(w, "GPU A given back");
    r.fact("pci.remove.framebuffers", framebuffers(w));
    r.fact("pci.remove.vtconsoles", vtconsoles(w));
    r.check(
        "pci.remove_restores_drivers",
        rm.is_ok() && drivers == ("bochs-drm".into(), "e1000e".into()),
        format!("{rm:?}, drivers {drivers:?}"),
    );
    r.check(
        "pci.remove_restores_the_framebuffer",
        framebuffers(w) == fbs_at_start && fbcon_bound(w),
        format!("{} / {}", framebuffers(w), vtconsoles(w)),
    );
    r.check(
        "pci.remove_clears_override",
        !overrides.0.contains("vfio") && !overrides.1.contains("vfio"),
        format!("{overrides:?}"),
    );
    r.fact("pci.remove.nic_interfaces", net);
    r.check(
        "pci.nic_works_again",
        net > 0,
        "the e1000e has no network interface",
    );

    // With force, GPU B takes the edu along.
    let b_force = m
        .create_device(
            "passthrough",
            opts(&[
                ("parent", Variant::from(gpu_b.as_str())),
                ("uuid", Variant::from(PT2)),
                ("force", Variant::from(true)),
            ]),
        )
        .await;
    let drivers = (pci_driver(w, &gpu_b), pci_driver(w, &edu));
    r.fact("pci.force.drivers", format!("{drivers:?}"));
    r.check(
        "pci.force",
        b_force.is_ok() && drivers == ("vfio-pci".into(), "vfio-pci".into()),
        format!(
            "{:?}, drivers {drivers:?}",
            b_force.as_ref().map_err(error_text)
        ),
    );
    // Real kernel only (not a FACT): the simulator's /dev/vfio/N is a regular file.
    if w.real() {
        let g = pci_group(w, &gpu_b).unwrap_or_default();
        let h = vfio_handshake(g.parse().unwrap_or(-1), &[&gpu_b, &edu]);
        r.check(
            "pci.force.vfio_handshake",
            h.is_ok(),
            format!("{:?}", h.as_ref().err()),
        );
        if let Ok(s) = h {
            info(format!("forced passthrough handshake: {s}"));
        }
    }
    let rm = m_remove(w, PT2).await;
    let drivers = (pci_driver(w, &gpu_b), pci_driver(w, &edu));
    r.fact("pci.force.remove.drivers", format!("{drivers:?}"));
    r.check(
        "pci.force.remove",
        rm.is_ok() && drivers == (String::new(), String::new()),
        format!("{rm:?}, drivers {drivers:?}"),
    );

    // With force, the console adapter is taken too; fbcon lets the consoles go back to the
    // dummy console, and takes them again when bochs-drm is back.
    let c_force = m
        .create_device(
            "passthrough",
            opts(&[
                ("parent", Variant::from(console.as_str())),
                ("uuid", Variant::from(PT3)),
                ("force", Variant::from(true)),
            ]),
        )
        .await;
    let driver = pci_driver(w, &console);
    r.fact("pci.console_force.driver", &driver);
    console_info(w, "console adapter passed through");
    r.fact("pci.console_force.framebuffers", framebuffers(w));
    r.fact("pci.console_force.vtconsoles", vtconsoles(w));
    r.check(
        "pci.console_force",
        c_force.is_ok() && driver == "vfio-pci" && !fbcon_bound(w),
        format!(
            "{:?}, driver {driver:?}, {}",
            c_force.as_ref().map_err(error_text),
            vtconsoles(w)
        ),
    );
    // Real kernel only (not a FACT): the simulator's /dev/vfio/N is a regular file.
    if w.real() {
        let g = pci_group(w, &console).unwrap_or_default();
        let h = vfio_handshake(g.parse().unwrap_or(-1), &[&console]);
        r.check(
            "pci.console_force.vfio_handshake",
            h.is_ok(),
            format!("{:?}", h.as_ref().err()),
        );
        if let Ok(s) = h {
            info(format!("console adapter handshake: {s}"));
        }
    }
    let rm = m_remove(w, PT3).await;
    let driver = pci_driver(w, &console);
    r.fact("pci.console_force.remove.driver", &driver);
    console_info(w, "console adapter given back");
    r.fact("pci.console_force.remove.framebuffers", framebuffers(w));
    r.fact("pci.console_force.remove.vtconsoles", vtconsoles(w));
    r.check(
        "pci.console_force.remove",
        rm.is_ok() && driver == "bochs-drm" && framebuffers(w) == fbs_at_start && fbcon_bound(w),
        format!(
            "{rm:?}, driver {driver:?}, {} / {}",
            framebuffers(w),
            vtconsoles(w)
        ),
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = parse_args();
    let sections = args.sections.clone();
    let facts_file = args.facts.clone();
    let mut r = Report {
        passed: 0,
        failed: 0,
        facts: Vec::new(),
    };
    let mut w = World::start_bus(args);
    let metrics = METRICS.get_or_init(|| metrics_address(w.real())).clone();
    w.metrics = Some(metrics);
    let started = w.start_vgpud().await;
    r.check("start", started.is_ok(), format!("{started:?}"));
    if let Ok(t) = started {
        info(format!(
            "vgpud owned org.vgpud1 {} ms after its start",
            t.as_millis()
        ));
        if sections.iter().any(|s| s == "mdev") {
            mdev_section(&mut w, &mut r).await;
        }
        if sections.iter().any(|s| s == "pci") {
            pci_section(&mut w, &mut r).await;
        }
        if sections.iter().any(|s| s == "uevents") {
            uevents::section(&mut w, &mut r).await;
        }
        if sections.iter().any(|s| s == "storm") {
            if w.real() {
                storm::section(&mut w, &mut r).await;
            } else {
                info("storm: a measurement on the real kernel only; not run on the simulator");
            }
        }
    }
    let alive = w.daemon.as_mut().map(|d| matches!(d.try_wait(), Ok(None)));
    r.check(
        "vgpud_alive_at_end",
        alive == Some(true),
        "vgpud is not running",
    );
    w.stop();
    if let Some(f) = facts_file {
        let mut out = std::fs::File::create(&f).expect("facts file");
        for l in &r.facts {
            writeln!(out, "{l}").expect("write facts");
        }
    }
    println!("{} passed, {} failed", r.passed, r.failed);
    std::process::exit(if r.failed == 0 { 0 } else { 1 });
}
