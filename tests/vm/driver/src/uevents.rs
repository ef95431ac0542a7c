//! The `uevents` section: devices made and removed behind vgpud's back, by `echo UUID >
//! create` and by `mdevctl start`, appear on the bus (and go) within 1 s with no call that
//! looks at the host and without a full look, the log naming the uevent; on the real kernel,
//! a driver unbind and bind made with `echo` is seen the same way. On the simulated host the
//! simulated kernel applies the writes into `create` and `remove` (it watches them), so the
//! same checks run there; a driver bind written into the tree is no kernel write there (use
//! `sim-host --poke`), so the driver check runs on the real kernel only.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{info, Report, World};

/// The time a change may take to reach the bus.
const LIMIT: Duration = Duration::from_secs(1);

/// vgpud's log of its current run.
fn log(w: &World) -> String {
    std::fs::read_to_string(w.args.work.join(format!("vgpud-{}.log", w.starts))).unwrap_or_default()
}

fn full_looks(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("full look at the host"))
        .count()
}

/// Polls until the device object exists (`true`) or not, at most [`LIMIT`]; how long.
async fn on_bus_within(w: &World, uuid: &str, present: bool) -> Option<Duration> {
    let start = Instant::now();
    let path = vgpud_client::paths::device_path(uuid);
    while start.elapsed() < LIMIT {
        let exists = w.device(&path).await.active().await.is_ok();
        if exists == present {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

fn echo(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("{}: {e}", path.display()))
}

/// One device made and removed by `make` and `remove`, seen through its uevents.
async fn made_behind_vgpuds_back(
    w: &World,
    r: &mut Report,
    name: &str,
    uuid: &str,
    make: impl FnOnce() -> Result<(), String>,
    remove: impl FnOnce() -> Result<(), String>,
) {
    let looks = full_looks(&log(w));
    if let Err(e) = make() {
        r.check(&format!("uevents.{name}.made"), false, e);
        return;
    }
    let seen = on_bus_within(w, uuid, true).await;
    // vgpud logs what a uevent led to once it is applied, so the line may follow the
    // object onto the bus by a moment. The kernel sends the mdev's `add`, then its `bind`,
    // both before it links the mdev's type: the one that finds the device whole names it.
    let names = |text: &str| {
        text.lines().any(|l| {
            l.contains("uevent")
                && (l.contains("action=add") || l.contains("action=bind"))
                && l.contains(uuid)
                && l.contains("added")
        })
    };
    let start = Instant::now();
    let mut text = log(w);
    while !names(&text) && start.elapsed() < LIMIT {
        tokio::time::sleep(Duration::from_millis(10)).await;
        text = log(w);
    }
    let named = names(&text);
    // On failure, what the log said of the device.
    let said: Vec<&str> = if named {
        Vec::new()
    } else {
        text.lines().filter(|l| l.contains(uuid)).collect()
    };
    r.check(
        &format!("uevents.{name}.appears"),
        seen.is_some() && named && full_looks(&text) == looks,
        format!(
            "on the bus: {seen:?}; the log names its uevent: {named}; full looks {} → {}{}",
            looks,
            full_looks(&text),
            if said.is_empty() {
                String::new()
            } else {
                format!("; the log of it: {}", said.join(" | "))
            }
        ),
    );
    // How soon it was there: a time measured, never compared between the two hosts.
    match seen {
        Some(t) if w.real() => println!("FIGURE uevents.{name}.ms={}", t.as_millis()),
        Some(t) => info(format!(
            "uevents: {name}: on the bus in {} ms",
            t.as_millis()
        )),
        None => {}
    }
    if let Err(e) = remove() {
        r.check(&format!("uevents.{name}.removed"), false, e);
        return;
    }
    let gone = on_bus_within(w, uuid, false).await;
    r.check(
        &format!("uevents.{name}.goes"),
        gone.is_some() && full_looks(&log(w)) == looks,
        format!("gone from the bus: {gone:?}"),
    );
}

/// The section.
pub async fn section(w: &mut World, r: &mut Report) {
    let create = w.root("sys/class/mdev_bus/mtty/mdev_supported_types/mtty-1/create");
    let echoed = "0e0e0e0e-0000-4000-8000-000000000001";
    let remove = w.root(&format!("sys/bus/mdev/devices/{echoed}/remove"));
    made_behind_vgpuds_back(
        w,
        r,
        "echo",
        echoed,
        || echo(&create, echoed),
        || echo(&remove, "1"),
    )
    .await;

    if let Some(mdevctl) = w.args.mdevctl.clone() {
        let started = "0e0e0e0e-0000-4000-8000-000000000002";
        let run = |args: &[&str]| -> Result<(), String> {
            let out = Command::new(&mdevctl)
                .env("MDEVCTL_ENV_ROOT", &w.args.root)
                .args(args)
                .output()
                .map_err(|e| e.to_string())?;
            if out.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).into_owned())
            }
        };
        made_behind_vgpuds_back(
            w,
            r,
            "mdevctl",
            started,
            || run(&["start", "-u", started, "-p", "mtty", "-t", "mtty-1"]),
            || run(&["stop", "-u", started]),
        )
        .await;
    } else {
        info("uevents: no --mdevctl given; the mdevctl start check is not run");
    }

    if !w.real() {
        info("uevents: a driver bind written into the simulated tree is no kernel write (sim-host --poke is); the driver check runs on the real kernel");
        return;
    }
    // A driver unbind and bind by echo, on a GPU that is not the console's adapter and has a
    // driver: GPU B (the qxl) where its driver is built, else GPU A (the second std VGA, on
    // bochs-drm; Debian's VM kernel here has no qxl driver loaded).
    let m = w.manager().await;
    let qxls = crate::find_pci(w, "0x1b36", "0x0100");
    let vgas = crate::find_pci(w, "0x1234", "0x1111");
    let not_console = |a: &String| {
        std::fs::read_to_string(w.root(&format!("sys/bus/pci/devices/{a}/boot_vga")))
            .map(|v| v.trim() != "1")
            .unwrap_or(true)
    };
    let Some((address, driver)) = qxls
        .iter()
        .chain(vgas.iter().filter(|a| not_console(a)))
        .map(|a| (a.clone(), crate::pci_driver(w, a)))
        .find(|(_, d)| !d.is_empty())
    else {
        info(format!(
            "uevents: no GPU but the console's adapter has a driver (qxl {qxls:?}, std VGA {vgas:?}); the driver check is not run"
        ));
        return;
    };
    info(format!(
        "uevents: the driver check unbinds and binds {address} ({driver})"
    ));
    let looks = full_looks(&log(w));
    let drivers = w.root("sys/bus/pci/drivers").join(&driver);
    let driver_now = |gpus: &[(String, String, String, String, zbus::OwnedObjectPath)]| {
        gpus.iter().find(|g| g.0 == address).map(|g| g.2.clone())
    };
    for (action, file, want) in [
        ("unbind", "unbind", String::new()),
        ("bind", "bind", driver.clone()),
    ] {
        if let Err(e) = echo(&drivers.join(file), &address) {
            r.check(&format!("uevents.driver.{action}"), false, e);
            return;
        }
        let start = Instant::now();
        let mut now = None;
        while start.elapsed() < LIMIT {
            now = driver_now(&m.list_gpus().await.unwrap_or_default());
            if now.as_deref().unwrap_or_default() == want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let text = log(w);
        let named = text.lines().any(|l| {
            l.contains("uevent") && l.contains(&format!("action={action}")) && l.contains(&address)
        });
        r.check(
            &format!("uevents.driver.{action}"),
            now.as_deref().unwrap_or_default() == want && named && full_looks(&text) == looks,
            format!("{address} driver {now:?} (want {want:?}); uevent in the log: {named}"),
        );
    }
}
