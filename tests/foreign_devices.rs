//! Devices vgpud did not make (issue #26: Nova, mdevctl and libvirt share the host with it).
//! An mdev defined by the real mdevctl and started by the kernel write `mdevctl start` makes
//! (libvirt's node-device driver runs mdevctl for its mdevs), and one made by an operator's
//! `echo UUID > create`, stay as they are, active, of their type, their definition byte for
//! byte, through: a layout that wants their GPUs for another type, a create through that
//! layout's pool (whose re-shape frees room only on GPUs holding nothing but spares), the
//! lease reclaim loop removing a leased device beside them, and a restart.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::setup::Setup;
use vgpud_client::{Client, Options};

const FOREIGN_DEFINED: &str = "f0e1a000-0000-4000-8000-000000000001";
const FOREIGN_ECHOED: &str = "f0e1a000-0000-4000-8000-000000000002";

/// The kernel write another process makes, through the simulated kernel (which sends the
/// uevent), as `vgpud sim-host --poke` does for a shell.
fn poke(s: &Setup, path: &str, value: &str) {
    let out = Command::new(common::daemon::vgpud_bin())
        .arg("--root")
        .arg(&s.host.root)
        .args(["sim-host", "--poke", path, value])
        .output()
        .expect("vgpud sim-host --poke");
    assert!(
        out.status.success(),
        "poke {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The type id of `name` on `gpu`.
async fn type_id(c: &Client, gpu: &str, name: &str) -> String {
    c.list_types()
        .await
        .expect("ListTypes")
        .into_iter()
        .find(|t| t.gpu == gpu && t.name.ends_with(name))
        .unwrap_or_else(|| panic!("{gpu} offers no {name}"))
        .id
}

/// The foreign devices as vgpud shows them: (type id, active, owner) each.
async fn foreign(c: &Client) -> Vec<(String, bool, String)> {
    let mut out = Vec::new();
    for uuid in [FOREIGN_DEFINED, FOREIGN_ECHOED] {
        let d = c
            .device(uuid)
            .await
            .unwrap_or_else(|e| panic!("{uuid} is gone: {e}"));
        out.push((d.type_id, d.active, d.owner));
    }
    out
}

#[tokio::test]
async fn devices_vgpud_did_not_make_survive_layouts_pools_reclaim_and_restarts() {
    let mut s = Setup::with_args(
        &["nvidia-turing"],
        &[
            "--libvirt-uri",
            "test:///default",
            "--reclaim-interval-s",
            "1",
        ],
    )
    .await;
    let c = Client::from_connection(s.conn.clone())
        .await
        .expect("client");
    let mut gpus = s.gpus_with_driver("nvidia").await;
    gpus.sort();
    assert_eq!(gpus.len(), 2, "{gpus:?}");
    let four = type_id(&c, &gpus[0], "RTX6000-4Q").await;
    let one = type_id(&c, &gpus[1], "RTX6000-1Q").await;
    let create =
        |gpu: &str, ty: &str| format!("sys/class/mdev_bus/{gpu}/mdev_supported_types/{ty}/create");

    // mdevctl defines one (as libvirt's node-device driver or Nova's operator would) and the
    // kernel starts it; an operator echoes another into being.
    let out = s
        .host
        .mdevctl(&["define", "-u", FOREIGN_DEFINED, "-p", &gpus[0], "-t", &four]);
    assert!(
        out.status.success(),
        "mdevctl define: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    poke(&s, &create(&gpus[0], &four), FOREIGN_DEFINED);
    poke(&s, &create(&gpus[1], &one), FOREIGN_ECHOED);
    let want = vec![
        (four.clone(), true, String::new()),
        (one.clone(), true, String::new()),
    ];
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let seen = [
            c.device(FOREIGN_DEFINED).await,
            c.device(FOREIGN_ECHOED).await,
        ];
        if seen.iter().all(|d| d.as_ref().is_ok_and(|d| d.active)) {
            break;
        }
        assert!(Instant::now() < deadline, "not adopted: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(foreign(&c).await, want);
    let definition = s
        .host
        .path(&format!("etc/mdevctl.d/{}/{FOREIGN_DEFINED}", gpus[0]));
    let defined = std::fs::read(&definition).expect("mdevctl's definition");

    // A layout that wants both GPUs for 2Q spares: it may refuse or skip, never take them.
    let dir = s.host.path("etc/vgpud/layouts");
    std::fs::create_dir_all(&dir).expect("layouts dir");
    let entry = |gpu: &str| {
        format!(
            "[[gpu]]\naddress = \"{gpu}\"\ndevices = [{{ type = \"RTX6000-2Q\", spares = 2, owner = \"pool-x\" }}]\n"
        )
    };
    std::fs::write(dir.join("take.toml"), entry(&gpus[0]) + &entry(&gpus[1])).expect("layout");
    let applied = c.apply_layout("take", false).await;
    eprintln!("ApplyLayout take: {applied:?}");
    assert_eq!(foreign(&c).await, want, "after ApplyLayout: {applied:?}");

    // A create through the pool: no GPU holds only spares, so nothing is re-shaped.
    let pooled = c
        .create_device(
            "RTX6000-2Q",
            &Options::new().str("pool", "pool-x").str("owner", "vm-a"),
        )
        .await;
    eprintln!("a create through pool-x: {pooled:?}");
    assert_eq!(foreign(&c).await, want, "after a pool create: {pooled:?}");

    // The reclaim loop removes a leased device beside them (its domain does not exist)...
    let (leased, _) = c
        .create_device(
            "RTX6000-1Q",
            &Options::new()
                .str("owner", "no-such-domain")
                .str("parent", gpus[1].as_str())
                .u32("lease_s", 1)
                .bool("persistent", false),
        )
        .await
        .expect("a leased device");
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.device(&leased).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "the leased device was not reclaimed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // ...and leaves these alone.
    assert_eq!(foreign(&c).await, want, "after a reclaim");

    // A restart adopts them again as they are.
    s.restart().await;
    let c = Client::from_connection(s.conn.clone())
        .await
        .expect("client");
    assert_eq!(foreign(&c).await, want, "after a restart");
    assert_eq!(
        std::fs::read(&definition).expect("mdevctl's definition"),
        defined,
        "mdevctl's definition changed"
    );
    for (uuid, gpu) in [(FOREIGN_DEFINED, &gpus[0]), (FOREIGN_ECHOED, &gpus[1])] {
        assert!(
            s.host
                .path(&format!("sys/bus/mdev/devices/{uuid}"))
                .exists(),
            "{uuid} on {gpu} is gone from sysfs"
        );
    }
}
