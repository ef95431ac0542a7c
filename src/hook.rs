//! `vgpud libvirt-hook`: just-in-time devices for libvirt domains. libvirt runs the hooks in
//! `/etc/libvirt/hooks/qemu.d/` with `DOMAIN OPERATION SUB-OPERATION EXTRA` and the domain
//! XML on stdin. On `prepare begin` the hook makes sure every mdev hostdev of the domain
//! exists, asking vgpud over the system bus to start it (if defined) or create it (with the
//! uuid, type and parent from vgpud's metadata in the domain, or on any GPU with room); on
//! `release end` it removes the transient devices it made for the domain. A prepare that
//! fails takes back what it did (removes the devices it created, stops those it started) at
//! once, rather than holding a GPU's room until a `release end`. It never calls
//! libvirt (a hook that does deadlocks libvirtd), prints nothing on stdout, and on failure
//! exits non-zero with a message on stderr, which stops the domain from starting.

use std::collections::HashMap;
use std::io::Read;

use zbus::{OwnedVariant, Variant};

use vgpud_client::ManagerProxy;

use crate::dbus::BUS_NAME;
use crate::xml;

/// The largest domain XML the hook reads.
const MAX_XML: u64 = 16 << 20;

/// Why the hook failed; the message goes to stderr.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The arguments are not what libvirt passes.
    #[error(
        "usage: vgpud libvirt-hook DOMAIN OPERATION SUB-OPERATION EXTRA (domain XML on stdin); {0}"
    )]
    Usage(String),
    /// The domain XML could not be read.
    #[error("reading the domain XML of {domain}: {message}")]
    Xml {
        /// The domain.
        domain: String,
        /// What went wrong.
        message: String,
    },
    /// vgpud could not be reached.
    #[error("cannot reach vgpud on the system bus: {0}")]
    Bus(zbus::Error),
    /// A device could not be provided.
    #[error("domain {domain}: cannot provide mdev {uuid}: {reason}")]
    Device {
        /// The domain.
        domain: String,
        /// The device.
        uuid: String,
        /// Why.
        reason: String,
    },
    /// A prepare failed, and some of what it made could not be taken back.
    #[error("{error}; and what this prepare made could not all be taken back: {left}")]
    Undo {
        /// Why the prepare failed.
        error: Box<HookError>,
        /// The devices left, and why.
        left: String,
    },
}

/// What vgpud says of one device.
#[derive(Debug, Default)]
struct Known {
    active: bool,
    persistent: bool,
    owner: String,
}

/// Runs the hook with libvirt's arguments (without the program name) and the domain XML on
/// `stdin`. Only `prepare begin` and `release end` do anything.
pub fn run(args: &[String], stdin: impl Read) -> Result<(), HookError> {
    let [domain, operation, sub, _extra] = args else {
        return Err(HookError::Usage(format!("got {} arguments", args.len())));
    };
    let act = matches!(
        (operation.as_str(), sub.as_str()),
        ("prepare", "begin") | ("release", "end")
    );
    let mut text = String::new();
    stdin
        .take(MAX_XML)
        .read_to_string(&mut text)
        .map_err(|e| HookError::Xml {
            domain: domain.clone(),
            message: e.to_string(),
        })?;
    if !act {
        return Ok(());
    }
    let summary = xml::parse_domain(&text).map_err(|e| HookError::Xml {
        domain: domain.clone(),
        message: e.to_string(),
    })?;
    if summary.mdev_hostdevs.is_empty() {
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| HookError::Bus(zbus::Error::Failure(e.to_string())))?;
    runtime.block_on(async {
        let conn = zbus::connection::Builder::system()
            .build()
            .await
            .map_err(HookError::Bus)?;
        let known = known_devices(&conn).await?;
        let manager = ManagerProxy::new(&conn).await.map_err(HookError::Bus)?;
        if operation == "prepare" {
            prepare(domain, &summary, &known, &manager).await
        } else {
            release(domain, &summary, &known, &manager).await
        }
    })
}

async fn known_devices(conn: &zbus::Connection) -> Result<HashMap<String, Known>, HookError> {
    let om = zbus::fdo::ObjectManagerProxy::builder(conn)
        .destination(BUS_NAME)
        .path("/org/vgpud1")
        .build()
        .await
        .map_err(HookError::Bus)?;
    let objects = om
        .get_managed_objects()
        .await
        .map_err(|e| HookError::Bus(e.into()))?;
    let mut out = HashMap::new();
    for ifaces in objects.values() {
        let Some(props) = ifaces
            .iter()
            .find(|(name, _)| name.as_str() == "org.vgpud1.Device")
            .map(|(_, p)| p)
        else {
            continue;
        };
        let text = |k: &str| {
            props
                .get(k)
                .and_then(|v: &OwnedVariant| <&str>::try_from(v).ok())
                .unwrap_or_default()
                .to_string()
        };
        let flag = |k: &str| {
            props
                .get(k)
                .and_then(|v| bool::try_from(v).ok())
                .unwrap_or(false)
        };
        out.insert(
            text("Uuid"),
            Known {
                active: flag("Active"),
                persistent: flag("Persistent"),
                owner: text("Owner"),
            },
        );
    }
    Ok(out)
}

fn device_error(domain: &str, uuid: &str, e: zbus::Error) -> HookError {
    let reason = match &e {
        zbus::Error::MethodError(name, Some(msg), _) => format!("{name}: {msg}"),
        other => other.to_string(),
    };
    HookError::Device {
        domain: domain.to_string(),
        uuid: uuid.to_string(),
        reason,
    }
}

/// What a `prepare begin` did so far, so that a prepare that fails can take it back.
#[derive(Debug, Default)]
struct Provided {
    /// Devices it created.
    created: Vec<String>,
    /// Defined devices it started.
    started: Vec<String>,
}

/// Provides every mdev of the domain; when one cannot be provided, takes back what this
/// prepare created or started (libvirt does not start the domain), and fails with the
/// first error.
async fn prepare(
    domain: &str,
    summary: &xml::DomainSummary,
    known: &HashMap<String, Known>,
    manager: &ManagerProxy<'_>,
) -> Result<(), HookError> {
    let mut done = Provided::default();
    let Err(error) = provide(domain, summary, known, manager, &mut done).await else {
        return Ok(());
    };
    let mut left = Vec::new();
    for uuid in done.created.iter().rev() {
        if let Err(e) = manager.remove_device(uuid, HashMap::new()).await {
            left.push(format!(
                "{uuid} (not removed: {})",
                device_error(domain, uuid, e)
            ));
        }
    }
    for uuid in done.started.iter().rev() {
        if let Err(e) = manager.stop_device(uuid, HashMap::new()).await {
            left.push(format!(
                "{uuid} (not stopped: {})",
                device_error(domain, uuid, e)
            ));
        }
    }
    if left.is_empty() {
        return Err(error);
    }
    Err(HookError::Undo {
        error: Box::new(error),
        left: left.join("; "),
    })
}

async fn provide(
    domain: &str,
    summary: &xml::DomainSummary,
    known: &HashMap<String, Known>,
    manager: &ManagerProxy<'_>,
    done: &mut Provided,
) -> Result<(), HookError> {
    for uuid in &summary.mdev_hostdevs {
        match known.get(uuid) {
            Some(k) if k.active => continue,
            Some(_) => {
                manager
                    .start_device(uuid, HashMap::new())
                    .await
                    .map_err(|e| device_error(domain, uuid, e))?;
                done.started.push(uuid.clone());
            }
            None => {
                let meta = summary
                    .devices
                    .iter()
                    .find(|d| &d.uuid == uuid)
                    .ok_or_else(|| HookError::Device {
                        domain: domain.to_string(),
                        uuid: uuid.clone(),
                        reason: "it does not exist and the domain's vgpud metadata does not say its type".into(),
                    })?;
                let base = |with_parent: bool| {
                    let mut o: HashMap<&str, Variant<'_>> = HashMap::new();
                    o.insert("uuid", Variant::from(uuid.as_str()));
                    o.insert("owner", Variant::from(domain));
                    o.insert("persistent", Variant::from(false));
                    if with_parent {
                        o.insert("parent", Variant::from(meta.parent.as_str()));
                    }
                    o
                };
                let first = manager.create_device(&meta.type_id, base(true)).await;
                if let Err(e) = first {
                    // The recorded GPU cannot take it (gone, full): any GPU with room will do.
                    let retry = matches!(&e, zbus::Error::MethodError(name, _, _)
                        if name.as_str() == "org.vgpud1.Error.NoCapacity"
                            || name.as_str() == "org.vgpud1.Error.NotFound");
                    if !retry {
                        return Err(device_error(domain, uuid, e));
                    }
                    manager
                        .create_device(&meta.type_id, base(false))
                        .await
                        .map_err(|e| device_error(domain, uuid, e))?;
                }
                done.created.push(uuid.clone());
            }
        }
    }
    Ok(())
}

async fn release(
    domain: &str,
    summary: &xml::DomainSummary,
    known: &HashMap<String, Known>,
    manager: &ManagerProxy<'_>,
) -> Result<(), HookError> {
    let mut first_error = None;
    for uuid in &summary.mdev_hostdevs {
        let Some(k) = known.get(uuid) else {
            continue;
        };
        if k.persistent || k.owner != domain {
            continue;
        }
        if let Err(e) = manager.remove_device(uuid, HashMap::new()).await {
            first_error.get_or_insert(device_error(domain, uuid, e));
        }
    }
    first_error.map_or(Ok(()), Err)
}
