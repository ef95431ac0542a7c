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
    assert_eq!(
        r.validate().is_ok(),
        text_ok(rest, MAX_NAME_LEN, true),
        "owner {rest:?}"
    );
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
