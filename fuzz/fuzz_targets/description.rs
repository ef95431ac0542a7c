//! An mdev type's `description` attribute (NVIDIA's `key=value, …` and GVT-g's `key: value`
//! lines): parsed, rendered in the vendor's form and parsed again to the same details; the
//! size and resolution parsers read their own output back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vgpud::discovery::description::{parse_description, parse_resolution, parse_size_mib};
use vgpud::model::TypeDetails;

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn res(v: Option<(u32, u32)>) -> String {
    v.map(|(w, h)| format!("{w}x{h}")).unwrap_or_default()
}

/// The details written as the driver would, every key present (an empty value parses as
/// unknown).
fn render(details: &TypeDetails) -> String {
    match details {
        TypeDetails::Nvidia {
            heads,
            frame_rate_limit,
            framebuffer_mib,
            max_resolution,
            max_instances,
        } => format!(
            "num_heads={}, frl_config={}, framebuffer={}, max_resolution={}, max_instance={}",
            opt(*heads),
            opt(*frame_rate_limit),
            opt(framebuffer_mib.map(|m| format!("{m}M"))),
            res(*max_resolution),
            opt(*max_instances)
        ),
        TypeDetails::Gvtg {
            low_gm_mib,
            high_gm_mib,
            fences,
            resolution,
            weight,
        } => format!(
            "low_gm_size: {}\nhigh_gm_size: {}\nfence: {}\nresolution: {}\nweight: {}\n",
            opt(low_gm_mib.map(|m| format!("{m}MB"))),
            opt(high_gm_mib.map(|m| format!("{m}MB"))),
            opt(*fences),
            res(*resolution),
            opt(*weight)
        ),
        _ => String::new(),
    }
}

fuzz_target!(|data: &[u8]| vgpud_fuzz::text(data, |text| {
    let details = parse_description(text);
    let rendered = render(&details);
    assert_eq!(
        parse_description(&rendered),
        details,
        "the details rendered as {rendered:?} read back differently"
    );
    for item in text.split([',', '\n']) {
        let Some((_, value)) = item.split_once(['=', ':']) else {
            continue;
        };
        if let Some(mib) = parse_size_mib(value) {
            assert_eq!(parse_size_mib(&format!("{mib}M")), Some(mib));
            assert_eq!(parse_size_mib(&format!(" {mib} MiB ")), Some(mib));
            if let Some(kib) = mib.checked_mul(1024) {
                assert_eq!(parse_size_mib(&format!("{kib}K")), Some(mib));
            }
        }
        if let Some((w, h)) = parse_resolution(value) {
            assert_eq!(parse_resolution(&format!("{w}x{h}")), Some((w, h)));
            assert_eq!(parse_resolution(&format!(" {w} × {h} ")), Some((w, h)));
        }
    }
}));
