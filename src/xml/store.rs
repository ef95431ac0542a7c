//! Domain templates by name: the built-in ones and the operator's files.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::{builtin, Template, XmlError};

/// The built-in domain templates: `vdi` (`xml-templates/domain-vdi.xml`) and `minimal`
/// (`xml-templates/domain-minimal.xml`).
pub const BUILTIN_TEMPLATES: &[(&str, Template)] = &[
    ("minimal", builtin::DOMAIN_MINIMAL),
    ("vdi", builtin::DOMAIN_VDI),
];

/// The variables [`super::render_domain`] may set, the only ones a domain template may
/// use; see `xml-templates/domain-vdi.xml` for each.
pub const DOMAIN_VARIABLES: &[&str] = &[
    "name",
    "uuid",
    "memory_mib",
    "vcpus",
    "firmware",
    "disk_path",
    "disk_format",
    "disk_bus",
    "network",
    "network_bus",
    "usb_bus",
    "graphics",
    "vnc",
    "spice",
    "display_vgpu",
    "video_model",
    "video_bus",
    "metadata",
];

/// The fragment lists [`super::render_domain`] sets, the only ones a domain template may
/// insert: `root_ports`, `hostdevs`, `metadata`.
pub const DOMAIN_FRAGMENT_LISTS: &[&str] = &["root_ports", "hostdevs", "metadata"];

/// The largest user template file read, in bytes.
pub const MAX_TEMPLATE_BYTES: u64 = 1 << 20;

/// Domain templates by name: the [`BUILTIN_TEMPLATES`], and the files `<dir>/<name>.xml`
/// of a user directory (the daemon's is `ROOT/etc/vgpud/templates`), which add templates
/// or override built-in ones.
///
/// Names are 1 to 64 of `A-Z a-z 0-9 _ -`, never a path. User files are read when asked
/// for, so edits apply at the next render; each is checked before use: well-formed
/// template syntax and only the variables and fragment lists of [`DOMAIN_VARIABLES`] and
/// [`DOMAIN_FRAGMENT_LISTS`] (an error names the file).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateStore {
    user_dir: Option<PathBuf>,
}

impl TemplateStore {
    /// A store with the built-in templates and, when given, the templates of `user_dir`
    /// (a directory that does not exist holds none).
    pub fn new(user_dir: Option<PathBuf>) -> Self {
        Self { user_dir }
    }

    /// The user template directory, if any.
    pub fn user_dir(&self) -> Option<&Path> {
        self.user_dir.as_deref()
    }

    /// The names of all templates, sorted: built-in ones and the user directory's
    /// `<name>.xml` files with a valid name (other files are ignored).
    pub fn names(&self) -> Result<Vec<String>, XmlError> {
        let mut names: Vec<String> = BUILTIN_TEMPLATES
            .iter()
            .map(|(name, _)| (*name).to_owned())
            .collect();
        if let Some(dir) = &self.user_dir {
            let entries = match fs::read_dir(dir) {
                Ok(entries) => Some(entries),
                Err(e) if e.kind() == ErrorKind::NotFound => None,
                Err(e) => return Err(file_error(dir, &e.to_string())),
            };
            for entry in entries.into_iter().flatten() {
                let entry = entry.map_err(|e| file_error(dir, &e.to_string()))?;
                let file_name = entry.file_name();
                let Some(name) = file_name.to_str().and_then(|f| f.strip_suffix(".xml")) else {
                    continue;
                };
                if check_template_name(name).is_ok() && entry.path().is_file() {
                    names.push(name.to_owned());
                }
            }
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// The template `name`: the user file `<dir>/<name>.xml` when it exists, else the
    /// built-in one.
    ///
    /// Errors: [`XmlError::InvalidTemplateName`], [`XmlError::UnknownTemplate`],
    /// [`XmlError::TemplateFile`] (unreadable, too large, not UTF-8), and for a user file
    /// [`XmlError::Template`] (malformed) or [`XmlError::UnsupportedName`] (a variable or
    /// fragment list the renderer does not set), each naming the file.
    pub fn get(&self, name: &str) -> Result<Template, XmlError> {
        check_template_name(name)?;
        if let Some(dir) = &self.user_dir {
            let path = dir.join(format!("{name}.xml"));
            if let Some(source) = read_user_file(&path)? {
                let template = Template::new(path.display().to_string(), source);
                check_names(&template)?;
                return Ok(template);
            }
        }
        BUILTIN_TEMPLATES
            .iter()
            .find(|(builtin, _)| *builtin == name)
            .map(|(_, template)| template.clone())
            .ok_or_else(|| XmlError::UnknownTemplate {
                name: name.to_owned(),
                available: self.names().map(|n| n.join(", ")).unwrap_or_default(),
            })
    }
}

/// Checks a template name: 1 to 64 of `A-Z a-z 0-9 _ -`.
fn check_template_name(name: &str) -> Result<(), XmlError> {
    let valid = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if valid {
        Ok(())
    } else {
        Err(XmlError::InvalidTemplateName {
            name: name.to_owned(),
        })
    }
}

/// The text of a user template file, `None` when there is no such file. Read with vgpud's
/// one defensive reader: a link is followed (an operator's file), a FIFO never blocks, and
/// only a regular file of at most [`MAX_TEMPLATE_BYTES`] in UTF-8 is read.
fn read_user_file(path: &Path) -> Result<Option<String>, XmlError> {
    crate::persist::read_file(path, MAX_TEMPLATE_BYTES, crate::persist::Links::Follow)
        .map_err(|bad| file_error(path, &bad.reason))
}

/// Checks that `template` uses only the domain variables and fragment lists.
pub(crate) fn check_names(template: &Template) -> Result<(), XmlError> {
    let refs = template.references()?;
    let unknown =
        |kind: &'static str, known: &[&str], used: &std::collections::BTreeSet<String>| {
            used.iter()
                .find(|name| !known.contains(&name.as_str()))
                .map(|name| XmlError::UnsupportedName {
                    template: template.name().to_owned(),
                    kind,
                    name: name.clone(),
                    known: known.join(", "),
                })
        };
    if let Some(e) = unknown("variable", DOMAIN_VARIABLES, &refs.variables) {
        return Err(e);
    }
    if let Some(e) = unknown("fragment list", DOMAIN_FRAGMENT_LISTS, &refs.lists) {
        return Err(e);
    }
    Ok(())
}

fn file_error(path: &Path, message: &str) -> XmlError {
    XmlError::TemplateFile {
        file: path.display().to_string(),
        message: message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn builtin_templates_use_only_domain_names() {
        for (name, template) in BUILTIN_TEMPLATES {
            check_names(template).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(TemplateStore::new(None).get(name).unwrap(), *template);
        }
    }

    #[test]
    fn template_names() {
        for good in ["vdi", "a", "A-b_9", &"x".repeat(64)] {
            check_template_name(good).unwrap();
        }
        for bad in ["", "../x", "a/b", "a.b", "a b", "é", &"x".repeat(65), "x\0"] {
            assert!(
                matches!(
                    check_template_name(bad),
                    Err(XmlError::InvalidTemplateName { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_fifo_or_a_huge_file_as_a_template_is_an_error_naming_it_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let store = TemplateStore::new(Some(dir.path().to_path_buf()));
        nix::unistd::mkfifo(
            &dir.path().join("pipe.xml"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        let err = store.get("pipe").unwrap_err().to_string();
        assert!(err.contains("pipe.xml") && err.contains("a FIFO"), "{err}");
        std::fs::write(
            dir.path().join("huge.xml"),
            vec![b' '; MAX_TEMPLATE_BYTES as usize + 1],
        )
        .unwrap();
        let err = store.get("huge").unwrap_err().to_string();
        assert!(err.contains("huge.xml") && err.contains("limit"), "{err}");
    }
}
