//! A test double of libvirt for the attach logic: domains with a state and the devices
//! attached to them, calls recorded, and failures on demand. libvirt's own test driver does
//! not support attach and detach.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::{DomainState, DomainXml, Impact, LibvirtError, LibvirtOps};

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// `attach` or `detach`.
    pub op: &'static str,
    /// The domain.
    pub domain: String,
    /// The device XML sent.
    pub xml: String,
    /// Where it applied.
    pub impact: Impact,
}

/// A libvirt with the domains it is given.
#[derive(Default)]
pub struct FakeLibvirt {
    domains: Mutex<BTreeMap<String, DomainState>>,
    /// The device XML attached to each domain.
    attached: Mutex<BTreeMap<String, Vec<String>>>,
    calls: Mutex<Vec<Call>>,
    refuse: Mutex<Option<String>>,
    /// How many times every domain's XML was asked for.
    listed: std::sync::atomic::AtomicUsize,
    /// How many times one domain's state was asked for.
    looked_up: std::sync::atomic::AtomicUsize,
}

impl FakeLibvirt {
    /// Adds a domain.
    pub fn with_domain(self, name: &str, state: DomainState) -> Self {
        self.domains
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), state);
        self
    }

    /// Makes every following attach and detach fail with this libvirt message.
    pub fn refuse_with(&self, message: &str) {
        *self.refuse.lock().unwrap_or_else(|e| e.into_inner()) = Some(message.to_string());
    }

    /// How many times every domain's XML was asked for (`domains`).
    pub fn listings(&self) -> usize {
        self.listed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many times one domain's state was asked for (`domain_state`).
    pub fn state_lookups(&self) -> usize {
        self.looked_up.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Starts or stops a domain.
    pub fn set_active(&self, name: &str, active: bool) {
        if let Some(s) = self
            .domains
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(name)
        {
            s.active = active;
        }
    }

    /// The calls made so far.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn record(
        &self,
        op: &'static str,
        domain: &str,
        xml: &str,
        impact: Impact,
    ) -> Result<(), LibvirtError> {
        self.domain_state(domain)?;
        if let Some(message) = self
            .refuse
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Err(LibvirtError::Refused {
                action: op,
                domain: domain.to_string(),
                message,
            });
        }
        {
            let mut attached = self.attached.lock().unwrap_or_else(|e| e.into_inner());
            let held = attached.entry(domain.to_string()).or_default();
            if op == "attach" {
                held.push(xml.to_string());
            } else if let Some(i) = held.iter().position(|x| x == xml) {
                held.remove(i);
            } else {
                return Err(LibvirtError::Refused {
                    action: op,
                    domain: domain.to_string(),
                    message: "operation failed: matching device not found".into(),
                });
            }
        }
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Call {
                op,
                domain: domain.to_string(),
                xml: xml.to_string(),
                impact,
            });
        Ok(())
    }
}

impl LibvirtOps for FakeLibvirt {
    fn domains(&self) -> Result<Vec<DomainXml>, LibvirtError> {
        self.listed
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let domains = self.domains.lock().unwrap_or_else(|e| e.into_inner());
        let attached = self.attached.lock().unwrap_or_else(|e| e.into_inner());
        Ok(domains
            .keys()
            .map(|name| DomainXml {
                name: name.clone(),
                xml: vec![format!(
                    "<domain type='kvm'><name>{}</name><devices>{}</devices></domain>",
                    quick_xml::escape::escape(name.as_str()),
                    attached.get(name).map(|x| x.concat()).unwrap_or_default()
                )],
            })
            .collect())
    }

    fn domain_state(&self, domain: &str) -> Result<DomainState, LibvirtError> {
        self.looked_up
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.domains
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(domain)
            .copied()
            .ok_or_else(|| LibvirtError::NoDomain {
                domain: domain.to_string(),
                message: format!("Domain not found: no domain with matching name '{domain}'"),
            })
    }

    fn active_domains(&self) -> Result<std::collections::HashSet<String>, LibvirtError> {
        Ok(self
            .domains
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, s)| s.active)
            .map(|(name, _)| name.clone())
            .collect())
    }

    fn attach(&self, domain: &str, xml: &str, impact: Impact) -> Result<(), LibvirtError> {
        self.record("attach", domain, xml, impact)
    }

    fn detach(&self, domain: &str, xml: &str, impact: Impact) -> Result<(), LibvirtError> {
        self.record("detach", domain, xml, impact)
    }
}
