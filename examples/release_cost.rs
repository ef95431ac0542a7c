//! What a release costs vgpud when a layout with pools is active: on a simulated host of 16
//! GPUs (the benchmarks' `large`), N desktops are made, then removed one by one through the
//! engine, with no active layout, with one whose pool does not keep released devices, and
//! with one whose pool does (`keep_released`; full, so nothing is kept, and no libvirt is
//! asked). Prints for each round the removes' median time, the read calls they made (this
//! thread's I/O accounting) and the CPU time of this thread (its schedstat), per remove; and
//! the median of the rounds' figures. Reports figures; asserts nothing.
//!
//! Run: `cargo run --example release_cost [-- N ROUNDS]` (360 and 5 unless given). The host
//! lives in `/dev/shm` where there is one, so the durable writes cost what tmpfs makes them.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vgpud::engine::{CreateRequest, Engine};
use vgpud::host::Host;

const TYPE: &str = "RTX8000-2Q";

fn layout(keep: bool, gpu: &str) -> String {
    format!(
        "[[gpu]]\naddress = \"{gpu}\"\ndevices = [{{ type = \"{TYPE}\", count = 1, owner = \"pool-vdi\", keep_released = {keep} }}]\n"
    )
}

/// A number of a file of `/proc/thread-self`: the first field of `file`, or the line
/// starting with `key`.
fn thread_figure(file: &str, key: Option<&str>) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/thread-self/{file}")).unwrap_or_default();
    let field = match key {
        Some(k) => text.lines().find_map(|l| l.strip_prefix(k)).unwrap_or(""),
        None => text.split_whitespace().next().unwrap_or(""),
    };
    field.trim().parse().unwrap_or(0)
}

/// What N removes cost: each one's time, the read calls and the CPU nanoseconds of all.
struct Cost {
    times: Vec<Duration>,
    reads: u64,
    cpu_ns: u64,
}

/// N removes with a layout whose pool keeps released devices or not (`None`: no layout).
fn run(n: usize, keep: Option<bool>) -> Cost {
    let base = if Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = tempfile::tempdir_in(base).expect("tempdir");
    vgpud_sim::write_profile("large", dir.path()).expect("profile");
    let engine = Arc::new(Engine::new(Host::simulated(dir.path())).expect("engine"));
    let mut gpus: Vec<String> = engine
        .list_gpus()
        .into_iter()
        .filter(|g| g.driver == "nvidia")
        .map(|g| g.address)
        .collect();
    gpus.sort();
    let layouts = dir.path().join("etc/vgpud/layouts");
    std::fs::create_dir_all(&layouts).expect("layouts");
    if let Some(keep) = keep {
        std::fs::write(layouts.join("vdi.toml"), layout(keep, &gpus[0])).expect("layout");
        vgpud::layout::pools::apply_named(&engine, "vdi", "ApplyLayout").expect("apply");
        vgpud::layout::pools::remember(engine.host(), "vdi").expect("remember");
    }
    let _ = vgpud::layout::reshape::PoolReshaper::install(&engine, None);
    let made: Vec<String> = (0..n)
        .map(|i| {
            let req = CreateRequest {
                type_query: TYPE.into(),
                owner: format!("vm-{i}"),
                ..CreateRequest::default()
            };
            engine.create_device(&req).expect("create").uuid
        })
        .collect();
    // Files changed in the last second are read each time (a cache's racy window).
    std::thread::sleep(Duration::from_millis(1100));
    let (reads, cpu) = (
        thread_figure("io", Some("syscr:")),
        thread_figure("schedstat", None),
    );
    let times = made
        .iter()
        .map(|u| {
            let t = Instant::now();
            engine.remove_device(u).expect("remove");
            t.elapsed()
        })
        .collect();
    let cpu_ns = thread_figure("schedstat", None) - cpu;
    // Less the two looks at the thread's figures.
    let reads = thread_figure("io", Some("syscr:")) - reads - 2;
    Cost {
        times,
        reads,
        cpu_ns,
    }
}

fn main() {
    let arg = |i: usize, or: usize| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(or)
    };
    let (n, rounds) = (arg(1, 360), arg(2, 5));
    let modes = [
        (None, "no layout"),
        (Some(false), "keep_released off"),
        (Some(true), "keep_released on"),
    ];
    // Per mode: the rounds' (median µs, reads per remove, CPU µs per remove).
    let mut figures: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); modes.len()];
    for round in 0..rounds {
        for (i, (keep, what)) in modes.iter().enumerate() {
            let mut cost = run(n, *keep);
            cost.times.sort();
            let f = (
                cost.times[n / 2].as_secs_f64() * 1e6,
                cost.reads as f64 / n as f64,
                cost.cpu_ns as f64 / 1e3 / n as f64,
            );
            figures[i].push(f);
            println!(
                "round {round} {what:<18} removes={n} median={:.0}us reads/remove={:.1} cpu/remove={:.0}us",
                f.0, f.1, f.2
            );
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (i, (_, what)) in modes.iter().enumerate() {
        let f = &figures[i];
        println!(
            "{what:<18} medians of {rounds} rounds: {:.0}us per remove, {:.1} reads per remove, {:.0}us CPU per remove",
            median(f.iter().map(|x| x.0).collect()),
            median(f.iter().map(|x| x.1).collect()),
            median(f.iter().map(|x| x.2).collect()),
        );
    }
}
