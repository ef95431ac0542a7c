//! Crash atomicity of the PCI operations: a writer killed between any two file operations of
//! a bind, an unbind, a `new_id`, VF enablement and disablement, and a `current_vgpu_type`
//! write; recovery must leave the tree as if the write had never started (bind, new_id,
//! enablement, setting a type) or had run to its end (unbind, disablement, releasing a type).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::fsx::crash;
use super::journal::{JOURNAL_FILE, STATE_DIR};
use super::pci_tests::{assert_same, bind, driver, sriov_manage, unbind, write, L40S0};
use super::tests::{create, host, snapshot, GPU0, U1};
use super::*;

type Snapshot = BTreeMap<PathBuf, String>;

/// Runs `op` with the writer killed after `k` file operations; whether it died.
fn killed_after<T>(k: usize, op: impl FnOnce() -> T) -> (bool, T) {
    crash::arm(k);
    let result = op();
    (crash::disarm(), result)
}

/// Recovers, itself killed at every step first when `torture` is set.
fn recover(host: &SimHost, torture: bool) {
    let sim = Simulator::new();
    if torture {
        for j in 0.. {
            let (died, result) = killed_after(j, || sim.recover(host.root()));
            if !died {
                result.expect("recover");
                break;
            }
        }
    } else {
        sim.recover(host.root()).expect("recover");
    }
}

/// Kills `op` after every possible number of file operations, recovers, and checks the tree is
/// `before` (an operation recovery undoes) or `after` (one it completes): `completes` says
/// which for a journal that was written. `reset` brings the tree back to `before` after a
/// completed operation. Ends with the operation done (the tree at `after`); returns the number
/// of torn trees seen.
fn torn_everywhere(
    host: &SimHost,
    what: &str,
    op: &dyn Fn() -> Result<(), Option<i32>>,
    completes: bool,
    reset: &dyn Fn(),
) -> usize {
    let root = host.root().to_path_buf();
    let journal = root.join(STATE_DIR).join(JOURNAL_FILE);
    let strip = |mut s: Snapshot| {
        s.retain(|p, _| !p.starts_with("run/vgpud-simulator/lock"));
        s
    };
    let before = strip(snapshot(&root));
    op().expect("the operation with nobody killed");
    let after = strip(snapshot(&root));
    assert_ne!(before, after, "{what} changes the tree");
    reset();
    assert_same(&strip(snapshot(&root)), &before, &format!("{what}: reset"));
    let mut torn = 0;
    for k in 0.. {
        let (died, result) = killed_after(k, op);
        if !died {
            result.expect("the operation with nobody killed");
            assert_same(&strip(snapshot(&root)), &after, what);
            break;
        }
        let wrote_journal = journal.exists();
        if strip(snapshot(&root)) != before && strip(snapshot(&root)) != after {
            torn += 1;
            assert!(wrote_journal, "{what}, step {k}: a torn tree has a journal");
        }
        recover(host, k % 9 == 4);
        let expected = if completes && wrote_journal {
            &after
        } else {
            &before
        };
        assert_same(
            &strip(snapshot(&root)),
            expected,
            &format!("{what} killed after {k} steps"),
        );
        if expected == &after {
            reset();
        }
    }
    torn
}

#[test]
fn killed_vf_enablement_is_undone_and_disablement_completed() {
    let (_dir, host) = host("nvidia-l40s");
    // The PF on pci-pf-stub through a dynamic id that also claims the VFs as they appear.
    unbind(&host, "nvidia", L40S0).expect("unbind");
    write(&host, "bus/pci/drivers/pci-pf-stub/new_id", "10de 26b9").expect("new_id");
    assert_eq!(driver(&host, L40S0).as_deref(), Some("pci-pf-stub"));
    let numvfs = format!("bus/pci/devices/{L40S0}/sriov_numvfs");
    let enable = || write(&host, &numvfs, "3");
    let disable = || write(&host, &numvfs, "0");
    let torn = torn_everywhere(&host, "enable 3 VFs", &enable, false, &|| {
        disable().expect("disable")
    });
    assert!(torn > 30, "only {torn} torn enablements");
    assert_eq!(
        driver(&host, "0000:41:00.6").as_deref(),
        Some("pci-pf-stub")
    );
    let torn = torn_everywhere(&host, "disable 3 VFs", &disable, true, &|| {
        enable().expect("enable")
    });
    assert!(torn > 10, "only {torn} torn disablements");
}

#[test]
fn killed_binds_are_undone_and_unbinds_completed() {
    let (_dir, host) = host("passthrough");
    let bdf = "0000:21:00.0";
    unbind(&host, "nvidia", bdf).expect("unbind");
    write(
        &host,
        &format!("bus/pci/devices/{bdf}/driver_override"),
        "vfio-pci",
    )
    .expect("override");
    let torn = torn_everywhere(
        &host,
        "vfio-pci bind",
        &|| bind(&host, "vfio-pci", bdf),
        false,
        &|| unbind(&host, "vfio-pci", bdf).expect("unbind"),
    );
    assert!(torn > 5, "only {torn} torn binds");
    let torn = torn_everywhere(
        &host,
        "vfio-pci unbind",
        &|| unbind(&host, "vfio-pci", bdf),
        true,
        &|| bind(&host, "vfio-pci", bdf).expect("bind"),
    );
    assert!(torn > 5, "only {torn} torn unbinds");
    // new_id binds every device it claims, or none.
    write(&host, &format!("bus/pci/devices/{bdf}/driver_override"), "").expect("clear");
    let console = "0000:2d:00.0";
    unbind(&host, "nvidia", console).expect("unbind");
    let torn = torn_everywhere(
        &host,
        "vfio-pci new_id",
        &|| write(&host, "bus/pci/drivers/vfio-pci/new_id", "10de 24b0"),
        false,
        &|| {
            write(&host, "bus/pci/drivers/vfio-pci/remove_id", "10de 24b0").expect("rm");
            unbind(&host, "vfio-pci", bdf).expect("unbind");
            unbind(&host, "vfio-pci", console).expect("unbind");
            std::fs::remove_dir_all(host.root().join("run/vgpud-simulator/dynids")).expect("rm");
        },
    );
    assert!(torn > 5, "only {torn} torn new_ids");
}

#[test]
fn killed_nvidia_binds_and_unbinds_keep_mdev_parents_whole() {
    let (_dir, host) = host("nvidia-turing");
    let bdf = "0000:3b:00.0";
    create(&host, GPU0, "nvidia-259", U1).expect("create");
    // Unbinding removes the parent's mdev first; recovery completes it.
    let torn = torn_everywhere(
        &host,
        "nvidia unbind with an mdev",
        &|| unbind(&host, "nvidia", bdf),
        true,
        &|| {
            bind(&host, "nvidia", bdf).expect("bind");
            create(&host, GPU0, "nvidia-259", U1).expect("create");
        },
    );
    assert!(torn > 10, "only {torn} torn unbinds");
    let torn = torn_everywhere(
        &host,
        "nvidia bind (mdev parent)",
        &|| bind(&host, "nvidia", bdf),
        false,
        &|| unbind(&host, "nvidia", bdf).expect("unbind"),
    );
    assert!(torn > 20, "only {torn} torn binds");
}

#[test]
fn killed_vendor_vfio_writes_are_finished() {
    let (_dir, host) = host("nvidia-l40s");
    assert_eq!(sriov_manage(&host, &["-e", L40S0]).status, 0);
    let vf = "0000:41:00.5";
    let file = format!("bus/pci/devices/{vf}/nvidia/current_vgpu_type");
    let set = || write(&host, &file, "1150");
    let clear = || write(&host, &file, "0");
    let torn = torn_everywhere(&host, "set a type", &set, false, &|| {
        clear().expect("clear")
    });
    assert!(torn > 5, "only {torn} torn sets");
    write(
        &host,
        &format!("bus/pci/devices/{vf}/nvidia/vgpu_params"),
        "frame_rate_limiter=0",
    )
    .expect("params");
    let torn = torn_everywhere(&host, "release a type", &clear, true, &|| {
        set().expect("set");
        write(
            &host,
            &format!("bus/pci/devices/{vf}/nvidia/vgpu_params"),
            "frame_rate_limiter=0",
        )
        .expect("params");
    });
    assert!(torn > 5, "only {torn} torn releases");
    // A vendor-VFIO VF (nvidia/ files and a vfio device) unbound and bound again.
    let torn = torn_everywhere(
        &host,
        "nvidia unbind (vendor VFIO)",
        &|| unbind(&host, "nvidia", vf),
        true,
        &|| bind(&host, "nvidia", vf).expect("bind"),
    );
    assert!(torn > 5, "only {torn} torn unbinds");
    let torn = torn_everywhere(
        &host,
        "nvidia bind (vendor VFIO)",
        &|| bind(&host, "nvidia", vf),
        false,
        &|| unbind(&host, "nvidia", vf).expect("unbind"),
    );
    assert!(torn > 5, "only {torn} torn binds");
}
