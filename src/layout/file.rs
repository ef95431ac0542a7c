//! Layout files: `ROOT/etc/vgpud/layouts/NAME.toml`, the operator's named, declarative
//! configurations (like NVIDIA vgpu-device-manager's), checked whole before anything is
//! planned: an unknown key, a bad value or a GPU two entries of the same kind claim is an
//! error naming the file.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::gpu_control::{SchedulerPolicy, SchedulerSetting};

/// Where layouts live, below the root.
pub const DIR: &str = "etc/vgpud/layouts";
/// Longest layout name.
pub const MAX_NAME: usize = 64;
/// Most GPU entries in a layout.
pub const MAX_GPU_ENTRIES: usize = 256;
/// Most device entries of one GPU entry.
pub const MAX_DEVICE_ENTRIES: usize = 64;
/// Most devices one entry keeps made.
pub const MAX_COUNT: u32 = 1024;
/// Most devices one `[[gpu]]` entry keeps made, its pools together (a GPU holds far fewer;
/// this bounds the plan before it is made).
pub const MAX_GPU_DEVICES: u32 = 1024;
/// Most GPU instances one entry lists.
pub const MAX_INSTANCES: usize = 64;
/// Longest string in a layout (a selector, a type, an owner, parameters).
pub const MAX_STRING: usize = 256;
/// Largest layout file.
pub const MAX_FILE_BYTES: u64 = 256 * 1024;

/// A layout that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// The name is not a plain name.
    #[error("layout name {0:?} is not a plain name (1-64 of A-Z a-z 0-9 . _ -, not starting with a dot)")]
    BadName(String),
    /// No such file.
    #[error("no layout {name} ({path})")]
    NotFound {
        /// The name asked for.
        name: String,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The file cannot be read (not a regular file, too large, not UTF-8).
    #[error("cannot read {}: {}", .0.path.display(), .0.reason)]
    Read(crate::persist::BadFile),
    /// Its plan or its differences on this host would not fit one answer.
    #[error("the layout makes {rows} rows on this host, more than the {max} one answer holds: lower its counts, or split it")]
    TooLarge {
        /// The rows it would make.
        rows: usize,
        /// The most one answer holds.
        max: usize,
    },
    /// The file is malformed or says something impossible.
    #[error("{}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// A layout file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layout {
    /// What it is for, shown by `ListLayouts`.
    #[serde(default)]
    pub description: String,
    /// `[[gpu]]`: what each GPU (or each GPU of a model) should look like.
    #[serde(default, rename = "gpu")]
    pub gpus: Vec<GpuEntry>,
}

/// `[[gpu]]`: a selector and the state wanted; a key left out is left as the host has it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuEntry {
    /// One GPU by PCI address (`0000:41:00.0`).
    pub address: Option<String>,
    /// Every GPU of this model (the `Model` property, compared case-insensitively).
    pub model: Option<String>,
    /// SR-IOV VFs to have enabled.
    pub vfs: Option<u32>,
    /// NVIDIA heterogeneous (mixed-size) vGPU mode.
    pub heterogeneous: Option<bool>,
    /// MIG mode.
    pub mig: Option<bool>,
    /// The GPU instances to have, by profile name (`3g.71gb`) or ID; with MIG on.
    pub gpu_instances: Option<Vec<String>>,
    /// The vGPU time-slice scheduler.
    pub scheduler: Option<SchedulerEntry>,
    /// Devices to keep made.
    #[serde(default)]
    pub devices: Vec<DeviceEntry>,
}

/// `scheduler = { policy = "equal-share", timeslice_ms = 3 }`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerEntry {
    /// `best-effort`, `equal-share` or `fixed-share`.
    pub policy: String,
    /// Adaptive round robin.
    #[serde(default)]
    pub arr: bool,
    /// Time slice in ms (without ARR); 0 for the driver's default.
    #[serde(default)]
    pub timeslice_ms: u32,
    /// ARR averaging factor; 0 for the default.
    #[serde(default)]
    pub avg_factor: u32,
    /// ARR frequency in Hz; 0 for the default.
    #[serde(default)]
    pub frequency_hz: u32,
}

/// `devices = [{ type = "L40S-4Q", count = 8, owner = "pool-day" }]`: keep `count` devices
/// of `type` tagged `owner` on the GPU. The owner is the pool's tag: devices with it are the
/// layout's own, ready and unassigned (spares); one handed out (`CreateDevice` with the
/// option `pool`, or attached: its owner changed) is no longer the pool's, and the pool is
/// filled again. `spares` is another name for `count`; with `forecast = true` the count is
/// sized from the demand forecast instead, between `min` and `max` ([`super::pools`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceEntry {
    /// A type id, name or name without the vendor prefix, as `CreateDevice` takes it.
    #[serde(rename = "type")]
    pub type_query: String,
    /// How many (0 when left out; with `forecast`, the sized count).
    #[serde(default, alias = "spares")]
    pub count: u32,
    /// The pool's owner tag.
    pub owner: String,
    /// NVIDIA vGPU parameters for new devices (`vgpu_params`).
    pub params: Option<String>,
    /// Size the count from the forecast of the type's requests ([`super::pools`]).
    #[serde(default)]
    pub forecast: bool,
    /// With `forecast`: the fewest spares kept, whatever the forecast says.
    pub min: Option<u32>,
    /// With `forecast`: the most spares kept on the GPU (required).
    pub max: Option<u32>,
    /// A device of the pool's type released on the GPU (`RemoveDevice`) while the pool is
    /// short is reset and kept as a spare instead of removed ([`super::pools`]).
    #[serde(default)]
    pub keep_released: bool,
}

impl DeviceEntry {
    /// The most devices the entry may keep made on one GPU.
    pub fn most(&self) -> u32 {
        if self.forecast {
            self.max.unwrap_or(0)
        } else {
            self.count
        }
    }
}

impl SchedulerEntry {
    /// The engine's setting; `None` for an unknown policy.
    pub fn setting(&self) -> Option<SchedulerSetting> {
        let policy = match self.policy.as_str() {
            "best-effort" => SchedulerPolicy::BestEffort,
            "equal-share" => SchedulerPolicy::EqualShare,
            "fixed-share" => SchedulerPolicy::FixedShare,
            _ => return None,
        };
        Some(SchedulerSetting {
            policy,
            arr: self.arr,
            timeslice_ms: self.timeslice_ms,
            avg_factor: self.avg_factor,
            frequency_hz: self.frequency_hz,
        })
    }
}

/// Checks a layout name: a plain file stem, so it never names a path elsewhere.
pub fn check_name(name: &str) -> Result<(), LayoutError> {
    let plain = !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if plain {
        Ok(())
    } else {
        Err(LayoutError::BadName(name.chars().take(80).collect()))
    }
}

/// The file of layout `name` below `root`.
pub fn path_of(root: &Path, name: &str) -> PathBuf {
    root.join(DIR).join(format!("{name}.toml"))
}

/// Reads, parses and checks layout `name` (links are followed: configuration management
/// installs them so).
pub fn load(root: &Path, name: &str) -> Result<Layout, LayoutError> {
    check_name(name)?;
    let path = path_of(root, name);
    let text = crate::persist::read_file(&path, MAX_FILE_BYTES, crate::persist::Links::Follow)
        .map_err(LayoutError::Read)?
        .ok_or_else(|| LayoutError::NotFound {
            name: name.to_string(),
            path: path.clone(),
        })?;
    parse(&path, &text)
}

/// Parses and checks a layout's text.
pub fn parse(path: &Path, text: &str) -> Result<Layout, LayoutError> {
    let invalid = |message: String| LayoutError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let layout: Layout = toml::from_str(text).map_err(|e| invalid(e.message().to_string()))?;
    check(&layout).map_err(invalid)?;
    Ok(layout)
}

/// The names and descriptions of the layouts below `root`, by name; a file that cannot be
/// read or parsed is listed with the reason as its description.
pub fn list(root: &Path) -> Vec<(String, String)> {
    let dir = root.join(DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, String)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_str()?.strip_suffix(".toml")?.to_string();
            check_name(&name).ok()?;
            let description = match load(root, &name) {
                Ok(l) => l.description,
                Err(e) => format!("unusable: {e}"),
            };
            Some((name, description))
        })
        .collect();
    out.sort();
    out.truncate(1024);
    out
}

fn check_string(what: &str, s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > MAX_STRING || s.chars().any(char::is_control) {
        return Err(format!(
            "{what} must be 1-{MAX_STRING} bytes without control characters"
        ));
    }
    Ok(())
}

fn check(layout: &Layout) -> Result<(), String> {
    if layout.description.len() > 1024 {
        return Err("description is longer than 1024 bytes".into());
    }
    if layout.gpus.len() > MAX_GPU_ENTRIES {
        return Err(format!("more than {MAX_GPU_ENTRIES} [[gpu]] entries"));
    }
    let mut addresses = std::collections::BTreeSet::new();
    let mut models = std::collections::BTreeSet::new();
    for (i, g) in layout.gpus.iter().enumerate() {
        let at = format!("[[gpu]] #{}", i + 1);
        match (&g.address, &g.model) {
            (Some(a), None) => {
                check_string(&format!("{at}: address"), a)?;
                if !addresses.insert(a.to_ascii_lowercase()) {
                    return Err(format!("{at}: address {a} is named twice"));
                }
            }
            (None, Some(m)) => {
                check_string(&format!("{at}: model"), m)?;
                if !models.insert(m.to_lowercase()) {
                    return Err(format!("{at}: model {m} is named twice"));
                }
            }
            _ => return Err(format!("{at}: give either address or model")),
        }
        if let Some(list) = &g.gpu_instances {
            if list.len() > MAX_INSTANCES {
                return Err(format!("{at}: more than {MAX_INSTANCES} gpu_instances"));
            }
            if g.mig == Some(false) && !list.is_empty() {
                return Err(format!("{at}: gpu_instances need mig = true"));
            }
            for p in list {
                check_string(&format!("{at}: a gpu_instances profile"), p)?;
            }
        }
        if let Some(s) = &g.scheduler {
            let setting = s.setting().ok_or_else(|| {
                format!(
                    "{at}: scheduler policy {:?} is not best-effort, equal-share or fixed-share",
                    s.policy
                )
            })?;
            crate::engine::scheduler::validate(&setting)
                .map_err(|e| format!("{at}: scheduler: {e}"))?;
        }
        if g.devices.len() > MAX_DEVICE_ENTRIES {
            return Err(format!(
                "{at}: more than {MAX_DEVICE_ENTRIES} devices entries"
            ));
        }
        let mut pools = std::collections::BTreeSet::new();
        for d in &g.devices {
            check_string(&format!("{at}: a device type"), &d.type_query)?;
            check_string(&format!("{at}: a device owner"), &d.owner)?;
            crate::engine::check_owner(&format!("{at}: a device owner"), &d.owner)?;
            if let Some(p) = &d.params {
                check_string(&format!("{at}: device params"), p)?;
            }
            if d.count > MAX_COUNT {
                return Err(format!("{at}: count {} is above {MAX_COUNT}", d.count));
            }
            check_elastic(&at, d)?;
            if !pools.insert((d.type_query.to_lowercase(), d.owner.clone())) {
                return Err(format!(
                    "{at}: type {} with owner {} is named twice",
                    d.type_query, d.owner
                ));
            }
        }
        let total: u64 = g.devices.iter().map(|d| u64::from(d.most())).sum();
        if total > u64::from(MAX_GPU_DEVICES) {
            return Err(format!(
                "{at}: the devices entries keep {total} devices made, above {MAX_GPU_DEVICES} (a GPU holds far fewer)"
            ));
        }
    }
    Ok(())
}

/// An elastic entry: `forecast` with `max` (and `min` at most `max`) and no count; `min` and
/// `max` only with `forecast`.
fn check_elastic(at: &str, d: &DeviceEntry) -> Result<(), String> {
    let pool = format!("{at}: pool {}", d.owner);
    if !d.forecast {
        if d.min.is_some() || d.max.is_some() {
            return Err(format!("{pool}: min and max need forecast = true"));
        }
        return Ok(());
    }
    if d.count != 0 {
        return Err(format!(
            "{pool}: forecast = true sizes the count: give min and max instead of count or spares"
        ));
    }
    let Some(max) = d.max else {
        return Err(format!("{pool}: forecast = true needs max"));
    };
    if max > MAX_COUNT {
        return Err(format!("{pool}: max {max} is above {MAX_COUNT}"));
    }
    if d.min.unwrap_or(0) > max {
        return Err(format!(
            "{pool}: min {} is above max {max}",
            d.min.unwrap_or(0)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<Layout, String> {
        parse(Path::new("l.toml"), text).map_err(|e| e.to_string())
    }

    #[test]
    fn a_full_layout_parses() {
        let l = parsed(
            r#"
description = "day"
[[gpu]]
model = "NVIDIA L40S"
vfs = 32
heterogeneous = false
scheduler = { policy = "equal-share", timeslice_ms = 3 }
devices = [{ type = "L40S-4Q", count = 8, owner = "pool-day" }]
[[gpu]]
address = "0000:49:00.0"
mig = true
gpu_instances = ["3g.71gb", "3g.71gb"]
"#,
        )
        .expect("parses");
        assert_eq!(l.gpus.len(), 2);
        assert_eq!(l.gpus[0].devices[0].count, 8);
        assert_eq!(
            l.gpus[0]
                .scheduler
                .as_ref()
                .and_then(|s| s.setting())
                .map(|s| s.policy),
            Some(SchedulerPolicy::EqualShare)
        );
    }

    #[test]
    fn mistakes_are_errors_naming_the_file() {
        for (text, says) in [
            ("[[gpu]]\nvfs = 2\n", "either address or model"),
            ("[[gpu]]\naddress = \"a\"\nmodel = \"b\"\n", "either address or model"),
            ("[[gpu]]\naddress = \"a\"\nvsf = 2\n", "unknown field"),
            ("[[gpu]]\naddress = \"a\"\n[[gpu]]\naddress = \"A\"\n", "named twice"),
            ("[[gpu]]\nmodel = \"m\"\nscheduler = { policy = \"fast\" }\n", "policy"),
            ("[[gpu]]\nmodel = \"m\"\nscheduler = { policy = \"equal-share\", timeslice_ms = 99 }\n", "scheduler"),
            ("[[gpu]]\nmodel = \"m\"\ndevices = [{ type = \"x\", count = 5000, owner = \"p\" }]\n", "above"),
            ("[[gpu]]\nmodel = \"m\"\ndevices = [{ type = \"x\", count = 1, owner = \"\" }]\n", "owner"),
            ("[[gpu]]\nmodel = \"m\"\ndevices = [{ type = \"x\", count = 1000, owner = \"p\" }, { type = \"x\", count = 1000, owner = \"q\" }]\n", "2000 devices made, above 1024"),
            ("[[gpu]]\nmodel = \"m\"\ndevices = [{ type = \"x\", count = 1, owner = \"pool-day \" }]\n", "U+0020 at character 9"),
            ("[[gpu]]\nmodel = \"m\"\ndevices = [{ type = \"x\", count = 1, owner = \"pool\\u202Eday\" }]\n", "U+202E at character 5"),
            ("[[gpu]]\nmodel = \"m\"\nmig = false\ngpu_instances = [\"1g.18gb\"]\n", "mig = true"),
            ("[[gpu]]\nmodel = \"m\"\nvfs = -1\n", ""),
            ("[[gpu]]\nmodel = \"m\"\ndevices = [{ type = \"x\", owner = \"p\", max = 4 }]\n", "min and max need forecast = true"),
            ("[[gpu]]\nmodel = \"m\"\ndevices = [{ type = \"x\", owner = \"p\", forecast = true }]\n", "forecast = true needs max"),
            ("[[gpu]]\nmodel = \"m\"\ndevices = [{ type = \"x\", owner = \"p\", forecast = true, spares = 2, max = 4 }]\n", "instead of count or spares"),
            ("[[gpu]]\nmodel = \"m\"\ndevices = [{ type = \"x\", owner = \"p\", forecast = true, min = 5, max = 4 }]\n", "min 5 is above max 4"),
            ("[[gpu]]\nmodel = \"m\"\ndevices = [{ type = \"x\", owner = \"p\", forecast = true, max = 1000 }, { type = \"x\", owner = \"q\", count = 1000 }]\n", "2000 devices made"),
        ] {
            let e = parsed(text).expect_err(text);
            assert!(e.starts_with("l.toml: "), "{e}");
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn spares_is_count_and_elastic_entries_parse() {
        let l = parsed(
            r#"
[[gpu]]
model = "m"
devices = [
  { type = "A", spares = 3, owner = "pool-a" },
  { type = "B", owner = "pool-b", forecast = true, min = 1, max = 6 },
]
"#,
        )
        .expect("parses");
        let d = &l.gpus[0].devices;
        assert_eq!((d[0].count, d[0].forecast, d[0].most()), (3, false, 3));
        assert_eq!((d[1].count, d[1].min, d[1].most()), (0, Some(1), 6));
    }

    #[test]
    fn the_shipped_example_parses() {
        let l = parsed(include_str!("../../etc/vgpud/layouts/example.toml")).expect("parses");
        assert_eq!(l.gpus.len(), 2);
        assert!(l.gpus[0].devices[1].forecast);
    }

    #[test]
    fn names_are_plain() {
        for ok in ["day", "vdi-night.v2", "A_1"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".hidden",
            "../etc/passwd",
            "a/b",
            "x y",
            &"n".repeat(65),
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
