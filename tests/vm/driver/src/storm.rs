//! The login-storm baseline on the real kernel (issue #13): in the VM, on the same mtty
//! parent, vgpud and the real mdevctl 1.4 each make N persistent `mtty-1` devices that the
//! kernel really creates, and each run is checked (PASS/FAIL: N devices of the type in
//! sysfs with their definitions, then all gone). The times are figures only, never checks:
//! `FIGURE storm.<name>=<value>` lines with the medians over the rounds, and `INFO` lines
//! per round.
//!
//! - vgpud, storm: N concurrent `CreateDevice("mtty-1", {persistent: true, parent: "mtty"})`
//!   spread over a few connections of their own (a login storm), then N concurrent
//!   `RemoveDevice`; ms per device = wall time ÷ N;
//! - vgpud, transient: the same storm with `persistent: false` (no definition written), a
//!   figure of what persistence costs;
//! - the bus: N `Peer.Ping` calls to vgpud one after the other, the floor of a call;
//! - vgpud, sequential: N calls one after the other on one connection, each call timed;
//! - mdevctl: per device `mdevctl define -u U -p mtty -t mtty-1 --auto` and
//!   `mdevctl start -u U`, one process per call as an operator's script would run them, then
//!   `mdevctl stop` and `mdevctl undefine` per device. vgpud is stopped (SIGTERM) for these:
//!   a host driven by mdevctl runs no vgpud, and a running vgpud would both compete for the
//!   VM's two CPUs and start again ("repair") an autostart device that `mdevctl stop`
//!   removed. It is started again afterwards (its start is not timed).
//!
//! - the kernel: N writes of a UUID to the type's `create`, N writes to `remove`, from this
//!   process with vgpud stopped: the floor under both tools' figures.
//! - where vgpud's time goes (a profile without a profiler; the VM has none): around each of
//!   its create storms, vgpud's CPU by part from its metrics (`--metrics-listen` on the VM's
//!   loopback): the process's whole, the kernel's own work in its sysfs writes, persistence,
//!   the engine's own work, applying uevents, NVML, and the rest (the bus, the async runtime,
//!   publishing signals), per device;
//! - vgpud warm: the persistent storm once more after the others. In rounds 0 and 1 vgpud was
//!   started just before its first storm, which costs more than later ones.
//!
//! The vgpud measured is `--storm-vgpud` where given (tests/vm/run gives an optimized build:
//! mdevctl, from `cargo install`, is one; the rest of the scenario runs the debug build).
//! N is all the room of `mtty-1` (its `available_instances`, 24 ports). The rounds alternate
//! which tool goes first. Real kernel only: on the simulated tree mdevctl's `start` writes a
//! UUID into a plain file and nothing happens, so nothing here is a FACT and the simulated
//! run does not run this section.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use zbus::Variant;

use super::{
    error_text, info, link_name, metrics_text, opts, read_trim, uevent_counts, uevents_text,
    ManagerProxy, Report, World,
};

const TYPE: &str = "mtty-1";
const PARENT: &str = "mtty";
const ROUNDS: usize = 3;
const CONNECTIONS: usize = 4;
/// The parts of its CPU time vgpud counts (`vgpud_PART_cpu_seconds_total`), the process's
/// whole last.
const CPU_PARTS: [&str; 7] = [
    "kernel_write",
    "persistence",
    "engine_call",
    "uevent",
    "nvml",
    "simulated_kernel",
    "process",
];

/// vgpud's CPU seconds by part (in the order of [`CPU_PARTS`]), from its metrics; `None`
/// when they cannot be read.
fn cpu_parts() -> Option<Vec<f64>> {
    let text = metrics_text()?;
    CPU_PARTS
        .iter()
        .map(|part| {
            let name = format!("vgpud_{part}_cpu_seconds_total ");
            text.lines()
                .find_map(|l| l.strip_prefix(name.as_str())?.trim().parse().ok())
        })
        .collect()
}

/// ms per device of each part between two readings, and what no part counts last (the
/// process's less every part): `None` when either reading is missing.
fn cpu_split(before: Option<Vec<f64>>, after: Option<Vec<f64>>, n: usize) -> Option<Vec<f64>> {
    let (a, b) = (before?, after?);
    let per: Vec<f64> = a
        .iter()
        .zip(&b)
        .map(|(a, b)| (b - a) * 1000.0 / n.max(1) as f64)
        .collect();
    let (process, parts) = per.split_last()?;
    let mut out = per.clone();
    out.push(process - parts.iter().sum::<f64>());
    Some(out)
}

/// One storm's split in words.
fn split_text(split: &Option<Vec<f64>>) -> String {
    match split {
        None => "vgpud's metrics could not be read".into(),
        Some(s) => format!(
            "vgpud's CPU {:.2} ms per device: the kernel's own in its writes {:.2}, persistence {:.2}, the engine {:.2}, uevents {:.2}, NVML {:.2}, the bus, runtime and publishing {:.2}",
            s[6], s[0], s[1], s[2], s[3], s[4], s[7]
        ),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn figure(name: &str, value: f64) {
    println!("FIGURE storm.{name}={value:.3}");
}

/// The mdev devices the kernel has, by UUID.
fn mdevs(w: &World) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(w.root("sys/bus/mdev/devices"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn available(w: &World) -> String {
    read_trim(&w.root(&format!(
        "sys/class/mdev_bus/{PARENT}/mdev_supported_types/{TYPE}/available_instances"
    )))
}

fn definition(w: &World, uuid: &str) -> std::path::PathBuf {
    w.root(&format!("etc/mdevctl.d/{PARENT}/{uuid}"))
}

/// Whether exactly `uuids` exist in sysfs, each an `mtty-1` device with its definition,
/// and the type has no room left.
fn verify_made(w: &World, uuids: &[String], room: usize) -> Result<(), String> {
    verify(w, uuids, room, true)
}

fn verify(w: &World, uuids: &[String], room: usize, defined: bool) -> Result<(), String> {
    if uuids.len() != room {
        return Err(format!("{} made, not {room}", uuids.len()));
    }
    let mut want = uuids.to_vec();
    want.sort();
    let have = mdevs(w);
    if have != want {
        return Err(format!(
            "sysfs has {} mdevs, {} of the {} made",
            have.len(),
            want.iter().filter(|u| have.contains(u)).count(),
            want.len()
        ));
    }
    for u in uuids {
        let ty = link_name(&w.root(&format!("sys/bus/mdev/devices/{u}/mdev_type")));
        if ty.as_deref() != Some(TYPE) {
            return Err(format!("{u}: mdev_type {ty:?}"));
        }
        if defined && !definition(w, u).exists() {
            return Err(format!("{u}: no definition in etc/mdevctl.d/{PARENT}"));
        }
    }
    let avail = available(w);
    if avail != "0" {
        return Err(format!("available_instances {avail}, not 0"));
    }
    Ok(())
}

/// Whether none of `uuids` is left, in sysfs or as a definition, and the room is back.
fn verify_gone(w: &World, uuids: &[String], room: usize) -> Result<(), String> {
    let have = mdevs(w);
    if !have.is_empty() {
        return Err(format!("{} mdevs left: {have:?}", have.len()));
    }
    let defs = uuids.iter().filter(|u| definition(w, u).exists()).count();
    if defs > 0 {
        return Err(format!("{defs} definitions left"));
    }
    let avail = available(w);
    if avail != room.to_string() {
        return Err(format!("available_instances {avail}, not {room}"));
    }
    Ok(())
}

/// After a failure: whatever is left of `uuids` goes, through sysfs and the definitions.
fn force_clean(w: &World, uuids: &[String]) {
    for u in uuids {
        let _ = std::fs::write(w.root(&format!("sys/bus/mdev/devices/{u}/remove")), "1");
        let _ = std::fs::remove_file(definition(w, u));
    }
}

/// Waits until vgpud's `ListTypes` shows `room` for `mtty-1` (it notices others' changes on
/// its periodic look).
async fn wait_room(w: &World, room: usize) -> Result<(), String> {
    let want = format!("{TYPE}:{room}");
    let t0 = Instant::now();
    loop {
        let avail = w.mtty_available().await;
        if avail.split(' ').any(|t| t == want) {
            return Ok(());
        }
        if t0.elapsed() > Duration::from_secs(10) {
            return Err(format!("vgpud lists {avail}, not {want}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn proxies(conns: &[zbus::Connection]) -> Result<Vec<ManagerProxy<'static>>, String> {
    let mut v = Vec::new();
    for c in conns {
        v.push(
            ManagerProxy::builder(c)
                .cache_properties(zbus::proxy::CacheProperties::No)
                .build()
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    Ok(v)
}

/// One timed run of calls: the wall time, each call's latency, and the errors.
struct Timed {
    wall_ms: f64,
    latencies: Vec<f64>,
    errors: Vec<String>,
}

/// N concurrent CreateDevice calls spread over the connections; the UUIDs made.
async fn vgpud_storm(
    ps: &[ManagerProxy<'static>],
    n: usize,
    persistent: bool,
) -> (Timed, Vec<String>) {
    let mut set = tokio::task::JoinSet::new();
    let t0 = Instant::now();
    for i in 0..n {
        let p = ps[i % ps.len()].clone();
        set.spawn(async move {
            let t = Instant::now();
            let r = p
                .create_device(
                    TYPE,
                    opts(&[
                        ("persistent", Variant::from(persistent)),
                        ("parent", Variant::from(PARENT)),
                    ]),
                )
                .await;
            (
                ms(t.elapsed()),
                r.map(|(u, _)| u).map_err(|e| error_text(&e)),
            )
        });
    }
    let mut timed = Timed {
        wall_ms: 0.0,
        latencies: Vec::new(),
        errors: Vec::new(),
    };
    let mut made = Vec::new();
    while let Some(j) = set.join_next().await {
        match j {
            Ok((lat, r)) => {
                timed.latencies.push(lat);
                match r {
                    Ok(u) => made.push(u),
                    Err(e) => timed.errors.push(e),
                }
            }
            Err(e) => timed.errors.push(format!("task: {e}")),
        }
    }
    timed.wall_ms = ms(t0.elapsed());
    (timed, made)
}

/// Concurrent RemoveDevice of `uuids` spread over the connections.
async fn vgpud_remove_storm(ps: &[ManagerProxy<'static>], uuids: &[String]) -> Timed {
    let mut set = tokio::task::JoinSet::new();
    let t0 = Instant::now();
    for (i, u) in uuids.iter().enumerate() {
        let p = ps[i % ps.len()].clone();
        let u = u.clone();
        set.spawn(async move {
            let t = Instant::now();
            let r = p.remove_device(&u, opts(&[])).await;
            (
                ms(t.elapsed()),
                r.map_err(|e| format!("{u}: {}", error_text(&e))),
            )
        });
    }
    let mut timed = Timed {
        wall_ms: 0.0,
        latencies: Vec::new(),
        errors: Vec::new(),
    };
    while let Some(j) = set.join_next().await {
        match j {
            Ok((lat, r)) => {
                timed.latencies.push(lat);
                if let Err(e) = r {
                    timed.errors.push(e);
                }
            }
            Err(e) => timed.errors.push(format!("task: {e}")),
        }
    }
    timed.wall_ms = ms(t0.elapsed());
    timed
}

/// N CreateDevice calls one after the other; then as many RemoveDevice.
async fn vgpud_sequential(p: &ManagerProxy<'static>, n: usize) -> (Timed, Vec<String>) {
    let mut timed = Timed {
        wall_ms: 0.0,
        latencies: Vec::new(),
        errors: Vec::new(),
    };
    let mut made = Vec::new();
    let t0 = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        let r = p
            .create_device(
                TYPE,
                opts(&[
                    ("persistent", Variant::from(true)),
                    ("parent", Variant::from(PARENT)),
                ]),
            )
            .await;
        timed.latencies.push(ms(t.elapsed()));
        match r {
            Ok((u, _)) => made.push(u),
            Err(e) => timed.errors.push(error_text(&e)),
        }
    }
    timed.wall_ms = ms(t0.elapsed());
    (timed, made)
}

async fn vgpud_remove_sequential(p: &ManagerProxy<'static>, uuids: &[String]) -> Timed {
    let mut timed = Timed {
        wall_ms: 0.0,
        latencies: Vec::new(),
        errors: Vec::new(),
    };
    let t0 = Instant::now();
    for u in uuids {
        let t = Instant::now();
        let r = p.remove_device(u, opts(&[])).await;
        timed.latencies.push(ms(t.elapsed()));
        if let Err(e) = r {
            timed.errors.push(format!("{u}: {}", error_text(&e)));
        }
    }
    timed.wall_ms = ms(t0.elapsed());
    timed
}

/// One mdevctl process; its failure as text.
fn mdevctl(bin: &Path, root: &Path, args: &[&str]) -> Result<(), String> {
    let out = Command::new(bin)
        .env("MDEVCTL_ENV_ROOT", root)
        .args(args)
        .output()
        .map_err(|e| format!("mdevctl {args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "mdevctl {args:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Per device, `define --auto` then `start`, one process per call: the time per device.
fn mdevctl_create(bin: &Path, root: &Path, uuids: &[String]) -> (Timed, Vec<String>) {
    let mut timed = Timed {
        wall_ms: 0.0,
        latencies: Vec::new(),
        errors: Vec::new(),
    };
    let mut made = Vec::new();
    let t0 = Instant::now();
    for u in uuids {
        let t = Instant::now();
        let r = mdevctl(
            bin,
            root,
            &["define", "-u", u, "-p", PARENT, "-t", TYPE, "--auto"],
        )
        .and_then(|()| mdevctl(bin, root, &["start", "-u", u]));
        timed.latencies.push(ms(t.elapsed()));
        match r {
            Ok(()) => made.push(u.clone()),
            Err(e) => timed.errors.push(e),
        }
    }
    timed.wall_ms = ms(t0.elapsed());
    (timed, made)
}

/// Per device, `stop` then `undefine`.
fn mdevctl_remove(bin: &Path, root: &Path, uuids: &[String]) -> Timed {
    let mut timed = Timed {
        wall_ms: 0.0,
        latencies: Vec::new(),
        errors: Vec::new(),
    };
    let t0 = Instant::now();
    for u in uuids {
        let t = Instant::now();
        let r = mdevctl(bin, root, &["stop", "-u", u])
            .and_then(|()| mdevctl(bin, root, &["undefine", "-u", u]));
        timed.latencies.push(ms(t.elapsed()));
        if let Err(e) = r {
            timed.errors.push(e);
        }
    }
    timed.wall_ms = ms(t0.elapsed());
    timed
}

/// The floor both tools stand on: the kernel's own create and remove, N writes of a UUID to
/// the type's `create` and of 1 to each device's `remove` from this process, vgpud stopped.
fn kernel_direct(w: &World, room: usize, round: usize, f: &mut Figures, bad: &mut Failures) {
    let uuids: Vec<String> = (0..room)
        .map(|i| format!("83b8f4f2-509f-382f-3c1e-5708{round:02x}{i:06x}"))
        .collect();
    let create = w.root(&format!(
        "sys/class/mdev_bus/{PARENT}/mdev_supported_types/{TYPE}/create"
    ));
    let mut errors = Vec::new();
    let mut made = Vec::new();
    let t0 = Instant::now();
    for u in &uuids {
        match std::fs::write(&create, u) {
            Ok(()) => made.push(u.clone()),
            Err(e) => errors.push(format!("create {u}: {e}")),
        }
    }
    let c = ms(t0.elapsed());
    let check = verify(w, &made, room, false).map_err(|e| e + &first_error(&errors));
    note(&mut bad.kernel, round, "direct create", check);
    errors.clear();
    let t0 = Instant::now();
    for u in &made {
        if let Err(e) = std::fs::write(w.root(&format!("sys/bus/mdev/devices/{u}/remove")), "1") {
            errors.push(format!("remove {u}: {e}"));
        }
    }
    let rm = ms(t0.elapsed());
    let check = verify_gone(w, &uuids, room).map_err(|e| e + &first_error(&errors));
    note(&mut bad.kernel, round, "direct remove", check.clone());
    if check.is_err() {
        force_clean(w, &uuids);
    }
    let per = c / room as f64;
    let rm_per = rm / made.len().max(1) as f64;
    info(format!(
        "storm round {round}: the kernel, {room} writes to {TYPE}/create: {c:.1} ms, {per:.2} ms per device; {} writes to remove: {rm:.1} ms, {rm_per:.2} ms per device",
        made.len()
    ));
    f.kernel_per_device.push(per);
    f.kernel_remove_per_device.push(rm_per);
}

/// UUIDs for mdevctl's devices: `-u` as an operator's script passes them.
fn mdevctl_uuids(round: usize, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("83b8f4f2-509f-382f-3c1e-5707{round:02x}{i:06x}"))
        .collect()
}

fn first_error(errors: &[String]) -> String {
    match errors.first() {
        Some(e) => format!("; {} errors, the first: {e}", errors.len()),
        None => String::new(),
    }
}

/// What each kind of run gave, over the rounds.
#[derive(Default)]
struct Figures {
    storm_per_device: Vec<f64>,
    storm_latencies: Vec<f64>,
    storm_remove_per_device: Vec<f64>,
    transient_per_device: Vec<f64>,
    ping: Vec<f64>,
    seq_per_call: Vec<f64>,
    seq_remove_per_call: Vec<f64>,
    mdevctl_per_device: Vec<f64>,
    mdevctl_remove_per_device: Vec<f64>,
    kernel_per_device: Vec<f64>,
    kernel_remove_per_device: Vec<f64>,
    /// vgpud's CPU per device of each storm, by part ([`cpu_split`]).
    persistent_cpu: Vec<Vec<f64>>,
    transient_cpu: Vec<Vec<f64>>,
    /// The persistent storm again, after the others (vgpud warm).
    warm_per_device: Vec<f64>,
    warm_cpu: Vec<Vec<f64>>,
}

/// What the checks found, over the rounds: the first failure of each kind.
#[derive(Default)]
struct Failures {
    vgpud_made: Option<String>,
    vgpud_removed: Option<String>,
    mdevctl_made: Option<String>,
    kernel: Option<String>,
    mdevctl_removed: Option<String>,
    restart: Option<String>,
}

fn note(slot: &mut Option<String>, round: usize, what: &str, r: Result<(), String>) {
    if let Err(e) = r {
        if slot.is_none() {
            *slot = Some(format!("round {round}, {what}: {e}"));
        }
    }
}

/// One storm of vgpud measured: its creates, vgpud's CPU split over them and the uevents
/// they brought, the devices checked, then removed by a storm and checked gone.
struct Measured {
    create: Timed,
    remove: Timed,
    made: usize,
    cpu: Option<Vec<f64>>,
    uevents: String,
}

/// Waits for the room, then runs a [`Measured`] storm of `room` creates (`persistent` or
/// not); a failure is noted under `what`.
async fn measured_storm(
    w: &World,
    ps: &[ManagerProxy<'static>],
    room: usize,
    persistent: bool,
    round: usize,
    what: &str,
    bad: &mut Failures,
) -> Measured {
    if let Err(e) = wait_room(w, room).await {
        note(
            &mut bad.vgpud_made,
            round,
            &format!("before the {what}"),
            Err(e),
        );
    }
    let (cpu0, ue0) = (cpu_parts(), uevent_counts());
    let (create, made) = vgpud_storm(ps, room, persistent).await;
    let cpu = cpu_split(cpu0, cpu_parts(), made.len());
    let uevents = uevents_text(&ue0, &uevent_counts());
    let check = verify(w, &made, room, persistent).map_err(|e| e + &first_error(&create.errors));
    note(&mut bad.vgpud_made, round, what, check);
    let remove = vgpud_remove_storm(ps, &made).await;
    let check = verify_gone(w, &made, room).map_err(|e| e + &first_error(&remove.errors));
    note(&mut bad.vgpud_removed, round, what, check.clone());
    if check.is_err() {
        force_clean(w, &made);
    }
    Measured {
        create,
        remove,
        made: made.len(),
        cpu,
        uevents,
    }
}

async fn vgpud_round(
    w: &World,
    conns: &[zbus::Connection],
    room: usize,
    round: usize,
    f: &mut Figures,
    bad: &mut Failures,
) {
    let ps = match proxies(conns).await {
        Ok(ps) => ps,
        Err(e) => {
            note(&mut bad.vgpud_made, round, "proxies", Err(e));
            return;
        }
    };

    // The bus's floor: Peer.Ping to vgpud, one after the other.
    let mut pings = Vec::new();
    for _ in 0..room {
        let t = Instant::now();
        let r = conns[0]
            .call_method(
                Some("org.vgpud1"),
                "/org/vgpud1",
                Some("org.freedesktop.DBus.Peer"),
                "Ping",
                &(),
            )
            .await;
        if r.is_ok() {
            pings.push(ms(t.elapsed()));
        }
    }
    f.ping.push(median(&pings));

    // The storm.
    let m = measured_storm(w, &ps, room, true, round, "storm", bad).await;
    let per = m.create.wall_ms / room as f64;
    let rm_per = m.remove.wall_ms / m.made.max(1) as f64;
    info(format!(
        "storm round {round}: vgpud, {room} concurrent CreateDevice over {} connections: {:.1} ms, {per:.2} ms per device, latency p50 {:.1} ms max {:.1} ms; {} concurrent RemoveDevice: {:.1} ms, {rm_per:.2} ms per device",
        ps.len(),
        m.create.wall_ms,
        median(&m.create.latencies),
        percentile(&m.create.latencies, 1.0),
        m.made,
        m.remove.wall_ms
    ));
    info(format!(
        "storm round {round}: persistent creates: {}; {}",
        split_text(&m.cpu),
        m.uevents
    ));
    f.persistent_cpu.extend(m.cpu);
    f.storm_per_device.push(per);
    f.storm_latencies.extend(&m.create.latencies);
    f.storm_remove_per_device.push(rm_per);

    // The same storm of transient devices (no definition to write): what persistence costs.
    let m = measured_storm(w, &ps, room, false, round, "transient storm", bad).await;
    let tper = m.create.wall_ms / room as f64;
    info(format!(
        "storm round {round}: vgpud, {room} concurrent transient CreateDevice: {:.1} ms, {tper:.2} ms per device",
        m.create.wall_ms
    ));
    info(format!(
        "storm round {round}: transient creates: {}; {}",
        split_text(&m.cpu),
        m.uevents
    ));
    f.transient_cpu.extend(m.cpu);
    f.transient_per_device.push(tper);

    // The persistent storm again: the first storm after vgpud starts costs more than later
    // ones (rounds 0 and 1 start vgpud just before theirs), so a warm vgpud is measured too.
    let m = measured_storm(w, &ps, room, true, round, "warm storm", bad).await;
    let wper = m.create.wall_ms / room as f64;
    info(format!(
        "storm round {round}: vgpud warm, {room} concurrent persistent CreateDevice: {:.1} ms, {wper:.2} ms per device; {}",
        m.create.wall_ms,
        split_text(&m.cpu)
    ));
    f.warm_cpu.extend(m.cpu);
    f.warm_per_device.push(wper);

    // One call after the other.
    if let Err(e) = wait_room(w, room).await {
        note(
            &mut bad.vgpud_made,
            round,
            "before the sequential run",
            Err(e),
        );
    }
    let (s, made) = vgpud_sequential(&ps[0], room).await;
    let check = verify_made(w, &made, room).map_err(|e| e + &first_error(&s.errors));
    note(&mut bad.vgpud_made, round, "sequential", check);
    let rm = vgpud_remove_sequential(&ps[0], &made).await;
    let check = verify_gone(w, &made, room).map_err(|e| e + &first_error(&rm.errors));
    note(&mut bad.vgpud_removed, round, "sequential", check.clone());
    if check.is_err() {
        force_clean(w, &made);
    }
    info(format!(
        "storm round {round}: vgpud, {room} sequential CreateDevice: {:.1} ms, per call p50 {:.2} ms max {:.2} ms; sequential RemoveDevice p50 {:.2} ms",
        s.wall_ms,
        median(&s.latencies),
        percentile(&s.latencies, 1.0),
        median(&rm.latencies)
    ));
    f.seq_per_call.push(median(&s.latencies));
    f.seq_remove_per_call.push(median(&rm.latencies));
}

async fn mdevctl_round(
    w: &mut World,
    bin: &Path,
    room: usize,
    round: usize,
    f: &mut Figures,
    bad: &mut Failures,
) {
    w.term_vgpud();
    let root = w.args.root.clone();
    let uuids = mdevctl_uuids(round, room);
    let (c, made) = mdevctl_create(bin, &root, &uuids);
    let check = verify_made(w, &made, room).map_err(|e| e + &first_error(&c.errors));
    note(&mut bad.mdevctl_made, round, "define + start", check);
    let rm = mdevctl_remove(bin, &root, &made);
    let check = verify_gone(w, &uuids, room).map_err(|e| e + &first_error(&rm.errors));
    note(
        &mut bad.mdevctl_removed,
        round,
        "stop + undefine",
        check.clone(),
    );
    if check.is_err() {
        force_clean(w, &uuids);
    }
    let per = c.wall_ms / room as f64;
    let rm_per = rm.wall_ms / made.len().max(1) as f64;
    info(format!(
        "storm round {round}: mdevctl, {room} × (define --auto + start): {:.1} ms, {per:.2} ms per device (p50 {:.2}, max {:.2}); {} × (stop + undefine): {:.1} ms, {rm_per:.2} ms per device",
        c.wall_ms,
        median(&c.latencies),
        percentile(&c.latencies, 1.0),
        made.len(),
        rm.wall_ms
    ));
    f.mdevctl_per_device.push(per);
    f.mdevctl_remove_per_device.push(rm_per);
    kernel_direct(w, room, round, f, bad);
    let started = w.start_vgpud().await;
    note(
        &mut bad.restart,
        round,
        "vgpud after mdevctl",
        started.map(|_| ()),
    );
}

pub async fn section(w: &mut World, r: &mut Report) {
    let Some(bin) = w.args.mdevctl.clone() else {
        r.check("storm.mdevctl", false, "no --mdevctl given");
        return;
    };
    let room: usize = available(w).parse().unwrap_or(0);
    let left = mdevs(w);
    r.check(
        "storm.room",
        room > 0 && left.is_empty(),
        format!(
            "{TYPE} available_instances {room}, mdevs already there: {}",
            left.len()
        ),
    );
    if room == 0 || !left.is_empty() {
        return;
    }
    let mut conns = Vec::new();
    for _ in 0..CONNECTIONS {
        match zbus::connection::Builder::address(w.address.as_str())
            .build()
            .await
        {
            Ok(c) => conns.push(c),
            Err(e) => info(format!("storm: connection: {e}")),
        }
    }
    if conns.is_empty() {
        r.check("storm.connections", false, "no connection to the bus");
        return;
    }
    let mut f = Figures::default();
    let mut bad = Failures::default();
    // The vgpud measured: an optimized build where one was given (mdevctl is one too).
    if let Some(v) = w.args.storm_vgpud.clone() {
        w.term_vgpud();
        w.args.vgpud = v;
        let started = w.start_vgpud().await;
        note(
            &mut bad.restart,
            0,
            "the optimized vgpud",
            started.map(|_| ()),
        );
    }
    info(format!(
        "storm: vgpud {}, mdevctl {}; VM up {} s",
        w.args.vgpud.display(),
        bin.display(),
        read_trim(Path::new("/proc/uptime"))
            .split(' ')
            .next()
            .unwrap_or("?")
    ));
    for round in 0..ROUNDS {
        if round % 2 == 0 {
            vgpud_round(w, &conns, room, round, &mut f, &mut bad).await;
            mdevctl_round(w, &bin, room, round, &mut f, &mut bad).await;
        } else {
            mdevctl_round(w, &bin, room, round, &mut f, &mut bad).await;
            vgpud_round(w, &conns, room, round, &mut f, &mut bad).await;
        }
    }
    for (name, problem) in [
        ("storm.vgpud_made_n", &bad.vgpud_made),
        ("storm.vgpud_removed_all", &bad.vgpud_removed),
        ("storm.mdevctl_made_n", &bad.mdevctl_made),
        ("storm.mdevctl_removed_all", &bad.mdevctl_removed),
        ("storm.kernel_direct", &bad.kernel),
        ("storm.vgpud_restarts", &bad.restart),
    ] {
        r.check(name, problem.is_none(), problem.clone().unwrap_or_default());
    }
    let end = w.mtty_available().await;
    r.check(
        "storm.end_state",
        end == format!("{TYPE}:{room} mtty-2:{}", room / 2) && mdevs(w).is_empty(),
        format!("vgpud lists {end}, sysfs has {} mdevs", mdevs(w).len()),
    );

    info(format!(
        "storm: done, VM up {} s",
        read_trim(Path::new("/proc/uptime"))
            .split(' ')
            .next()
            .unwrap_or("?")
    ));
    let vgpud = median(&f.storm_per_device);
    let seq = median(&f.seq_per_call);
    let mdevctl = median(&f.mdevctl_per_device);
    println!("FIGURE storm.devices={room}");
    println!("FIGURE storm.rounds={ROUNDS}");
    println!("FIGURE storm.connections={}", conns.len());
    figure("vgpud_ms_per_device", vgpud);
    figure("vgpud_latency_p50_ms", median(&f.storm_latencies));
    figure("vgpud_latency_max_ms", percentile(&f.storm_latencies, 1.0));
    figure(
        "vgpud_remove_ms_per_device",
        median(&f.storm_remove_per_device),
    );
    figure(
        "vgpud_transient_ms_per_device",
        median(&f.transient_per_device),
    );
    figure("vgpud_sequential_ms_per_call", seq);
    figure("vgpud_ping_ms", median(&f.ping));
    figure(
        "vgpud_sequential_remove_ms_per_call",
        median(&f.seq_remove_per_call),
    );
    figure("mdevctl_ms_per_device", mdevctl);
    figure(
        "mdevctl_remove_ms_per_device",
        median(&f.mdevctl_remove_per_device),
    );
    figure("kernel_ms_per_device", median(&f.kernel_per_device));
    figure(
        "kernel_remove_ms_per_device",
        median(&f.kernel_remove_per_device),
    );
    figure("ratio", mdevctl / vgpud);
    // vgpud over the kernel's own create (the floor under every tool), and what a bus call
    // alone costs over it: the targets are ≤ 2 (transient) and ≤ 3 (persistent); figures.
    let kernel = median(&f.kernel_per_device);
    let transient = median(&f.transient_per_device);
    figure("vgpud_transient_over_kernel", transient / kernel);
    figure("vgpud_persistent_over_kernel", vgpud / kernel);
    let warm = median(&f.warm_per_device);
    figure("vgpud_warm_ms_per_device", warm);
    figure("vgpud_warm_persistent_over_kernel", warm / kernel);
    figure("ping_over_kernel", median(&f.ping) / kernel);
    // Where vgpud's time goes, per device: each part's median over the rounds.
    for (kind, splits) in [
        ("persistent", &f.persistent_cpu),
        ("transient", &f.transient_cpu),
        ("warm_persistent", &f.warm_cpu),
    ] {
        if splits.is_empty() {
            info(format!(
                "storm: no CPU split of the {kind} storms (no metrics)"
            ));
            continue;
        }
        let names = CPU_PARTS.iter().copied().chain(["unaccounted"]);
        for (i, name) in names.enumerate() {
            let v: Vec<f64> = splits.iter().map(|s| s[i]).collect();
            figure(&format!("cpu_{kind}_{name}_ms_per_device"), median(&v));
        }
    }
    figure("ratio_sequential", mdevctl / seq);
    info(format!(
        "storm: medians of {ROUNDS} rounds of {room} persistent {TYPE} devices: vgpud {vgpud:.2} ms per device in a storm, {seq:.2} ms per call one after the other; mdevctl {mdevctl:.2} ms per device (define + start): {:.1} × (storm), {:.1} × (sequential) (target ≥ 15; a figure, not a check)",
        mdevctl / vgpud,
        mdevctl / seq
    ));
}
