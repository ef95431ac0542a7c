//! Parsing of mdev type `description` attributes into vendor fields.

use crate::model::TypeDetails;

/// Parses a type description. The vendor is recognised from the content: NVIDIA prints
/// `key=value` pairs separated by `, `, Intel GVT-g prints `key: value` lines. Anything else
/// gives [`TypeDetails::Unknown`].
pub fn parse_description(description: &str) -> TypeDetails {
    if description.contains("framebuffer=") || description.contains("num_heads=") {
        parse_nvidia(description)
    } else if description.contains("low_gm_size") || description.contains("high_gm_size") {
        parse_gvtg(description)
    } else {
        TypeDetails::Unknown
    }
}

fn pairs<'a>(text: &'a str, sep: char) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
    text.split([',', '\n'])
        .filter_map(move |item| item.split_once(sep))
        .map(|(k, v)| (k.trim(), v.trim()))
}

fn parse_nvidia(text: &str) -> TypeDetails {
    let mut heads = None;
    let mut frame_rate_limit = None;
    let mut framebuffer_mib = None;
    let mut max_resolution = None;
    let mut max_instances = None;
    for (key, value) in pairs(text, '=') {
        match key {
            "num_heads" => heads = value.parse().ok(),
            "frl_config" => frame_rate_limit = value.parse().ok(),
            "framebuffer" => framebuffer_mib = parse_size_mib(value),
            "max_resolution" => max_resolution = parse_resolution(value),
            "max_instance" => max_instances = value.parse().ok(),
            _ => {}
        }
    }
    TypeDetails::Nvidia {
        heads,
        frame_rate_limit,
        framebuffer_mib,
        max_resolution,
        max_instances,
    }
}

fn parse_gvtg(text: &str) -> TypeDetails {
    let mut low_gm_mib = None;
    let mut high_gm_mib = None;
    let mut fences = None;
    let mut resolution = None;
    let mut weight = None;
    for (key, value) in pairs(text, ':') {
        match key {
            "low_gm_size" => low_gm_mib = parse_size_mib(value),
            "high_gm_size" => high_gm_mib = parse_size_mib(value),
            "fence" => fences = value.parse().ok(),
            "resolution" => resolution = parse_resolution(value),
            "weight" => weight = value.parse().ok(),
            _ => {}
        }
    }
    TypeDetails::Gvtg {
        low_gm_mib,
        high_gm_mib,
        fences,
        resolution,
        weight,
    }
}

/// Parses `1024M`, `1024MB`, `2G`, `2GB` or a plain number of MiB.
pub fn parse_size_mib(value: &str) -> Option<u64> {
    let v = value.trim();
    let digits_end = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(digits_end);
    let n: u64 = num.parse().ok()?;
    match unit.trim().to_ascii_uppercase().as_str() {
        "" | "M" | "MB" | "MIB" => Some(n),
        "G" | "GB" | "GIB" => n.checked_mul(1024),
        "K" | "KB" | "KIB" => Some(n / 1024),
        _ => None,
    }
}

/// Parses `5120x2880`.
pub fn parse_resolution(value: &str) -> Option<(u32, u32)> {
    let (w, h) = value.trim().split_once(['x', 'X', '×'])?;
    Some((w.trim().parse().ok()?, h.trim().parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_descriptions_from_real_dumps_parse() {
        let d = parse_description(
            "num_heads=4, frl_config=60, framebuffer=1024M, max_resolution=5120x2880, max_instance=24",
        );
        assert_eq!(
            d,
            TypeDetails::Nvidia {
                heads: Some(4),
                frame_rate_limit: Some(60),
                framebuffer_mib: Some(1024),
                max_resolution: Some((5120, 2880)),
                max_instances: Some(24),
            }
        );
        let d = parse_description(
            "num_heads=1, frl_config=60, framebuffer=4096M, max_resolution=4096x2400, max_instance=12",
        );
        assert!(matches!(
            d,
            TypeDetails::Nvidia {
                framebuffer_mib: Some(4096),
                max_instances: Some(12),
                ..
            }
        ));
    }

    #[test]
    fn gvtg_descriptions_parse() {
        let d = parse_description(
            "low_gm_size: 128MB\nhigh_gm_size: 512MB\nfence: 4\nresolution: 1920x1200\nweight: 4\n",
        );
        assert_eq!(
            d,
            TypeDetails::Gvtg {
                low_gm_mib: Some(128),
                high_gm_mib: Some(512),
                fences: Some(4),
                resolution: Some((1920, 1200)),
                weight: Some(4),
            }
        );
        // mdevctl joins the lines with ", ": the same fields come out.
        let joined = parse_description(
            "low_gm_size: 64MB, high_gm_size: 384MB, fence: 4, resolution: 1024x768, weight: 2",
        );
        assert!(matches!(
            joined,
            TypeDetails::Gvtg {
                low_gm_mib: Some(64),
                weight: Some(2),
                ..
            }
        ));
    }

    #[test]
    fn unknown_and_malformed_descriptions_leave_fields_empty() {
        assert_eq!(parse_description(""), TypeDetails::Unknown);
        assert_eq!(
            parse_description("virtual display, 640x480 framebuffer"),
            TypeDetails::Unknown
        );
        let d = parse_description("framebuffer=lots, max_instance=-3");
        assert_eq!(
            d,
            TypeDetails::Nvidia {
                heads: None,
                frame_rate_limit: None,
                framebuffer_mib: None,
                max_resolution: None,
                max_instances: None,
            }
        );
    }

    #[test]
    fn sizes_and_resolutions() {
        assert_eq!(parse_size_mib("2G"), Some(2048));
        assert_eq!(parse_size_mib("512MB"), Some(512));
        assert_eq!(parse_size_mib("12Q"), None);
        assert_eq!(parse_resolution("7680x4320"), Some((7680, 4320)));
        assert_eq!(parse_resolution("7680"), None);
    }
}
