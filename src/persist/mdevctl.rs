//! mdevctl's persistent definitions: `etc/mdevctl.d/<parent>/<uuid>`, pretty JSON with a
//! two-space indent, keys `mdev_type`, `start`, `attrs` in that order, no trailing newline,
//! mode 0644 — byte for byte what mdevctl 1.2 and 1.4 write, so mdevctl and libvirt read
//! vgpud's definitions and vgpud reads theirs.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{remove_durable, write_atomic, PersistError, PersistResult};
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

/// A definition file that could not be read.
#[derive(Debug)]
pub struct BadDefinition {
    /// The file.
    pub path: PathBuf,
    /// Why it was skipped.
    pub error: PersistError,
}

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

/// Reads every definition. Files whose names are not UUIDs are skipped, as mdevctl does;
/// files that do not parse are returned apart, so one bad file never hides the others.
pub fn read_all(host: &Host) -> PersistResult<(Vec<Definition>, Vec<BadDefinition>)> {
    let base = base_dir(host);
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for parent in list(&base)? {
        let dir = base.join(&parent);
        if !dir.is_dir() {
            continue;
        }
        for name in list(&dir)? {
            let Some(uuid) = normalize_uuid(&name) else {
                continue;
            };
            let file = dir.join(&name);
            let text = match fs::read_to_string(&file) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                other => other,
            };
            let parsed = text
                .map_err(|source| PersistError::Io {
                    action: "reading",
                    path: file.clone(),
                    source,
                })
                .and_then(|text| Definition::parse(&parent, &uuid, &text, &file));
            match parsed {
                Ok(d) => good.push(d),
                Err(error) => bad.push(BadDefinition { path: file, error }),
            }
        }
    }
    Ok((good, bad))
}

/// Writes a definition atomically and durably.
pub fn write(host: &Host, def: &Definition) -> PersistResult<()> {
    write_atomic(
        &path(host, &def.parent, &def.uuid),
        def.to_json().as_bytes(),
        0o644,
    )
}

/// The file [`write`] writes, for a batch ([`super::write_all_atomic`]).
pub fn file(host: &Host, def: &Definition) -> super::FileWrite {
    super::FileWrite {
        path: path(host, &def.parent, &def.uuid),
        content: def.to_json().into_bytes(),
        mode: 0o644,
    }
}

/// Removes a definition; returns whether it existed.
pub fn remove(host: &Host, parent: &str, uuid: &str) -> PersistResult<bool> {
    remove_durable(&path(host, parent, uuid))
}

fn list(dir: &Path) -> PersistResult<Vec<String>> {
    match fs::read_dir(dir) {
        Ok(entries) => {
            let mut names: Vec<String> = entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            Ok(names)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(source) => Err(PersistError::Io {
            action: "listing",
            path: dir.to_path_buf(),
            source,
        }),
    }
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
    fn read_all_skips_non_uuid_names_and_reports_bad_files_apart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        write(&host, &def()).expect("write");
        let parent_dir = base_dir(&host).join("0000:41:00.0");
        fs::write(parent_dir.join("notes.txt"), "hello").expect("write");
        fs::write(
            parent_dir.join("a1b2c3d4-0000-4000-8000-000000000002"),
            "{torn",
        )
        .expect("write");
        let (good, bad) = read_all(&host).expect("read");
        assert_eq!(good, vec![def()]);
        assert_eq!(bad.len(), 1);
        assert!(remove(&host, "0000:41:00.0", &def().uuid).expect("remove"));
    }
}
