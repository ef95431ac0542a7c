//! libvirt: attaching and detaching vgpud's devices to domains. Every libvirt call goes
//! through [`LibvirtOps`], so the attach logic is tested against a test double
//! ([`testing::FakeLibvirt`]); [`VirtConnection`] is the real one, over the `virt` crate.
//! vgpud starts and serves without libvirt: the connection is opened on first use and opened
//! again after a failure (libvirtd restarted).
//!
//! Which domain holds a device is libvirt's to say (its domains' hostdevs), never the
//! device's owner tag: a device created for `win10-vm`, or a layout pool's device (owner
//! `pool-day`), attaches to any domain while no domain holds it; attaching moves its owner
//! to the domain.

pub mod reclaim;
pub mod testing;

use std::sync::Mutex;

use crate::engine::{DeviceInfo, Engine, EngineError, HostdevOptions};
use crate::model::DeviceKind;

/// What vgpud needs to know of a domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DomainState {
    /// The domain runs.
    pub active: bool,
    /// The domain has a persistent configuration.
    pub persistent: bool,
}

/// Where a change applies: the running domain, its persistent configuration, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Impact {
    /// `VIR_DOMAIN_AFFECT_LIVE`.
    pub live: bool,
    /// `VIR_DOMAIN_AFFECT_CONFIG`.
    pub config: bool,
}

impl Impact {
    fn flags(self) -> u32 {
        let mut f = 0;
        if self.live {
            f |= virt::sys::VIR_DOMAIN_AFFECT_LIVE;
        }
        if self.config {
            f |= virt::sys::VIR_DOMAIN_AFFECT_CONFIG;
        }
        f
    }
}

/// An error from libvirt, with libvirt's own message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LibvirtError {
    /// libvirt cannot be reached.
    #[error("libvirt at {uri} is not available: {message}")]
    Unavailable {
        /// The connection URI.
        uri: String,
        /// libvirt's message.
        message: String,
    },
    /// No such domain.
    #[error("libvirt has no domain {domain:?}: {message}")]
    NoDomain {
        /// The domain name.
        domain: String,
        /// libvirt's message.
        message: String,
    },
    /// libvirt refused the operation.
    #[error("libvirt refused to {action} domain {domain:?}: {message}")]
    Refused {
        /// What was asked.
        action: &'static str,
        /// The domain name.
        domain: String,
        /// libvirt's message.
        message: String,
    },
}

/// A domain's name and its XML: the running definition, and the persistent one too when
/// the domain is both running and persistent (they may hold different devices).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainXml {
    /// The domain name.
    pub name: String,
    /// Its XML descriptions.
    pub xml: Vec<String>,
}

/// The libvirt calls vgpud makes.
pub trait LibvirtOps: Send + Sync {
    /// Every domain, running or defined, with its XML (`virConnectListAllDomains`,
    /// `virDomainGetXMLDesc`).
    fn domains(&self) -> Result<Vec<DomainXml>, LibvirtError>;
    /// The state of a domain.
    fn domain_state(&self, domain: &str) -> Result<DomainState, LibvirtError>;
    /// The names of the domains that run, in one call (`virConnectListAllDomains` with
    /// `VIR_CONNECT_LIST_DOMAINS_ACTIVE`).
    fn active_domains(&self) -> Result<std::collections::HashSet<String>, LibvirtError>;
    /// Attaches a device, given as XML (`virDomainAttachDeviceFlags`).
    fn attach(&self, domain: &str, xml: &str, impact: Impact) -> Result<(), LibvirtError>;
    /// Detaches a device, given as XML (`virDomainDetachDeviceFlags`).
    fn detach(&self, domain: &str, xml: &str, impact: Impact) -> Result<(), LibvirtError>;
}

/// The real libvirt, over the `virt` crate.
pub struct VirtConnection {
    uri: String,
    conn: Mutex<Option<virt::connect::Connect>>,
}

impl VirtConnection {
    /// A connection to `uri`, opened on first use. libvirt's default error printer (which
    /// writes to stderr) is silenced: vgpud reports errors itself.
    pub fn new(uri: &str) -> Self {
        virt::error::clear_error_callback();
        VirtConnection {
            uri: uri.to_string(),
            conn: Mutex::new(None),
        }
    }

    /// Runs `f` on the connection, opening it if needed, and opening it again once if the
    /// call failed because the connection broke.
    fn with<T>(
        &self,
        f: impl Fn(&virt::connect::Connect) -> Result<T, virt::error::Error>,
    ) -> Result<Result<T, virt::error::Error>, LibvirtError> {
        let mut guard = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        for attempt in 0..2 {
            if guard.is_none() {
                let c = virt::connect::Connect::open(Some(&self.uri)).map_err(|e| {
                    LibvirtError::Unavailable {
                        uri: self.uri.clone(),
                        message: e.message().to_string(),
                    }
                })?;
                *guard = Some(c);
            }
            let Some(conn) = guard.as_ref() else {
                continue;
            };
            let result = f(conn);
            let broken = result.is_err() && !conn.is_alive().unwrap_or(false);
            if broken && attempt == 0 {
                tracing::info!(uri = %self.uri, "the libvirt connection broke; opening it again");
                // Dropping the old connection closes it.
                drop(guard.take());
                continue;
            }
            return Ok(result);
        }
        Err(LibvirtError::Unavailable {
            uri: self.uri.clone(),
            message: "the connection broke twice".into(),
        })
    }

    fn domain_call(
        &self,
        domain: &str,
        action: &'static str,
        f: impl Fn(&virt::domain::Domain) -> Result<(), virt::error::Error>,
    ) -> Result<(), LibvirtError> {
        self.with(|c| {
            let d = c.lookup_domain_by_name(domain)?;
            f(&d)
        })?
        .map_err(|e| classify(domain, action, &e))
    }
}

fn classify(domain: &str, action: &'static str, e: &virt::error::Error) -> LibvirtError {
    if matches!(
        e.code(),
        virt::error::ErrorNumberEnum::Known(virt::error::ErrorNumber::NoDomain)
    ) {
        LibvirtError::NoDomain {
            domain: domain.to_string(),
            message: e.message().to_string(),
        }
    } else {
        LibvirtError::Refused {
            action,
            domain: domain.to_string(),
            message: e.message().to_string(),
        }
    }
}

impl LibvirtOps for VirtConnection {
    fn domains(&self) -> Result<Vec<DomainXml>, LibvirtError> {
        self.with(|c| {
            let mut out = Vec::new();
            for d in c.list_all_domains(0)? {
                // A domain that goes away while it is read holds nothing.
                let Ok(name) = d.name() else {
                    continue;
                };
                let mut xml: Vec<String> = d.xml_desc(0).into_iter().collect();
                if d.is_active().unwrap_or(false) && d.is_persistent().unwrap_or(false) {
                    xml.extend(d.xml_desc(virt::sys::VIR_DOMAIN_XML_INACTIVE));
                }
                out.push(DomainXml { name, xml });
            }
            Ok(out)
        })?
        .map_err(|e| LibvirtError::Refused {
            action: "list the devices of",
            domain: "*".into(),
            message: e.message().to_string(),
        })
    }

    fn domain_state(&self, domain: &str) -> Result<DomainState, LibvirtError> {
        self.with(|c| {
            let d = c.lookup_domain_by_name(domain)?;
            Ok(DomainState {
                active: d.is_active()?,
                persistent: d.is_persistent()?,
            })
        })?
        .map_err(|e| classify(domain, "look up", &e))
    }

    fn active_domains(&self) -> Result<std::collections::HashSet<String>, LibvirtError> {
        self.with(|c| {
            let active = c.list_all_domains(virt::sys::VIR_CONNECT_LIST_DOMAINS_ACTIVE)?;
            // A domain's name comes with the list; one that cannot be named is left out.
            Ok(active.iter().filter_map(|d| d.name().ok()).collect())
        })?
        .map_err(|e| LibvirtError::Refused {
            action: "list the running",
            domain: "*".into(),
            message: e.message().to_string(),
        })
    }

    fn attach(&self, domain: &str, xml: &str, impact: Impact) -> Result<(), LibvirtError> {
        // attach_device_flags, never attach_device: the crate's attach_device returns Ok even
        // when libvirt fails.
        self.domain_call(domain, "attach a device to", |d| {
            d.attach_device_flags(xml, impact.flags())
        })
    }

    fn detach(&self, domain: &str, xml: &str, impact: Impact) -> Result<(), LibvirtError> {
        self.domain_call(domain, "detach a device from", |d| {
            d.detach_device_flags(xml, impact.flags())
        })
    }
}

/// An error of attach and detach.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The engine refused (no such device, bad UUID…).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// libvirt refused or is unavailable.
    #[error(transparent)]
    Libvirt(#[from] LibvirtError),
    /// Another domain holds the device (libvirt says so; the owner tag does not count).
    #[error("device {uuid} is attached to domain {owner:?}; detach it there first")]
    OwnedByOther {
        /// The device.
        uuid: String,
        /// The domain that holds it.
        owner: String,
    },
    /// The request makes no sense for the domain's state.
    #[error("{0}")]
    InvalidArgument(String),
}

/// Options of attach and detach: `None` means whatever the domain's state allows (live if
/// it runs, config if it is persistent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AttachOptions {
    /// Change the running domain.
    pub live: Option<bool>,
    /// Change the persistent configuration.
    pub config: Option<bool>,
}

fn impact(state: DomainState, opts: AttachOptions, domain: &str) -> Result<Impact, AttachError> {
    let impact = Impact {
        live: opts.live.unwrap_or(state.active),
        config: opts.config.unwrap_or(state.persistent),
    };
    if impact.live && !state.active {
        return Err(AttachError::InvalidArgument(format!(
            "domain {domain:?} is not running, so \"live\" cannot apply"
        )));
    }
    if impact.config && !state.persistent {
        return Err(AttachError::InvalidArgument(format!(
            "domain {domain:?} is transient, so \"config\" cannot apply"
        )));
    }
    if !impact.live && !impact.config {
        return Err(AttachError::InvalidArgument(
            "neither \"live\" nor \"config\": nothing to change".into(),
        ));
    }
    Ok(impact)
}

/// A domain name, which becomes the device's owner: the owner rule
/// ([`crate::engine::check_owner`]: no outer white space, no invisible or bidirectional
/// character), and not empty.
fn check_domain_name(domain: &str) -> Result<(), AttachError> {
    if domain.is_empty() || domain.len() > 256 || domain.chars().any(char::is_control) {
        return Err(AttachError::InvalidArgument(format!(
            "{:?} is not a domain name",
            domain.chars().take(48).collect::<String>()
        )));
    }
    crate::engine::check_owner("domain", domain).map_err(AttachError::InvalidArgument)
}

/// Attach or detach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Attach the device; its owner (a pool's tag, say) becomes the domain.
    Attach,
    /// Detach the device; it is free again.
    Detach,
}

/// Attaches a device to a domain: its owner becomes the domain. A device another domain
/// holds is refused; its owner tag alone holds nothing.
pub fn attach(
    engine: &Engine,
    ops: &dyn LibvirtOps,
    uuid: &str,
    domain: &str,
    opts: AttachOptions,
) -> Result<DeviceInfo, AttachError> {
    change(engine, ops, uuid, domain, opts, Change::Attach)
}

/// Detaches a device from the domain that holds it; the device is then free (empty owner).
pub fn detach(
    engine: &Engine,
    ops: &dyn LibvirtOps,
    uuid: &str,
    domain: &str,
    opts: AttachOptions,
) -> Result<DeviceInfo, AttachError> {
    change(engine, ops, uuid, domain, opts, Change::Detach)
}

/// Attaches or detaches a device, refusing one another domain holds.
pub fn change(
    engine: &Engine,
    ops: &dyn LibvirtOps,
    uuid: &str,
    domain: &str,
    opts: AttachOptions,
    change: Change,
) -> Result<DeviceInfo, AttachError> {
    check_domain_name(domain)?;
    let device = known_device(engine, uuid)?;
    let fragments = engine.hostdev_fragments(&device.uuid, &HostdevOptions::default())?;
    let impact = impact(ops.domain_state(domain)?, opts, domain)?;
    if let Some(other) = holders(ops, &device)?.into_iter().find(|d| d != domain) {
        return Err(AttachError::OwnedByOther {
            uuid: device.uuid,
            owner: other,
        });
    }
    // A multi-function passthrough device goes in function by function, function 0 last (the
    // guest scans the slot when function 0 appears) and out function 0 first.
    let owner = match change {
        Change::Attach => {
            for xml in fragments.iter().rev() {
                ops.attach(domain, xml, impact)?;
            }
            domain
        }
        Change::Detach => {
            for xml in &fragments {
                ops.detach(domain, xml, impact)?;
            }
            ""
        }
    };
    Ok(engine.set_owner(&device.uuid, owner)?)
}

/// The domains whose running or persistent definition holds `device` as a hostdev: an mdev
/// by its UUID, an SR-IOV vGPU or a passthrough device by its PCI functions.
pub fn holders(ops: &dyn LibvirtOps, device: &DeviceInfo) -> Result<Vec<String>, LibvirtError> {
    Ok(Holdings::read(ops)?.of(device))
}

/// The hostdevs of every domain, read once from libvirt (every domain's XML) to answer
/// [`holders`] for several devices.
#[derive(Debug, Default)]
pub struct Holdings(Vec<(String, Vec<crate::xml::DomainSummary>)>);

impl Holdings {
    /// Reads every domain's definitions; one that cannot be parsed holds nothing.
    pub fn read(ops: &dyn LibvirtOps) -> Result<Holdings, LibvirtError> {
        let domains = ops.domains()?;
        Ok(Holdings(
            domains
                .into_iter()
                .map(|domain| {
                    let summaries = domain
                        .xml
                        .iter()
                        .filter_map(|x| match crate::xml::parse_domain(x) {
                            Ok(summary) => Some(summary),
                            Err(e) => {
                                tracing::warn!(domain = %domain.name, error = %e, "cannot read a domain's XML to see which devices it holds");
                                None
                            }
                        })
                        .collect();
                    (domain.name, summaries)
                })
                .collect(),
        ))
    }

    /// The domains that hold `device`.
    pub fn of(&self, device: &DeviceInfo) -> Vec<String> {
        let functions = match device.kind {
            DeviceKind::Mdev => Vec::new(),
            DeviceKind::SriovVgpu => device.address.iter().cloned().collect(),
            DeviceKind::Passthrough => device.passthrough_functions(),
        };
        let holds = |summary: &crate::xml::DomainSummary| match device.kind {
            DeviceKind::Mdev => summary.mdev_hostdevs.contains(&device.uuid),
            _ => summary.pci_hostdevs.iter().any(|a| functions.contains(a)),
        };
        self.0
            .iter()
            .filter(|(_, summaries)| summaries.iter().any(holds))
            .map(|(name, _)| name.clone())
            .collect()
    }
}

fn known_device(engine: &Engine, uuid: &str) -> Result<DeviceInfo, AttachError> {
    let normalized = crate::model::normalize_uuid(uuid).ok_or_else(|| {
        AttachError::InvalidArgument(format!(
            "{:?} is not a UUID",
            uuid.chars().take(48).collect::<String>()
        ))
    })?;
    engine
        .device(&normalized)
        .ok_or_else(|| EngineError::NotFound(format!("no device {normalized} on this host")).into())
}
