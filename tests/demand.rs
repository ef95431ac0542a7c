//! The demand record end to end (issue #25): a real vgpud on a simulated host counts what is
//! asked for per type (requests, served cold, refused for lack of room, released), shows it
//! in its metrics with the forecast of the hour under way, and keeps it across a restart.

mod common;

use std::time::{Duration, Instant};

use common::daemon::{Daemon, Policy, TestBus, TestHost};
use vgpud_client::{Client, Options};

/// The value of the metric line that starts with `series` (`name{labels}`) in the textfile,
/// once it says `want`; fails after 10 s with the file.
fn wait_sample(prom: &std::path::Path, series: &str, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(prom).unwrap_or_default();
        let value = text
            .lines()
            .find_map(|l| l.strip_prefix(series))
            .and_then(|rest| rest.trim().parse::<f64>().ok());
        if value == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{series} is {value:?}, not {want}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The hour under way, as Unix time ÷ 3600.
fn unix_hour() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
        / 3600
}

#[tokio::test]
async fn requests_outcomes_and_releases_are_counted_per_type_and_kept_across_a_restart() {
    let textfile = tempfile::tempdir().expect("tempdir");
    let prom = textfile.path().join("vgpud.prom");
    let host = TestHost::new(&["nvidia-turing"]);
    // The textfile every second, so the test need not wait the default 15 s.
    std::fs::create_dir_all(host.path("etc/vgpud")).expect("etc/vgpud");
    std::fs::write(
        host.path("etc/vgpud/vgpud.toml"),
        format!(
            "[metrics]\ntextfile = {:?}\ntextfile_interval_s = 1\n",
            prom.display().to_string()
        ),
    )
    .expect("vgpud.toml");
    let bus = TestBus::start(Policy::Open);
    let mut daemon = Daemon::start(&bus, &host).await;
    let c = Client::from_connection(bus.connect().await)
        .await
        .expect("client");
    let gpu = c
        .list_gpus()
        .await
        .expect("ListGpus")
        .into_iter()
        .find(|g| g.driver == "nvidia")
        .expect("an NVIDIA GPU")
        .address;
    let on_gpu = || Options::new().str("parent", gpu.as_str());
    let hour_of_requests = unix_hour();
    let capacity = c.capacity("RTX6000-4Q", &on_gpu()).await.expect("capacity");
    assert!(capacity > 0);
    let mut made = Vec::new();
    for _ in 0..capacity {
        made.push(
            c.create_device("RTX6000-4Q", &on_gpu())
                .await
                .expect("create")
                .0,
        );
    }
    let refused = c
        .create_device("RTX6000-4Q", &on_gpu())
        .await
        .expect_err("the GPU is full");
    assert_eq!(refused.name(), "org.vgpud1.Error.NoCapacity");
    c.remove_device(&made[0], &Options::new())
        .await
        .expect("remove");
    // Calls that are not requests of a type the host has count nothing.
    let e = c
        .create_device("no-such-type", &Options::new())
        .await
        .expect_err("NotFound");
    assert_eq!(e.name(), "org.vgpud1.Error.NotFound");

    let type_id = c
        .list_devices()
        .await
        .expect("ListDevices")
        .into_iter()
        .find(|d| d.uuid == made[1])
        .expect("listed")
        .type_id;
    let series =
        |what: &str| format!("vgpud_demand_last_hour{{type=\"{type_id}\",what=\"{what}\"}}");
    let expected = [
        ("requests", f64::from(capacity) + 1.0),
        ("cold", f64::from(capacity)),
        ("warm", 0.0),
        ("refused", 1.0),
        ("released", 1.0),
    ];
    for (what, n) in expected {
        wait_sample(&prom, &series(what), n);
    }
    let text = std::fs::read_to_string(&prom).expect("textfile");
    assert!(
        text.contains(&format!("vgpud_demand_forecast_hour{{type=\"{type_id}\"}}")),
        "{text}"
    );
    assert!(!text.contains("no-such-type"), "{text}");

    // vgpuctl shows the same, by the type's name, and the forecast.
    let vgpuctl = |args: &[&str]| {
        let out = std::process::Command::new(common::vgpuctl::bin())
            .args(["--address", bus.address.as_str()])
            .args(args)
            .env("TZ", "UTC")
            .output()
            .expect("vgpuctl");
        assert!(out.status.success(), "vgpuctl {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let table = vgpuctl(&["demand", "RTX6000-4Q", "--hours", "2", "--step", "120"]);
    let header = table.lines().next().unwrap_or_default();
    assert!(
        header
            .split_whitespace()
            .eq(["TIME", "REQUESTS", "WARM", "COLD", "REFUSED", "RELEASED"]),
        "{table}"
    );
    let sums = table.lines().skip(1).fold([0u32; 5], |mut sum, l| {
        let cells: Vec<&str> = l.split_whitespace().collect();
        for (s, c) in sum.iter_mut().zip(&cells[cells.len() - 5..]) {
            *s += c.parse::<u32>().expect("a count");
        }
        sum
    });
    assert_eq!(sums, [capacity + 1, 0, capacity, 1, 1], "{table}");
    let rows: serde_json::Value = serde_json::from_str(&vgpuctl(&[
        "--json", "demand", &type_id, "--hours", "2", "--step", "5",
    ]))
    .expect("JSON");
    let requests: u64 = rows
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["requests"].as_u64().expect("requests"))
        .sum();
    assert_eq!(requests, u64::from(capacity) + 1);
    let forecast = vgpuctl(&["demand", "--forecast", "RTX6000-4Q", "--hours", "3"]);
    let lines: Vec<&str> = forecast.lines().collect();
    assert_eq!(lines.len(), 5, "a header, 3 hours, the error: {forecast}");
    assert!(
        lines[0].split_whitespace().eq(["HOUR", "FORECAST"]),
        "{forecast}"
    );
    for l in &lines[1..4] {
        let f = l
            .split_whitespace()
            .last()
            .and_then(|f| f.parse::<f64>().ok());
        assert!(f.is_some_and(|f| f >= 0.0), "{forecast}");
    }
    // The requests came in the hour under way, which the forecast has not seen complete
    // (unless the hour turned since: then it has one hour to compare).
    let error_line = if unix_hour() == hour_of_requests {
        "last week: no requests to compare"
    } else {
        "last week: "
    };
    assert!(lines[4].starts_with(error_line), "{forecast}");

    // A clean stop writes the record; the next vgpud reads it.
    daemon.stop();
    std::fs::remove_file(&prom).expect("rm textfile");
    let record =
        std::fs::read_to_string(host.path("var/lib/vgpud/demand")).expect("the record file");
    assert!(record.starts_with("vgpud-demand 1\ntype "), "{record}");
    let _daemon = Daemon::start(&bus, &host).await;
    for (what, n) in expected {
        wait_sample(&prom, &series(what), n);
    }
}
