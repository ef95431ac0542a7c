//! A VF's `nvidia/creatable_vgpu_types` (NVIDIA's vendor-specific VFIO framework): every entry
//! has a name, trimmed, on one line; the list written back in the driver's form (header,
//! `ID : name` lines) reads back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vgpud::discovery::sriov::parse_creatable;

fuzz_target!(|data: &[u8]| vgpud_fuzz::text(data, |text| {
    let types = parse_creatable(text);
    assert!(types.len() <= text.lines().count());
    for t in &types {
        assert!(!t.name.is_empty(), "{t:?}");
        assert_eq!(t.name.trim(), t.name, "{t:?}");
        assert!(!t.name.contains('\n'), "{t:?}");
    }
    let mut rendered = String::from("ID    : vGPU Name\n");
    for t in &types {
        rendered.push_str(&format!("{:<5} : {}\n", t.id, t.name));
    }
    assert_eq!(
        parse_creatable(&rendered),
        types,
        "the list rendered as {rendered:?} reads back differently"
    );
}));
