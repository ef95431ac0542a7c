//! mdevctl's persistent definitions: `etc/mdevctl.d/<parent>/<uuid>`, pretty JSON with a
//! two-space indent, keys `mdev_type`, `start`, `attrs` in that order, no trailing newline,
//! mode 0644 — byte for byte what mdevctl 1.2 and 1.4 write, so mdevctl and libvirt read
//! vgpud's definitions and vgpud reads theirs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{load, Loaded, PersistError, PersistResult, Refused};
use crate::host::Host;
use crate::model::normalize_uuid;

/// One persistent mdev definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    /// Parent device name (the directory the file is in).
    pub parent: String,
    /// Lowercase UUID (the file name).
    pub uuid: String,
    /// Type id (`nvidia-259`).
    pub mdev_type: String,
    /// `start: "auto"`: started when the parent appears. Anything else is manual.
    pub autostart: bool,
    /// Attributes written in order after creation (`nvidia/vgpu_params` → value).
    pub attrs: Vec<(String, String)>,
}

/// Every definition on the host, and the devices whose definition was set aside.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Definitions {
    /// The definitions that read and parse.
    pub defined: Vec<Definition>,
    /// UUIDs whose definition is bad: set aside as `<uuid>.bad` now or at an earlier look.
    /// Such a device is not gone: its record is kept.
    pub set_aside: BTreeSet<String>,
}

/// What a definition is called in the log when one is bad.
pub const WHAT: &str = "mdevctl definition (one malformed definition makes `mdevctl list \
                        --defined` fail for the whole host, and libvirt's device list with it)";

/// `ROOT/etc/mdevctl.d`.
pub fn base_dir(host: &Host) -> PathBuf {
    host.etc("mdevctl.d")
}

/// The file of one definition.
pub fn path(host: &Host, parent: &str, uuid: &str) -> PathBuf {
    base_dir(host).join(parent).join(uuid)
}

impl Definition {
    /// The file content, exactly as mdevctl writes it.
    pub fn to_json(&self) -> String {
        #[derive(serde::Serialize)]
        struct File<'a> {
            mdev_type: &'a str,
            start: &'a str,
            attrs: Vec<std::collections::BTreeMap<&'a str, &'a str>>,
        }
        let file = File {
            mdev_type: &self.mdev_type,
            start: if self.autostart { "auto" } else { "manual" },
            attrs: self
                .attrs
                .iter()
                .map(|(k, v)| std::iter::once((k.as_str(), v.as_str())).collect())
                .collect(),
        };
        serde_json::to_string_pretty(&file).unwrap_or_default()
    }

    /// Parses a definition file's content.
    pub fn parse(parent: &str, uuid: &str, text: &str, path: &Path) -> PersistResult<Self> {
        let malformed = |reason: String| PersistError::Malformed {
            path: path.to_path_buf(),
            reason,
        };
        let value: Value = serde_json::from_str(text).map_err(|e| malformed(e.to_string()))?;
        let obj = value
            .as_object()
            .ok_or_else(|| malformed("not a JSON object".into()))?;
        let mdev_type = obj
            .get("mdev_type")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed("no \"mdev_type\" string".into()))?;
        let start = obj
            .get("start")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed("no \"start\" string".into()))?;
        let mut attrs = Vec::new();
        if let Some(list) = obj.get("attrs") {
            let list = list
                .as_array()
                .ok_or_else(|| malformed("\"attrs\" is not an array".into()))?;
            for item in list {
                let one = item
                    .as_object()
                    .filter(|o| o.len() == 1)
                    .ok_or_else(|| malformed("an attr is not a one-key object".into()))?;
                for (k, v) in one {
                    let v = v
                        .as_str()
                        .ok_or_else(|| malformed(format!("attr {k:?} is not a string")))?;
                    attrs.push((k.clone(), v.to_string()));
                }
            }
        }
        Ok(Definition {
            parent: parent.to_string(),
            uuid: uuid.to_string(),
            mdev_type: mdev_type.to_string(),
            autostart: start == "auto",
            attrs,
        })
    }
}

/// Reads every definition in `etc/mdevctl.d/<parent>/<uuid>`, parents and files as mdevctl
/// 1.4 sees them: entries that are not directories (links included) are not parents, and
/// names that are not UUIDs are not definitions. A bad definition (not a regular file, too
/// large, not UTF-8, malformed: anything that makes `mdevctl list --defined` fail or that
/// vgpud cannot read) is set aside as `<uuid>.bad`, which mdevctl skips, and reported once;
/// the others are read.
pub fn read_all(host: &Host) -> PersistResult<Definitions> {
    let base = base_dir(host);
    let mut out = Definitions::default();
    for (parent, kind) in super::list_dir(&base)? {
        if !kind.is_dir() {
            continue;
        }
        let dir = base.join(&parent);
        for (name, _) in super::list_dir(&dir)? {
            if let Some(uuid) = set_aside_uuid(&name) {
                out.set_aside.insert(uuid);
                continue;
            }
            let Some(uuid) = definition_uuid(&name) else {
                continue;
            };
            match read_file(&dir.join(&name), &parent, &uuid)? {
                Loaded::Good(def) if normalize_uuid(&name).is_some() => out.defined.push(def),
                // A name mdevctl reads as a UUID in another spelling: checked for
                // mdevctl's sake, not one of vgpud's definitions.
                Loaded::Good(_) | Loaded::Absent => {}
                Loaded::Bad => {
                    out.set_aside.insert(uuid);
                }
            }
        }
    }
    Ok(out)
}

/// The definition of one device, if it has one that reads (a bad one is set aside).
pub fn read(host: &Host, parent: &str, uuid: &str) -> PersistResult<Option<Definition>> {
    Ok(match read_file(&path(host, parent, uuid), parent, uuid)? {
        Loaded::Good(def) => Some(def),
        Loaded::Absent | Loaded::Bad => None,
    })
}

fn read_file(file: &Path, parent: &str, uuid: &str) -> PersistResult<Loaded<Definition>> {
    load(file, WHAT, |text| {
        Definition::parse(parent, uuid, text, file).map_err(|e| {
            Refused::Bad(match e {
                PersistError::Malformed { reason, .. } => reason,
                other => other.to_string(),
            })
        })
    })
}

/// The UUID a file name is a definition of, as mdevctl reads names (any spelling the uuid
/// crate parses), lowercase and hyphenated.
fn definition_uuid(name: &str) -> Option<String> {
    uuid::Uuid::parse_str(name)
        .ok()
        .map(|u| u.hyphenated().to_string())
}

/// The UUID of a definition set aside: `<uuid>.bad` or `<uuid>.bad.<n>`.
fn set_aside_uuid(name: &str) -> Option<String> {
    let (stem, rest) = name.split_once(super::BAD_SUFFIX)?;
    let numbered = rest.is_empty()
        || rest
            .strip_prefix('.')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    numbered.then(|| definition_uuid(stem)).flatten()
}

/// Writes a definition atomically and durably (a commit of the journal).
pub fn write(host: &Host, def: &Definition) -> PersistResult<()> {
    super::commit(host, &[file(host, def)], &[])
}

/// The file [`write`] writes, for a batch ([`super::write_all_atomic`]).
pub fn file(host: &Host, def: &Definition) -> super::FileWrite {
    super::FileWrite {
        path: path(host, &def.parent, &def.uuid),
        content: def.to_json().into_bytes(),
        mode: 0o644,
    }
}

/// Removes a definition durably (a commit of the journal); returns whether it existed.
pub fn remove(host: &Host, parent: &str, uuid: &str) -> PersistResult<bool> {
    let path = path(host, parent, uuid);
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(false);
    }
    super::commit(host, &[], &[path]).map(|()| true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def() -> Definition {
        Definition {
            parent: "0000:41:00.0".into(),
            uuid: "a1b2c3d4-0000-4000-8000-000000000001".into(),
            mdev_type: "nvidia-712".into(),
            autostart: true,
            attrs: vec![("nvidia/vgpu_params".into(), "frame_rate_limiter=0".into())],
        }
    }

    #[test]
    fn the_format_is_mdevctls_to_the_byte() {
        assert_eq!(
            def().to_json(),
            "{\n  \"mdev_type\": \"nvidia-712\",\n  \"start\": \"auto\",\n  \"attrs\": [\n    {\n      \"nvidia/vgpu_params\": \"frame_rate_limiter=0\"\n    }\n  ]\n}"
        );
    }

    #[test]
    fn parsing_round_trips_and_is_lenient_like_mdevctl() {
        let d = def();
        let p = Path::new("x");
        assert_eq!(
            Definition::parse(&d.parent, &d.uuid, &d.to_json(), p).expect("parse"),
            d
        );
        let manual = Definition::parse(
            "p",
            "u",
            r#"{"mdev_type":"mtty-1","start":"later","extra":1}"#,
            p,
        )
        .expect("parse");
        assert!(!manual.autostart);
        assert!(manual.attrs.is_empty());
        for bad in [
            "",
            "[]",
            r#"{"start":"auto"}"#,
            r#"{"mdev_type":"x"}"#,
            r#"{"mdev_type":"x","start":"auto","attrs":[{"a":"1","b":"2"}]}"#,
            r#"{"mdev_type":"x","start":"auto","attrs":[{"a":1}]}"#,
        ] {
            assert!(Definition::parse("p", "u", bad, p).is_err(), "{bad}");
        }
    }

    #[test]
    fn read_all_skips_non_uuid_names_and_sets_bad_files_aside() {
        use std::fs;
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        write(&host, &def()).expect("write");
        let parent_dir = base_dir(&host).join("0000:41:00.0");
        fs::write(parent_dir.join("notes.txt"), "hello").expect("write");
        let torn = "a1b2c3d4-0000-4000-8000-000000000002";
        fs::write(parent_dir.join(torn), "{torn").expect("write");
        // mdevctl reads this spelling as a UUID too, so a bad one breaks its list as well.
        let simple = "a1b2c3d4000040008000000000000003";
        fs::write(parent_dir.join(simple), "").expect("write");
        // Not a parent: mdevctl skips entries that are not directories.
        fs::write(base_dir(&host).join("stray"), "x").expect("write");
        let defs = read_all(&host).expect("read");
        assert_eq!(defs.defined, vec![def()]);
        assert_eq!(
            defs.set_aside
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            vec![torn, "a1b2c3d4-0000-4000-8000-000000000003"]
        );
        assert!(parent_dir.join(format!("{torn}.bad")).exists());
        assert!(!parent_dir.join(torn).exists());
        assert!(parent_dir.join("notes.txt").exists());
        // Set aside stays known at the next read; the file is not moved again.
        let again = read_all(&host).expect("read");
        assert_eq!(again, defs);
        assert!(!parent_dir.join(format!("{torn}.bad.bad")).exists());
        assert_eq!(
            read(&host, "0000:41:00.0", &def().uuid).expect("read"),
            Some(def())
        );
        assert_eq!(read(&host, "0000:41:00.0", torn).expect("read"), None);
        assert!(remove(&host, "0000:41:00.0", &def().uuid).expect("remove"));
    }

    #[test]
    fn names_set_aside_are_recognized() {
        let u = "a1b2c3d4-0000-4000-8000-000000000002";
        assert_eq!(set_aside_uuid(&format!("{u}.bad")).as_deref(), Some(u));
        assert_eq!(set_aside_uuid(&format!("{u}.bad.7")).as_deref(), Some(u));
        assert_eq!(set_aside_uuid(&format!("{u}.bad.x")), None);
        assert_eq!(set_aside_uuid(&format!("{u}.bad.")), None);
        assert_eq!(set_aside_uuid("notes.bad"), None);
        assert_eq!(set_aside_uuid(u), None);
        assert_eq!(definition_uuid(&format!("{u}.bad")), None);
    }
}
