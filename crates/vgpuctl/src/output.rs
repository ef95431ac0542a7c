//! Human output: aligned tables, key-value listings, sizes.

use std::collections::BTreeMap;

/// A table whose columns are aligned to their widest cell, two spaces apart; the last
/// column is not padded.
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with this header.
    pub fn new(header: &[&str]) -> Self {
        Table {
            rows: vec![header.iter().map(|h| h.to_string()).collect()],
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The aligned text, a line a row.
    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    let pad = widths[c] - cell.chars().count() + 2;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `key: value` lines with the values aligned; a value with lines of its own continues
/// under the first.
pub fn key_values(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len() + 1).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in pairs {
        let key = format!("{k}:");
        let mut lines = v.lines();
        let first = lines.next().unwrap_or("");
        out.push_str(format!("{key:<width$}  {first}").trim_end());
        out.push('\n');
        for more in lines {
            out.push_str(&format!("{:<width$}  {more}\n", ""));
        }
    }
    out
}

/// Items joined by `, `, broken into lines of at most 72 characters (for [`key_values`]);
/// `-` for none.
pub fn list(items: &[String]) -> String {
    if items.is_empty() {
        return "-".into();
    }
    let mut lines: Vec<String> = vec![String::new()];
    for item in items {
        let Some(line) = lines.last_mut() else {
            break;
        };
        if line.is_empty() {
            line.push_str(item);
        } else if line.len() + 2 + item.len() > 72 {
            line.push(',');
            lines.push(item.clone());
        } else {
            line.push_str(", ");
            line.push_str(item);
        }
    }
    lines.join("\n")
}

/// A framebuffer size where 0 means unknown: `-` then, else [`size`].
pub fn framebuffer(bytes: u64) -> String {
    if bytes == 0 {
        "-".into()
    } else {
        size(bytes)
    }
}

/// A size in bytes as `4 GiB`, `512 MiB`, `17.8 GiB`.
pub fn size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, n) in UNITS {
        if bytes >= n {
            return if bytes.is_multiple_of(n) {
                format!("{} {unit}", bytes / n)
            } else {
                format!("{:.1} {unit}", bytes as f64 / n as f64)
            };
        }
    }
    format!("{bytes} B")
}

/// `yes` or `no`.
pub fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

/// `on` or `off`.
pub fn on_off(b: bool) -> String {
    if b { "on" } else { "off" }.into()
}

/// A count where 0 means unknown: `-` then.
pub fn count(n: u32) -> String {
    if n == 0 {
        "-".into()
    } else {
        n.to_string()
    }
}

/// An empty string as `-`; any other as [`shown`].
pub fn dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        shown(s)
    }
}

/// Text from the daemon as it shows: unchanged when every character shows as itself, else
/// quoted with the hidden ones escaped (`"pool-day "`, `"pool\u{202e}yad"`), so that a tag with
/// white space at an end, or an invisible or bidirectional character, cannot pass for another.
pub fn shown(s: &str) -> String {
    let hidden = |c: char| {
        c != ' '
            && (c.is_whitespace() || c.is_control() || c.escape_debug().len() > 1)
            && !matches!(c, '"' | '\'' | '\\')
    };
    if s.trim() != s || s.chars().any(hidden) {
        format!("{s:?}")
    } else {
        s.into()
    }
}

/// Keys whose numbers are bytes.
const BYTE_KEYS: &[&str] = &[
    "framebuffer",
    "memory_used",
    "memory_total",
    "fb_used",
    "memory",
];

/// A JSON value for a human: strings bare, lists joined, sizes of byte keys in units.
pub fn value(key: &str, v: &serde_json::Value) -> String {
    use serde_json::Value as J;
    match v {
        J::String(s) => dash(s),
        J::Number(n) if key == "framebuffer" => {
            n.as_u64().map(framebuffer).unwrap_or(n.to_string())
        }
        J::Number(n) if BYTE_KEYS.contains(&key) => n.as_u64().map(size).unwrap_or(n.to_string()),
        J::Number(n) if key == "rm_pvmrl" => n
            .as_u64()
            .map(|r| format!("0x{r:08x}"))
            .unwrap_or(n.to_string()),
        J::Array(items) => list(&items.iter().map(|i| value("", i)).collect::<Vec<_>>()),
        J::Null => "-".into(),
        other => other.to_string(),
    }
}

/// A dictionary answer as [`key_values`].
pub fn dict(d: &BTreeMap<String, serde_json::Value>) -> String {
    let pairs: Vec<(&str, String)> = d.iter().map(|(k, v)| (k.as_str(), value(k, v))).collect();
    key_values(&pairs)
}

/// A Unix time (seconds) in the local time zone (`TZ`, else /etc/localtime): `None` for 0
/// (unknown) or a time out of range.
fn zoned(seconds: u64) -> Option<jiff::Zoned> {
    if seconds == 0 {
        return None;
    }
    let ts = jiff::Timestamp::from_second(i64::try_from(seconds).ok()?).ok()?;
    Some(ts.to_zoned(jiff::tz::TimeZone::system()))
}

/// A Unix time as local ISO 8601 with its offset (`2026-12-03T08:43:36+01:00`), for JSON;
/// `None` for 0 (unknown).
pub fn iso_time(seconds: u64) -> Option<String> {
    zoned(seconds).map(|z| z.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string())
}

/// A Unix time as a human reads it, local (`2026-12-03 08:43:36 CET`); `-` for 0 (unknown).
pub fn local_time(seconds: u64) -> String {
    zoned(seconds).map_or_else(
        || "-".into(),
        |z| z.strftime("%Y-%m-%d %H:%M:%S %Z").to_string(),
    )
}

/// One figure of `metrics` as a human reads it: its name and value with the unit
/// (`power: 71.5 W`, `temperature: 45 °C`, `gpu_utilization: 37%`, `memory_used: 17.8 GiB`).
pub fn metric(key: &str, v: &serde_json::Value) -> (String, String) {
    let n = v.as_u64();
    match (key, n) {
        ("power_mw", Some(mw)) => ("power".into(), format!("{:.1} W", mw as f64 / 1000.0)),
        ("temperature", Some(c)) => (key.into(), format!("{c} °C")),
        (k, Some(p)) if k.ends_with("_utilization") => (key.into(), format!("{p}%")),
        _ => (key.into(), value(key, v)),
    }
}

/// `metrics` for a human: [`metric`] a line, by name.
pub fn metrics(m: &BTreeMap<String, serde_json::Value>) -> String {
    let mut figures: Vec<(String, String)> = m.iter().map(|(k, v)| metric(k, v)).collect();
    figures.sort();
    let pairs: Vec<(&str, String)> = figures
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    key_values(&pairs)
}

/// A dictionary on one line: `key=value ...`.
pub fn inline(d: &BTreeMap<String, serde_json::Value>) -> String {
    if d.is_empty() {
        return "-".into();
    }
    d.iter()
        .map(|(k, v)| format!("{k}={}", value(k, v)))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_lines_have_no_trailing_space() {
        let mut t = Table::new(&["A", "LONG HEADER", "C"]);
        t.row(vec!["wide cell".into(), "x".into(), "".into()]);
        assert_eq!(t.render(), "A          LONG HEADER  C\nwide cell  x\n");
    }

    #[test]
    fn hidden_characters_and_outer_spaces_are_shown_escaped() {
        assert_eq!(dash("pool-day"), "pool-day");
        assert_eq!(dash("win10 vm-é \"x\""), "win10 vm-é \"x\"");
        assert_eq!(dash("pool-day "), "\"pool-day \"");
        assert_eq!(dash(" pool-day"), "\" pool-day\"");
        assert_eq!(dash("pool\u{202e}yad"), "\"pool\\u{202e}yad\"");
        assert_eq!(dash("pool\u{200b}-day"), "\"pool\\u{200b}-day\"");
        assert_eq!(dash("\u{feff}pool-day"), "\"\\u{feff}pool-day\"");
        assert_eq!(dash("pool\u{2028}day"), "\"pool\\u{2028}day\"");
        assert_eq!(dash("a\tb"), "\"a\\tb\"");
        assert_eq!(dash(""), "-");
    }

    #[test]
    fn sizes_are_in_binary_units() {
        assert_eq!(size(4 << 30), "4 GiB");
        assert_eq!(size(512 << 20), "512 MiB");
        assert_eq!(size(19_092_471_808), "17.8 GiB");
        assert_eq!(size(0), "0 B");
        assert_eq!(framebuffer(0), "-");
        assert_eq!(size(100), "100 B");
    }

    #[test]
    fn metrics_carry_their_units() {
        let m: BTreeMap<String, serde_json::Value> = serde_json::from_value(serde_json::json!({
            "power_mw": 71500, "temperature": 45, "gpu_utilization": 37,
            "memory_used": 19_092_471_808u64, "ecc_corrected": 2, "type_id": 1001
        }))
        .expect("a dict");
        assert_eq!(
            metrics(&m),
            "ecc_corrected:    2\ngpu_utilization:  37%\nmemory_used:      17.8 GiB\n\
             power:            71.5 W\ntemperature:      45 °C\ntype_id:          1001\n"
        );
    }

    #[test]
    fn an_unknown_time_is_a_dash_and_null() {
        assert_eq!(local_time(0), "-");
        assert_eq!(iso_time(0), None);
    }

    #[test]
    fn long_lists_wrap_under_their_key() {
        let items: Vec<String> = (0..10).map(|i| format!("0000:41:00.{i}")).collect();
        let text = key_values(&[("vfs", list(&items)), ("k", "v".into())]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.len() > 2, "{text}");
        assert!(lines[1].starts_with("      0000:41"), "{text}");
        assert_eq!(lines.last(), Some(&"k:    v"));
    }
}
