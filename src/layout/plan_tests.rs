//! The layout plan's order and refusals, on hand-made host views.

use super::file::parse;
use super::plan::{diff, plan, Action, DeviceView, GpuView, HostView, InstanceView, Step};
use crate::gpu_control::{SchedulerPolicy, SchedulerSetting};

fn layout(text: &str) -> super::Layout {
    parse(std::path::Path::new("t.toml"), text).expect("layout parses")
}

fn l40s(address: &str) -> GpuView {
    GpuView {
        address: address.into(),
        model: "NVIDIA L40S".into(),
        vfs: Some((0, 32)),
        ..GpuView::default()
    }
}

fn h200() -> GpuView {
    GpuView {
        address: "0000:49:00.0".into(),
        model: "NVIDIA H200".into(),
        vfs: Some((0, 32)),
        mig: Some((false, false)),
        profiles: vec![
            (19, "1g.18gb".into(), 1),
            (9, "3g.71gb".into(), 3),
            (0, "7g.141gb".into(), 7),
        ],
        ..GpuView::default()
    }
}

fn dev(uuid: &str, ty: &str, owner: &str, active: bool, created: u64) -> DeviceView {
    DeviceView {
        uuid: uuid.into(),
        type_id: format!("nvidia-{ty}"),
        type_name: format!("NVIDIA {ty}"),
        owner: owner.into(),
        active,
        created,
    }
}

fn names(steps: &[Step]) -> Vec<String> {
    steps
        .iter()
        .map(|s| {
            let mut n = format!("{} {}", s.action.name(), s.action.subject());
            if s.refused.is_some() {
                n.push_str(" REFUSED");
            }
            n
        })
        .collect()
}

const DAY: &str = r#"
[[gpu]]
model = "nvidia l40s"
vfs = 32
heterogeneous = true
scheduler = { policy = "equal-share", timeslice_ms = 3 }
devices = [{ type = "L40S-4Q", count = 2, owner = "pool-day" }]
"#;

#[test]
fn a_fresh_gpu_gets_vfs_then_modes_then_devices() {
    let host = HostView {
        gpus: vec![l40s("0000:41:00.0")],
    };
    let p = plan(&layout(DAY), &host);
    assert_eq!(
        names(&p.steps),
        [
            "set-vf-count 32",
            "set-heterogeneous-mode on",
            "set-scheduler equal-share timeslice_ms=3",
            "create-device L40S-4Q owner=pool-day",
            "create-device L40S-4Q owner=pool-day",
        ]
    );
    assert!(p.steps.iter().all(|s| s.gpu == "0000:41:00.0"));
}

#[test]
fn a_host_as_the_layout_says_needs_nothing() {
    let mut g = l40s("0000:41:00.0");
    g.vfs = Some((32, 32));
    g.heterogeneous = true;
    g.scheduler = Some(SchedulerSetting {
        policy: SchedulerPolicy::EqualShare,
        timeslice_ms: 3,
        ..SchedulerSetting::default()
    });
    g.devices = vec![
        dev("a", "L40S-4Q", "pool-day", true, 1),
        dev("b", "L40S-4Q", "pool-day", true, 2),
        dev("c", "L40S-8Q", "someone", true, 3),
    ];
    let host = HostView { gpus: vec![g] };
    let l = layout(DAY);
    assert_eq!(plan(&l, &host).steps, []);
    assert_eq!(diff(&l, &host), []);
}

#[test]
fn a_mig_change_turns_vfs_off_destroys_free_instances_then_builds_largest_first() {
    let mut g = h200();
    g.vfs = Some((32, 32));
    g.instances = vec![InstanceView {
        id: 5,
        profile_id: 19,
        profile: "1g.18gb".into(),
        device: String::new(),
    }];
    g.mig = Some((true, true));
    let l = layout(
        r#"
[[gpu]]
address = "0000:49:00.0"
mig = false
vfs = 16
"#,
    );
    let p = plan(
        &l,
        &HostView {
            gpus: vec![g.clone()],
        },
    );
    assert_eq!(
        names(&p.steps),
        [
            "set-vf-count 0",
            "destroy-gpu-instance 5",
            "set-mig-mode off",
            "set-vf-count 16"
        ]
    );

    g.mig = Some((false, false));
    g.instances.clear();
    g.vfs = Some((0, 32));
    let l = layout(
        r#"
[[gpu]]
address = "0000:49:00.0"
mig = true
vfs = 32
gpu_instances = ["1g.18gb", "3g.71gb", "19"]
"#,
    );
    let p = plan(&l, &HostView { gpus: vec![g] });
    assert_eq!(
        names(&p.steps),
        [
            "set-mig-mode on",
            "set-vf-count 32",
            "create-gpu-instance 3g.71gb",
            "create-gpu-instance 1g.18gb",
            "create-gpu-instance 1g.18gb",
        ]
    );
}

#[test]
fn a_running_device_that_is_not_the_pools_is_never_touched_and_is_named() {
    let mut g = l40s("0000:41:00.0");
    g.vfs = Some((16, 32));
    g.devices = vec![
        dev("guest-1", "L40S-4Q", "win10-vm", true, 1),
        dev("pool-1", "L40S-4Q", "pool-day", true, 2),
    ];
    let l = layout(
        r#"
[[gpu]]
address = "0000:41:00.0"
vfs = 32
devices = [{ type = "L40S-4Q", count = 0, owner = "pool-day" }]
"#,
    );
    let p = plan(&l, &HostView { gpus: vec![g] });
    assert_eq!(
        names(&p.steps),
        ["remove-device pool-1", "set-vf-count 32 REFUSED"]
    );
    let why = p.steps[1].refused.as_deref().unwrap_or_default();
    assert!(why.contains("guest-1 (owner win10-vm)"), "{why}");
    assert!(!p
        .steps
        .iter()
        .any(|s| s.action == Action::RemoveDevice("guest-1".into())));
}

#[test]
fn a_shrinking_pool_gives_up_inactive_devices_first_then_the_newest() {
    let mut g = l40s("0000:41:00.0");
    g.devices = vec![
        dev("old", "L40S-4Q", "pool", true, 1),
        dev("new", "L40S-4Q", "pool", true, 9),
        dev("idle", "L40S-4Q", "pool", false, 5),
        dev("mid", "L40S-4Q", "pool", true, 5),
        // The same pool's tag with a type the layout no longer wants goes too.
        dev("wrong-size", "L40S-8Q", "pool", true, 1),
    ];
    let l = layout(
        r#"
[[gpu]]
address = "0000:41:00.0"
devices = [{ type = "l40s-4q", count = 2, owner = "pool" }]
"#,
    );
    let p = plan(
        &l,
        &HostView {
            gpus: vec![g.clone()],
        },
    );
    assert_eq!(
        names(&p.steps),
        [
            "remove-device idle",
            "remove-device new",
            "remove-device wrong-size"
        ]
    );
    let d = diff(&l, &HostView { gpus: vec![g] });
    let items: Vec<String> = d
        .iter()
        .map(|d| format!("{} {} {}", d.item, d.wanted, d.actual))
        .collect();
    assert_eq!(
        items,
        [
            "devices l40s-4q owner pool 2 4",
            "devices NVIDIA L40S-8Q owner pool 0 1"
        ]
    );
}

#[test]
fn an_instance_a_device_uses_is_never_destroyed() {
    let mut g = h200();
    g.mig = Some((true, true));
    g.vfs = Some((32, 32));
    g.instances = vec![
        InstanceView {
            id: 1,
            profile_id: 9,
            profile: "3g.71gb".into(),
            device: "vdi-1".into(),
        },
        InstanceView {
            id: 2,
            profile_id: 9,
            profile: "3g.71gb".into(),
            device: String::new(),
        },
    ];
    let l = layout(
        r#"
[[gpu]]
address = "0000:49:00.0"
gpu_instances = ["3g.71gb"]
"#,
    );
    // The free one goes; the one in use is what the layout keeps.
    let p = plan(
        &l,
        &HostView {
            gpus: vec![g.clone()],
        },
    );
    assert_eq!(names(&p.steps), ["destroy-gpu-instance 2"]);
    let l = layout(
        r#"
[[gpu]]
address = "0000:49:00.0"
gpu_instances = ["7g.141gb"]
"#,
    );
    let p = plan(&l, &HostView { gpus: vec![g] });
    assert_eq!(
        names(&p.steps),
        [
            "destroy-gpu-instance 1 REFUSED",
            "destroy-gpu-instance 2",
            "create-gpu-instance 7g.141gb"
        ]
    );
    assert!(p.steps[0]
        .refused
        .as_deref()
        .unwrap_or_default()
        .contains("vdi-1"));
}

#[test]
fn an_address_entry_wins_over_a_model_entry_and_a_missing_address_is_reported() {
    let host = HostView {
        gpus: vec![l40s("0000:81:00.0"), l40s("0000:41:00.0")],
    };
    let l = layout(
        r#"
[[gpu]]
model = "NVIDIA L40S"
vfs = 32
[[gpu]]
address = "0000:81:00.0"
vfs = 16
[[gpu]]
address = "0000:99:00.0"
vfs = 8
"#,
    );
    let p = plan(&l, &host);
    let got: Vec<(String, String)> = p
        .steps
        .iter()
        .map(|s| (s.gpu.clone(), s.action.subject()))
        .collect();
    assert_eq!(
        got,
        [
            ("0000:41:00.0".to_string(), "32".to_string()),
            ("0000:81:00.0".to_string(), "16".to_string())
        ]
    );
    assert_eq!(p.unmatched.len(), 1);
    assert_eq!(p.unmatched[0].selector, "address 0000:99:00.0");
}

#[test]
fn a_scheduler_change_waits_for_running_vgpus_but_devices_are_still_made() {
    let mut g = l40s("0000:41:00.0");
    g.vfs = Some((32, 32));
    g.devices = vec![dev("desk", "L40S-4Q", "alice", true, 1)];
    let l = layout(
        r#"
[[gpu]]
address = "0000:41:00.0"
scheduler = { policy = "fixed-share" }
devices = [{ type = "L40S-4Q", count = 1, owner = "pool" }]
"#,
    );
    let p = plan(&l, &HostView { gpus: vec![g] });
    assert_eq!(
        names(&p.steps),
        [
            "set-scheduler fixed-share REFUSED",
            "create-device L40S-4Q owner=pool"
        ]
    );
    assert!(!p.steps[0].action.is_structural());
}

#[test]
fn a_model_that_matches_no_gpu_is_unmatched_naming_the_host_models() {
    let mut h = h200();
    h.model = "H200 SXM 141GB".into();
    let host = HostView {
        gpus: vec![l40s("0000:41:00.0"), h.clone(), l40s("0000:81:00.0")],
    };
    let l =
        layout("[[gpu]]\nmodel = \"H200\"\nvfs = 32\n[[gpu]]\nmodel = \"nvidia l40s\"\nvfs = 8\n");
    let p = plan(&l, &host);
    assert_eq!(names(&p.steps), ["set-vf-count 8", "set-vf-count 8"]);
    assert_eq!(p.unmatched.len(), 1, "{:?}", p.unmatched);
    let u = &p.unmatched[0];
    assert_eq!(u.selector, "model H200");
    assert_eq!(
        u.reason,
        r#"no GPU of the host is of this model (the host's models: "H200 SXM 141GB", "NVIDIA L40S")"#
    );
    let d = diff(&l, &host);
    assert_eq!(
        (d[0].gpu.as_str(), d[0].item.as_str(), d[0].wanted.as_str()),
        ("model H200", "gpu", "present")
    );
    assert!(
        d[0].actual.starts_with("absent (the host's models: "),
        "{d:?}"
    );
    // The host's model, in another case, matches.
    let l = layout("[[gpu]]\nmodel = \"h200 sxm 141gb\"\nvfs = 32\n");
    assert!(plan(&l, &HostView { gpus: vec![h] }).unmatched.is_empty());
}

#[test]
fn a_plan_longer_than_one_answer_is_refused() {
    let host = HostView {
        gpus: (0..5)
            .map(|i| l40s(&format!("0000:{:02x}:00.0", 0x41 + i)))
            .collect(),
    };
    let l = layout(
        "[[gpu]]\nmodel = \"NVIDIA L40S\"\ndevices = [{ type = \"L40S-4Q\", count = 1024, owner = \"p\" }]\n",
    );
    let p = plan(&l, &host);
    assert_eq!(p.steps.len(), 5 * 1024);
    let e = super::plan::within_answer(p.steps.len()).expect_err("too long");
    assert!(e.to_string().contains("5120 rows"), "{e}");
    assert!(super::plan::within_answer(super::plan::MAX_ROWS).is_ok());
}

#[test]
fn only_the_gpus_structure_is_structural() {
    let structural = [
        Action::SetVfCount(4),
        Action::SetMigMode(true),
        Action::DestroyGpuInstance(1),
        Action::CreateGpuInstance("1g.18gb".into()),
    ];
    let not = [
        Action::SetHeterogeneousMode(true),
        Action::SetScheduler(SchedulerSetting::default()),
        Action::RemoveDevice("u".into()),
        Action::CreateDevice {
            type_query: "L40S-4Q".into(),
            owner: "pool".into(),
            params: None,
        },
    ];
    for a in &structural {
        assert!(
            a.is_structural(),
            "{a:?} is structural: later steps depend on it"
        );
    }
    for a in &not {
        assert!(!a.is_structural(), "{a:?} is not structural");
    }
}

#[test]
fn a_refusal_names_at_most_eight_devices_and_counts_the_rest() {
    let refusal = |n: usize| {
        let mut g = l40s("0000:41:00.0");
        g.devices = (0..n)
            .map(|i| dev(&format!("u{i}"), "L40S-4Q", "vm", true, i as u64))
            .collect();
        let p = plan(
            &layout("[[gpu]]\nmodel = \"NVIDIA L40S\"\nvfs = 8\n"),
            &HostView { gpus: vec![g] },
        );
        p.steps[0]
            .refused
            .clone()
            .expect("the VF change is refused")
    };
    let eight = (0..8)
        .map(|i| format!("u{i} (owner vm)"))
        .collect::<Vec<_>>()
        .join(", ");
    assert_eq!(
        refusal(8),
        format!("VFs change only without devices: {eight} on the GPU")
    );
    assert_eq!(
        refusal(9),
        format!("VFs change only without devices: {eight}, and 1 more on the GPU")
    );
    assert_eq!(
        refusal(10),
        format!("VFs change only without devices: {eight}, and 2 more on the GPU")
    );
}

#[test]
fn mig_asked_of_a_gpu_without_mig_is_refused_and_mig_off_is_nothing_to_do() {
    let host = HostView {
        gpus: vec![l40s("0000:41:00.0")],
    };
    let p = plan(
        &layout("[[gpu]]\nmodel = \"NVIDIA L40S\"\nmig = true\n"),
        &host,
    );
    assert_eq!(names(&p.steps), ["set-mig-mode on REFUSED"]);
    assert_eq!(p.steps[0].refused.as_deref(), Some("the GPU has no MIG"));
    let p = plan(
        &layout("[[gpu]]\nmodel = \"NVIDIA L40S\"\nmig = false\n"),
        &host,
    );
    assert!(p.steps.is_empty(), "{:?}", names(&p.steps));
}

#[test]
fn the_host_models_named_are_at_most_eight_and_the_rest_counted() {
    let host = HostView {
        gpus: (0..10)
            .map(|i| {
                let mut g = l40s(&format!("0000:{:02x}:00.0", 0x41 + i));
                g.model = format!("Model {i}");
                g
            })
            .collect(),
    };
    let p = plan(&layout("[[gpu]]\nmodel = \"H200\"\nvfs = 32\n"), &host);
    let named = (0..8)
        .map(|i| format!("\"Model {i}\""))
        .collect::<Vec<_>>()
        .join(", ");
    assert_eq!(
        p.unmatched[0].reason,
        format!("no GPU of the host is of this model (the host's models: {named}, and 2 more)")
    );
}

#[test]
fn a_pending_mig_mode_other_than_the_layouts_is_set_back() {
    // MIG on now, but off at the next reset (someone asked): the layout's `mig = true` sets it
    // on again, and a layout that agrees with both has nothing to do.
    let mut g = h200();
    g.mig = Some((true, false));
    let l = layout("[[gpu]]\nmodel = \"NVIDIA H200\"\nmig = true\n");
    let p = plan(
        &l,
        &HostView {
            gpus: vec![g.clone()],
        },
    );
    assert_eq!(names(&p.steps), ["set-mig-mode on"]);
    g.mig = Some((true, true));
    assert!(plan(&l, &HostView { gpus: vec![g] }).steps.is_empty());
}

#[test]
fn a_vf_count_changes_through_zero_and_a_gpu_without_sriov_refuses_any_but_zero() {
    let mut g = l40s("0000:41:00.0");
    g.vfs = Some((4, 32));
    let host = HostView {
        gpus: vec![g.clone()],
    };
    let vfs = |n: u32| layout(&format!("[[gpu]]\nmodel = \"NVIDIA L40S\"\nvfs = {n}\n"));
    assert_eq!(
        names(&plan(&vfs(8), &host).steps),
        ["set-vf-count 0", "set-vf-count 8"]
    );
    assert_eq!(names(&plan(&vfs(0), &host).steps), ["set-vf-count 0"]);
    assert!(plan(&vfs(4), &host).steps.is_empty());
    g.vfs = None;
    let host = HostView { gpus: vec![g] };
    let p = plan(&vfs(4), &host);
    assert_eq!(names(&p.steps), ["set-vf-count 4 REFUSED"]);
    assert_eq!(p.steps[0].refused.as_deref(), Some("the GPU has no SR-IOV"));
    assert!(plan(&vfs(0), &host).steps.is_empty());
}

#[test]
fn gpu_instances_need_mig_on_and_none_asked_is_nothing_to_do() {
    let host = HostView { gpus: vec![h200()] };
    let gi = |list: &str| {
        layout(&format!(
            "[[gpu]]\nmodel = \"NVIDIA H200\"\ngpu_instances = [{list}]\n"
        ))
    };
    let p = plan(&gi("\"1g.18gb\""), &host);
    assert_eq!(names(&p.steps), ["create-gpu-instance 1g.18gb REFUSED"]);
    assert_eq!(p.steps[0].refused.as_deref(), Some("MIG is off on the GPU"));
    assert!(plan(&gi(""), &host).steps.is_empty());
}

#[test]
fn a_scheduler_already_set_is_nothing_to_do_and_another_policy_is_a_step() {
    let mut g = h200();
    g.scheduler = Some(SchedulerSetting {
        policy: SchedulerPolicy::FixedShare,
        ..SchedulerSetting::default()
    });
    let host = HostView { gpus: vec![g] };
    let sched = |p: &str| {
        layout(&format!(
            "[[gpu]]\nmodel = \"NVIDIA H200\"\nscheduler = {{ policy = \"{p}\" }}\n"
        ))
    };
    assert!(plan(&sched("fixed-share"), &host).steps.is_empty());
    assert_eq!(
        names(&plan(&sched("equal-share"), &host).steps),
        ["set-scheduler equal-share"]
    );
    // A number the layout gives must match; one it leaves out (0) takes what the GPU has.
    let mut g = h200();
    g.scheduler = Some(SchedulerSetting {
        policy: SchedulerPolicy::EqualShare,
        timeslice_ms: 3,
        ..SchedulerSetting::default()
    });
    let host = HostView { gpus: vec![g] };
    let slice = |ms: u32| {
        layout(&format!(
            "[[gpu]]\nmodel = \"NVIDIA H200\"\nscheduler = {{ policy = \"equal-share\", timeslice_ms = {ms} }}\n"
        ))
    };
    assert!(plan(&slice(3), &host).steps.is_empty());
    assert_eq!(plan(&slice(5), &host).steps.len(), 1);
    assert!(plan(&sched("equal-share"), &host).steps.is_empty());
}

#[test]
fn the_diff_shows_a_pending_mig_mode_names_instances_by_id_and_a_scheduler_only_when_it_differs() {
    let mut g = h200();
    g.mig = Some((true, false));
    g.instances = vec![InstanceView {
        id: 5,
        profile_id: 19,
        profile: "1g.18gb".into(),
        device: String::new(),
    }];
    g.scheduler = Some(SchedulerSetting {
        policy: SchedulerPolicy::FixedShare,
        ..SchedulerSetting::default()
    });
    let host = HostView { gpus: vec![g] };
    let items = |text: &str| -> Vec<(String, String, String)> {
        diff(&layout(text), &host)
            .into_iter()
            .map(|d| (d.item, d.wanted, d.actual))
            .collect()
    };
    let t = |s: &str, w: &str, a: &str| (s.to_string(), w.to_string(), a.to_string());
    let head = "[[gpu]]\nmodel = \"NVIDIA H200\"\n";
    assert_eq!(
        items(&format!("{head}mig = true\n")),
        [t("mig", "on", "on (pending off)")]
    );
    // An instance asked for by its profile's id, or its name in another case, is the one there.
    assert!(items(&format!("{head}gpu_instances = [\"19\"]\n")).is_empty());
    assert!(items(&format!("{head}gpu_instances = [\"1G.18GB\"]\n")).is_empty());
    assert_eq!(
        items(&format!("{head}gpu_instances = [\"9\"]\n")),
        [t("gpu-instances", "3g.71gb", "1g.18gb")]
    );
    assert!(items(&format!(
        "{head}scheduler = {{ policy = \"fixed-share\" }}\n"
    ))
    .is_empty());
    assert_eq!(
        items(&format!(
            "{head}scheduler = {{ policy = \"equal-share\" }}\n"
        )),
        [t("scheduler", "equal-share", "fixed-share")]
    );
}
