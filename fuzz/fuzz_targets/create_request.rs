//! The text options of a create as a caller sends them (D-Bus `CreateDevice`, the libvirt
//! hook): `params` (NVIDIA's `vgpu_params`), `uuid`, `owner`, `type`, `parent` and `policy`,
//! checked by `CreateRequest::validate` before anything reaches a path or the kernel. The
//! input is split at its first two NUL bytes into params, uuid and the rest; each check
//! accepts exactly what its rule says.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vgpud::engine::{parse_uuid, CreateRequest, Policy, MAX_NAME_LEN, MAX_PARAMS_LEN};
use vgpud::model::normalize_uuid;

fn text_ok(s: &str, max: usize, empty_ok: bool) -> bool {
    (empty_ok || !s.is_empty()) && s.len() <= max && !s.chars().any(char::is_control)
}

fn name_ok(s: &str) -> bool {
    text_ok(s, MAX_NAME_LEN, false) && !s.contains('/') && s != "." && s != ".."
}

/// Unicode's format characters (general category Cf, Unicode 15's
/// DerivedGeneralCategory.txt) and the line and paragraph separators (Zl, Zp), as ranges.
const CF_ZL_ZP: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x2028, 0x2029),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
];

/// An owner: empty or a text without white space at either end and without a format or
/// separator character, so that it shows as itself.
fn owner_ok(s: &str) -> bool {
    text_ok(s, MAX_NAME_LEN, true)
        && s.trim() == s
        && !s.chars().any(|c| {
            CF_ZL_ZP
                .iter()
                .any(|&(a, b)| (a..=b).contains(&u32::from(c)))
        })
}

fn base() -> CreateRequest {
    CreateRequest {
        type_query: "RTX6000-4Q".into(),
        ..CreateRequest::default()
    }
}

fuzz_target!(|data: &[u8]| vgpud_fuzz::text(data, |text| {
    let mut parts = text.splitn(3, '\0');
    let params = parts.next().unwrap_or_default();
    let uuid = parts.next().unwrap_or_default();
    let rest = parts.next().unwrap_or_default();

    let r = CreateRequest {
        params: Some(params.into()),
        ..base()
    };
    assert_eq!(
        r.validate().is_ok(),
        text_ok(params, MAX_PARAMS_LEN, false),
        "params {params:?}"
    );

    let r = CreateRequest {
        uuid: Some(uuid.into()),
        ..base()
    };
    let canonical = normalize_uuid(uuid);
    assert_eq!(
        r.validate().is_ok(),
        canonical.as_deref() == Some(uuid),
        "uuid {uuid:?}"
    );
    assert_eq!(parse_uuid(uuid).ok(), canonical);
    if let Ok(n) = r.normalized() {
        assert_eq!(n.uuid, normalize_uuid(uuid));
    }

    let r = CreateRequest {
        owner: rest.into(),
        ..base()
    };
    assert_eq!(r.validate().is_ok(), owner_ok(rest), "owner {rest:?}");
    for r in [
        CreateRequest {
            type_query: rest.into(),
            ..base()
        },
        CreateRequest {
            parent: Some(rest.into()),
            ..base()
        },
    ] {
        assert_eq!(r.validate().is_ok(), name_ok(rest), "{r:?}");
    }
    match Policy::parse(rest) {
        Ok(p) => assert_eq!(p.as_str(), rest),
        Err(e) => assert!(rest != "pack" && rest != "spread", "{e}"),
    }
}));
