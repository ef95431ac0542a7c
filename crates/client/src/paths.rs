//! Object paths of the `org.vgpud1` objects, escaped as systemd escapes path segments.

use zbus::OwnedObjectPath;

/// The root object: `org.vgpud1.Manager` and the ObjectManager.
pub const ROOT: &str = "/org/vgpud1";

/// Escapes a string into one object path segment as systemd does: every byte outside
/// `[A-Za-z0-9]`, and a leading digit, becomes `_xx` (lowercase hex); the empty string is `_`.
pub fn escape_segment(s: &str) -> String {
    if s.is_empty() {
        return "_".to_string();
    }
    let mut out = String::with_capacity(s.len() * 3);
    for (i, b) in s.bytes().enumerate() {
        if b.is_ascii_alphabetic() || (b.is_ascii_digit() && i > 0) {
            out.push(b as char);
        } else {
            out.push_str(&format!("_{b:02x}"));
        }
    }
    out
}

/// Reverses [`escape_segment`]; `None` if the segment is not a valid escape.
pub fn unescape_segment(s: &str) -> Option<String> {
    if s == "_" {
        return Some(String::new());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'_' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn object_path(kind: &str, id: &str) -> OwnedObjectPath {
    let path = format!("{ROOT}/{kind}/{}", escape_segment(id));
    // An escaped segment only holds [A-Za-z0-9_], so the path is always valid.
    OwnedObjectPath::try_from(path).unwrap_or_else(|_| OwnedObjectPath::default())
}

/// `/org/vgpud1/gpu/<escaped address>`.
pub fn gpu_path(address: &str) -> OwnedObjectPath {
    object_path("gpu", address)
}

/// `/org/vgpud1/device/<escaped uuid>`.
pub fn device_path(uuid: &str) -> OwnedObjectPath {
    object_path("device", uuid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_follows_systemd() {
        assert_eq!(escape_segment("0000:41:00.0"), "_30000_3a41_3a00_2e0");
        assert_eq!(escape_segment("mtty"), "mtty");
        assert_eq!(
            escape_segment("a1b2c3d4-0000-4000-8000-000000000001"),
            "a1b2c3d4_2d0000_2d4000_2d8000_2d000000000001"
        );
        assert_eq!(escape_segment(""), "_");
        assert_eq!(
            gpu_path("0000:41:00.0").as_str(),
            "/org/vgpud1/gpu/_30000_3a41_3a00_2e0"
        );
    }

    #[test]
    fn escaping_round_trips() {
        for s in ["0000:41:00.0", "mtty", "", "a_b", "9x/../y", "ünï"] {
            assert_eq!(unescape_segment(&escape_segment(s)).as_deref(), Some(s));
        }
        assert_eq!(unescape_segment("_zz"), None);
    }
}
