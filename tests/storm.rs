//! Login storms: a thousand concurrent CreateDevice calls from many clients against a real
//! vgpud on a simulated 16-GPU host, with assertions on the final state: no GPU over-committed,
//! no request refused while the host still had room for its type, every refusal a real lack
//! of capacity, and everything made is listed.

mod common;

use std::collections::{BTreeMap, HashMap};

use common::proxy::{error_name, opts, ManagerProxy};
use common::setup::Setup;

const LARGE: &[&str] = &["large"];
/// The `large` profile's GPUs: sixteen Quadro RTX 8000 of 48 GB each.
const GPUS: usize = 16;
const BOARD_GIB: u32 = 48;
/// Turing runs at most 32 vGPUs on one GPU (hardware.md's time-sliced table: `1Q 32` on a
/// 48 GB board), whatever their size allows.
const VGPUS_PER_GPU: u32 = 32;

/// The framebuffer in GiB of an `RTX8000-<n><series>` type, from its name.
fn gib_of(ty: &str) -> u32 {
    ty.strip_prefix("RTX8000-")
        .map(|p| p.trim_end_matches(|c: char| c.is_ascii_alphabetic()))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{ty} is not an RTX8000-<n><series> type"))
}

/// How many vGPUs of `gib` GiB one empty RTX 8000 holds in equal-size mode.
fn max_of(gib: u32) -> u32 {
    (BOARD_GIB / gib).min(VGPUS_PER_GPU)
}

/// Runs `count` CreateDevice calls at once over `clients` connections, `types[i % len]` each;
/// returns (type, Ok(uuid) | Err(error name)) per call.
async fn storm(
    s: &Setup,
    clients: usize,
    count: usize,
    types: &[&str],
) -> Vec<(String, Result<String, String>)> {
    let mut conns = Vec::new();
    for _ in 0..clients {
        conns.push(s.bus.connect().await);
    }
    let mut calls = Vec::new();
    for i in 0..count {
        let conn = conns[i % clients].clone();
        let ty = types[i % types.len()].to_string();
        calls.push(tokio::spawn(async move {
            let m = ManagerProxy::new(&conn).await.expect("proxy");
            let r = m
                .create_device(&ty, opts(&[("owner", "storm")]))
                .await
                .map(|(uuid, _)| uuid)
                .map_err(|e| error_name(&e));
            (ty, r)
        }));
    }
    let mut out = Vec::new();
    for c in calls {
        out.push(c.await.expect("task"));
    }
    out
}

/// Per GPU: the types of its devices, from ListDevices and ListTypes.
async fn per_gpu(m: &ManagerProxy<'_>) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for d in m.list_devices().await.expect("ListDevices") {
        out.entry(d.1).or_default().push(d.2);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_creates_for_512_places_fill_every_gpu_and_no_more() {
    let s = Setup::new(LARGE).await;
    let m = s.manager().await;
    let results = storm(&s, 20, 1000, &["RTX8000-1Q"]).await;
    let made: Vec<&String> = results
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .collect();
    let refused: Vec<&String> = results
        .iter()
        .filter_map(|(_, r)| r.as_ref().err())
        .collect();
    let room = GPUS * max_of(gib_of("RTX8000-1Q")) as usize;
    assert_eq!(made.len(), room, "16 GPUs × 32 RTX8000-1Q");
    assert!(
        refused.iter().all(|e| *e == "org.vgpud1.Error.NoCapacity"),
        "every refusal is a lack of capacity: {refused:?}"
    );
    let gpus = per_gpu(&m).await;
    assert_eq!(gpus.len(), GPUS);
    for (gpu, types) in &gpus {
        assert_eq!(
            types.len(),
            max_of(1) as usize,
            "{gpu} is full and not over-committed"
        );
    }
    let listed = m.list_devices().await.expect("ListDevices");
    for uuid in &made {
        assert!(listed.iter().any(|d| &d.0 == *uuid), "{uuid} listed");
    }
    let left = m
        .get_capacity("RTX8000-1Q", HashMap::new())
        .await
        .expect("GetCapacity");
    assert_eq!(left, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mixed_storm_keeps_one_size_per_gpu_and_refuses_only_what_cannot_fit() {
    let s = Setup::new(LARGE).await;
    let m = s.manager().await;
    let types = [
        "RTX8000-1Q",
        "RTX8000-2Q",
        "RTX8000-4Q",
        "RTX8000-8A",
        "RTX8000-2B",
    ];
    let before: u32 = m
        .get_capacity("RTX8000-4Q", HashMap::new())
        .await
        .expect("GetCapacity");
    assert_eq!(
        before as usize,
        GPUS * max_of(gib_of("RTX8000-4Q")) as usize
    );
    let results = storm(&s, 25, 1000, &types).await;
    let mut refused_types: Vec<String> = Vec::new();
    for (ty, r) in &results {
        match r {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e, "org.vgpud1.Error.NoCapacity", "{ty}");
                refused_types.push(ty.clone());
            }
        }
    }
    // Capacity only shrinks in a create-only storm: a type refused while room was left would
    // still have room now. Room is the test's own arithmetic from the types' sizes: a GPU
    // takes a type when it is empty, or runs only that size below its maximum.
    refused_types.sort();
    refused_types.dedup();
    let all = m.list_types().await.expect("ListTypes");
    let id_of = |name: &str| {
        all.iter()
            .find(|t| t.2.ends_with(name))
            .map(|t| t.1.clone())
            .unwrap_or_else(|| panic!("{name} listed"))
    };
    let gib_by_id: HashMap<String, u32> = types
        .iter()
        .map(|name| (id_of(name), gib_of(name)))
        .collect();
    let gpus = per_gpu(&m).await;
    assert_eq!(gpus.len(), GPUS, "every GPU got devices: {gpus:?}");
    for (gpu, ids) in &gpus {
        let sizes: Vec<u32> = ids
            .iter()
            .map(|id| *gib_by_id.get(id).expect("a storm type"))
            .collect();
        let gib = sizes[0];
        assert!(
            sizes.iter().all(|g| *g == gib),
            "{gpu} runs one size: {ids:?}"
        );
        let max = max_of(gib);
        assert!(
            ids.len() as u32 <= max,
            "{gpu} holds at most {max} of {gib} GiB: {}",
            ids.len()
        );
        for ty in &refused_types {
            let fits = gib_of(ty) == gib && (ids.len() as u32) < max;
            assert!(
                !fits,
                "{ty} was refused while {gpu} had room for it ({} × {gib} GiB)",
                ids.len()
            );
        }
    }
}
