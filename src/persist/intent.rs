//! Intents: every change to the host is recorded before it starts and closed when it ends. At
//! start vgpud replays what is left (completes or rolls back each intent) before it serves
//! anyone. The engine never runs two operations on one UUID.
//!
//! Intents live in the write-ahead journal ([`super::journal`]). Files of the format vgpud
//! wrote before it had one, `var/lib/vgpud/intents/<uuid>.json`, are still read and replayed
//! (an upgrade may find them left by a crash), and removed once replayed.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{write_atomic, PersistResult};
use crate::host::Host;

/// The format version of intents.
pub const VERSION: u32 = 1;

/// What was being done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Operation {
    /// Creating a device: on replay, finish it if the device exists, else undo.
    Create {
        /// Parent GPU chosen, once known (a create tries GPUs in turn).
        parent: Option<String>,
        /// Type id, once known.
        type_id: Option<String>,
        /// Owner tag.
        owner: String,
        /// Vendor parameters.
        params: Option<String>,
        /// Write a persistent definition.
        persistent: bool,
        /// Start when the parent appears.
        autostart: bool,
    },
    /// Removing a device: on replay, always finish.
    Remove {
        /// Parent GPU.
        parent: String,
    },
    /// Starting a defined device: on replay, write its attributes again if it exists.
    Start {
        /// Parent GPU.
        parent: String,
    },
    /// Stopping a device and keeping its definition: on replay, finish.
    Stop {
        /// Parent GPU.
        parent: String,
    },
    /// Giving a PCI device (an SR-IOV vGPU's VF, passthrough functions) to a UUID, for a create
    /// or a start: on replay, finish it if the host shows it done, else roll it back.
    Assign {
        /// The device kind.
        kind: super::state::DeviceKind,
        /// Parent GPU.
        parent: String,
        /// The VF, or the function passed through.
        address: String,
        /// Type id.
        type_id: String,
        /// Passthrough: the functions being moved and their drivers before.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        functions: Vec<crate::model::MovedFunction>,
        /// Owner tag.
        owner: String,
        /// Vendor parameters.
        params: Option<String>,
        /// Keep it across reboots.
        persistent: bool,
        /// Start it at boot.
        autostart: bool,
        /// When it was first created (kept by a start).
        created: u64,
        /// A create (its record goes on roll-back), not a start.
        new: bool,
    },
    /// Taking a PCI device back (remove or stop): on replay, always finish.
    Release {
        /// The device kind.
        kind: super::state::DeviceKind,
        /// Parent GPU.
        parent: String,
        /// The VF, or the function passed through.
        address: String,
        /// Type id.
        type_id: String,
        /// Passthrough: the functions to give back to their drivers.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        functions: Vec<crate::model::MovedFunction>,
        /// Keep the record (a stop), else forget the device (a remove).
        keep: bool,
    },
    /// Changing persistence: on replay, apply the target again.
    Modify {
        /// Parent GPU.
        parent: String,
        /// Target persistence.
        persistent: bool,
        /// Target autostart.
        autostart: bool,
    },
}

/// One open intent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// Format version ([`VERSION`]).
    pub version: u32,
    /// The device.
    pub uuid: String,
    /// When it was opened, seconds since the Unix epoch.
    pub started: u64,
    /// What is being done.
    #[serde(flatten)]
    pub operation: Operation,
}

/// `ROOT/var/lib/vgpud/intents`.
pub fn dir(host: &Host) -> PathBuf {
    host.state("intents")
}

fn path(host: &Host, uuid: &str) -> PathBuf {
    dir(host).join(format!("{uuid}.json"))
}

/// Records an intent (also used to update it, e.g. once the GPU is chosen), before the host
/// changes: in the journal, written but not synced (see [`super::journal`]).
pub fn open(host: &Host, intent: &Intent) -> PersistResult<()> {
    super::journal::of(host).open_intent(intent)
}

/// Closes the intent of a UUID. Not waited for: an intent that comes back after a power cut
/// names work that is done, and its replay finds it so.
pub fn close(host: &Host, uuid: &str) -> PersistResult<()> {
    super::journal::of(host).close_intent(uuid)
}

/// Closes a replayed intent: in the journal, and the file of the older format if it was one.
pub fn close_replayed(host: &Host, uuid: &str) -> PersistResult<()> {
    close(host, uuid)?;
    super::remove_lazy(&path(host, uuid)).map(|_| ())
}

/// Writes an intent as a file of the older format (what an older vgpud left; for tests of
/// the upgrade path).
pub fn write_legacy(host: &Host, intent: &Intent) -> PersistResult<()> {
    let text = serde_json::to_string(intent).unwrap_or_default();
    write_atomic(&path(host, &intent.uuid), text.as_bytes(), 0o600)
}

/// What an intent is called in the log when one is bad.
pub const WHAT: &str = "intent (its operation is not replayed)";

/// Every open intent, oldest first: those of the journal as recovered at start
/// ([`super::journal::recover`], which this calls), then the files of the older format. A bad
/// file (garbage, a file that is not an intent of the UUID its name says, or an intent of a
/// version other than [`VERSION`]) is set aside as `<name>.json.bad` and reported once, as
/// the journal is for such an entry: an intent is never replayed by a vgpud that does not
/// know its format, and, kept aside, is not lost.
pub fn read_all(host: &Host) -> PersistResult<Vec<Intent>> {
    let mut out = super::journal::recover(host)?.intents;
    // Every version is read, for `check` to refuse those it does not know.
    let mut files = super::read_json_dir(&dir(host), WHAT, u32::MAX, check)?;
    files.sort_by_key(|i| (i.started, i.uuid.clone()));
    for f in files {
        if !out.iter().any(|i| i.uuid == f.uuid) {
            out.push(f);
        }
    }
    Ok(out)
}

/// An intent is of the format this vgpud knows, names its own UUID, and every name its
/// replay puts in a path is plain.
pub(super) fn check(i: &Intent, key: &str) -> Result<(), String> {
    if i.version != VERSION {
        return Err(format!(
            "an intent of format version {}, which this vgpud (version {VERSION}) does not know",
            i.version
        ));
    }
    super::names_its_uuid(&i.uuid, key)?;
    let (parent, address, functions) = match &i.operation {
        Operation::Create { parent, .. } => (parent.as_deref(), None, &[][..]),
        Operation::Remove { parent }
        | Operation::Start { parent }
        | Operation::Stop { parent }
        | Operation::Modify { parent, .. } => (Some(parent.as_str()), None, &[][..]),
        Operation::Assign {
            parent,
            address,
            functions,
            ..
        }
        | Operation::Release {
            parent,
            address,
            functions,
            ..
        } => (
            Some(parent.as_str()),
            Some(address.as_str()),
            functions.as_slice(),
        ),
    };
    for (field, name) in [("parent", parent), ("address", address)] {
        if let Some(name) = name {
            super::plain_name(field, name)?;
        }
    }
    super::plain_functions(functions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intents_open_update_list_and_close() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let mut intent = Intent {
            version: VERSION,
            uuid: "a1b2c3d4-0000-4000-8000-000000000001".into(),
            started: 5,
            operation: Operation::Create {
                parent: None,
                type_id: None,
                owner: "vm".into(),
                params: None,
                persistent: true,
                autostart: true,
            },
        };
        open(&host, &intent).expect("open");
        if let Operation::Create { parent, .. } = &mut intent.operation {
            *parent = Some("mtty".into());
        }
        open(&host, &intent).expect("update");
        assert_eq!(read_all(&host).expect("read"), vec![intent.clone()]);
        let text = std::fs::read_to_string(super::super::journal::path(&host)).expect("text");
        assert!(text.contains("\"op\":\"create\""), "{text}");
        close(&host, &intent.uuid).expect("close");
        assert!(read_all(&host).expect("read").is_empty());
        // An intent file an older vgpud left is read too, and goes once replayed.
        write_legacy(&host, &intent).expect("legacy");
        assert_eq!(read_all(&host).expect("read"), vec![intent.clone()]);
        close_replayed(&host, &intent.uuid).expect("close");
        assert!(read_all(&host).expect("read").is_empty());
        // One of a version this vgpud does not know is set aside, not replayed, not fatal.
        let newer = Intent {
            version: 99,
            ..intent.clone()
        };
        write_legacy(&host, &newer).expect("legacy");
        assert!(read_all(&host).expect("read").is_empty());
        assert!(super::dir(&host)
            .join(format!("{}.json.bad", intent.uuid))
            .exists());
    }

    #[test]
    fn an_intent_both_in_the_journal_and_in_an_old_file_is_read_once_as_the_journal_has_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = Host::new(dir.path());
        let intent = |uuid: &str, started: u64, operation: Operation| Intent {
            version: VERSION,
            uuid: uuid.into(),
            started,
            operation,
        };
        let remove = || Operation::Remove {
            parent: "mtty".into(),
        };
        let journaled = intent(
            "a1b2c3d4-0000-4000-8000-000000000001",
            5,
            Operation::Start {
                parent: "mtty".into(),
            },
        );
        open(&host, &journaled).expect("open");
        // An older vgpud's file of the same UUID (an upgrade after a crash), and of another.
        write_legacy(&host, &intent(&journaled.uuid, 1, remove())).expect("legacy");
        let other = intent("a1b2c3d4-0000-4000-8000-000000000002", 3, remove());
        write_legacy(&host, &other).expect("legacy");
        assert_eq!(read_all(&host).expect("read"), vec![journaled, other]);
    }
}
