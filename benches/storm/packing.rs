//! The packing section of the storm benchmark: seeded days of VDI requests replayed through
//! the engine with each policy and first-fit.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use vgpud::engine::{CreateRequest, Engine, EngineError, Policy};
use vgpud::host::Host;

use super::{median, trace, BenchHost, MEAN_SESSION_HOURS};

/// Replays the trace through an engine on a fresh tree; `choose` orders nothing for the
/// policies (the engine places), and for first-fit the GPUs are tried in address order.
pub fn replay(requests: &[trace::Request], policy: Option<Policy>) -> (usize, f64) {
    // All on tmpfs: this measures placement, not the disk.
    let mem = tempfile::tempdir_in(if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    })
    .expect("tmpfs dir");
    let host = BenchHost {
        root: mem.path().join("host"),
        _disk: tempfile::tempdir().expect("dir"),
        _mem: mem,
    };
    vgpud::simulate::write_profile("large", &host.root).expect("profile");
    let engine = Engine::new(Host::simulated(&host.root)).expect("engine");
    let gpus: Vec<String> = engine.list_gpus().into_iter().map(|g| g.address).collect();
    // Events: arrivals and departures in time order; a departure frees what was accepted.
    let mut events: Vec<(f64, bool, usize)> = Vec::new();
    for (i, r) in requests.iter().enumerate() {
        events.push((r.start, true, i));
        events.push((r.end, false, i));
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut held: HashMap<usize, String> = HashMap::new();
    let mut accepted = 0;
    let started = Instant::now();
    for (_, arrival, i) in events {
        if !arrival {
            if let Some(uuid) = held.remove(&i) {
                engine.remove_device(&uuid).expect("remove");
            }
            continue;
        }
        let base = CreateRequest {
            type_query: requests[i].profile.to_string(),
            persistent: false,
            autostart: false,
            policy,
            ..CreateRequest::default()
        };
        let made = match policy {
            Some(_) => engine.create_device(&base).ok(),
            None => gpus.iter().find_map(|g| {
                let req = CreateRequest {
                    parent: Some(g.clone()),
                    ..base.clone()
                };
                match engine.create_device(&req) {
                    Ok(d) => Some(d),
                    Err(EngineError::NoCapacity { .. }) => None,
                    Err(e) => panic!("first-fit: {e}"),
                }
            }),
        };
        if let Some(d) = made {
            accepted += 1;
            held.insert(i, d.uuid);
        }
    }
    (accepted, started.elapsed().as_secs_f64())
}

/// The seeds of the packing days: each policy is replayed on each, and the figures are given
/// per day and as their median.
const SEEDS: [u64; 3] = [20261130, 20261201, 20261202];

pub fn packing_section() {
    println!(
        "\n== 4: packing: {} seeded days of 10,000 requests on 16 RTX 8000 (48 GiB each)",
        SEEDS.len()
    );
    let policies = [
        ("pack", Some(Policy::Pack)),
        ("spread", Some(Policy::Spread)),
        ("first-fit", None),
    ];
    let mut of_bound: Vec<Vec<f64>> = vec![Vec::new(); policies.len()];
    let mut pack_minus_ff = Vec::new();
    for seed in SEEDS {
        let requests = trace::day(seed, 10_000, MEAN_SESSION_HOURS);
        let peak = (0..96)
            .map(|w| {
                let t = w as f64 / 4.0 + 0.125;
                requests
                    .iter()
                    .filter(|r| r.start <= t && t < r.end)
                    .map(|r| r.framebuffer_gib)
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0);
        let bound = trace::upper_bound(&requests, 16.0, 288);
        println!(
            "day {seed}: peak demand {peak} GiB against {} GiB; upper bound {bound:.1} accepted",
            16 * 48
        );
        let mut accepted_by = Vec::new();
        for (i, (name, policy)) in policies.iter().enumerate() {
            let (accepted, secs) = replay(&requests, *policy);
            accepted_by.push(accepted);
            of_bound[i].push(100.0 * accepted as f64 / bound);
            println!(
                "  {name:10} accepted {accepted:6} ({:5.2} %) = {:6.2} % of the bound   ({secs:.1} s)",
                100.0 * accepted as f64 / requests.len() as f64,
                100.0 * accepted as f64 / bound
            );
        }
        pack_minus_ff.push(accepted_by[0] as f64 - accepted_by[2] as f64);
    }
    for (i, (name, _)) in policies.iter().enumerate() {
        println!(
            "{name:10} median {:6.2} % of the bound (target for pack: >= 99 %)",
            median(&mut of_bound[i])
        );
    }
    println!(
        "pack - first-fit, requests accepted per day: {pack_minus_ff:?} (target: above first-fit)"
    );
}
