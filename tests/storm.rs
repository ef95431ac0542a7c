//! Login storms: a thousand concurrent CreateDevice calls from many clients against a real
//! vgpud on a simulated 16-GPU host, with assertions on the final state: no GPU over-committed,
//! no request refused while the host still had room for its type, every refusal a real lack
//! of capacity, and everything made is listed.

mod common;

use std::collections::{BTreeMap, HashMap};

use common::proxy::{error_name, opts, ManagerProxy};
use common::setup::Setup;

const LARGE: &[&str] = &["large"];

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
    assert_eq!(made.len(), 512, "16 GPUs × 32 RTX8000-1Q");
    assert!(
        refused.iter().all(|e| *e == "org.vgpud1.Error.NoCapacity"),
        "every refusal is a lack of capacity: {refused:?}"
    );
    let gpus = per_gpu(&m).await;
    assert_eq!(gpus.len(), 16);
    for (gpu, types) in &gpus {
        assert_eq!(types.len(), 32, "{gpu} is full and not over-committed");
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
    assert_eq!(before, 16 * 12);
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
    // still have room now.
    refused_types.sort();
    refused_types.dedup();
    for ty in &refused_types {
        let left = m
            .get_capacity(ty, HashMap::new())
            .await
            .expect("GetCapacity");
        assert_eq!(left, 0, "{ty} was refused while the host had room for it");
    }
    // Equal-size rule and maxima per GPU, from the listed types.
    let all = m.list_types().await.expect("ListTypes");
    let fb_of = |gpu: &str, id: &str| {
        all.iter()
            .find(|t| t.0 == gpu && t.1 == id)
            .map(|t| (t.3, t.4))
            .expect("type listed")
    };
    for (gpu, ids) in per_gpu(&m).await {
        let sizes: Vec<(u64, u32)> = ids.iter().map(|id| fb_of(&gpu, id)).collect();
        let (fb, max) = sizes[0];
        assert!(
            sizes.iter().all(|(f, _)| *f == fb),
            "{gpu} runs one size: {ids:?}"
        );
        assert!(
            ids.len() as u32 <= max,
            "{gpu} holds at most {max}: {}",
            ids.len()
        );
    }
}
