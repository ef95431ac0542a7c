//! libvirt XML rendered with quick-xml from the templates in `xml-templates/`, and read
//! back for the libvirt hook.
//!
//! - `<hostdev>` elements: [`render_mdev_hostdev`], [`render_pci_hostdev`].
//! - Complete VDI domains: [`render_domain`] renders a [`VdiDomain`] with a named template
//!   of a [`TemplateStore`] (built-in `vdi` and `minimal`, or the operator's files in
//!   `/etc/vgpud/templates/`), recording its devices in vgpud's metadata ([`METADATA_NS`]).
//! - [`parse_domain`] reads any libvirt domain XML back into a [`DomainSummary`].
//!
//! The built-in templates are embedded in the binary ([`builtin`]); the `*_with` functions
//! take any [`Template`]. Template syntax: see [`template`].
//!
//! Inputs are checked before rendering: UUIDs must be canonical (8-4-4-4-12 hex, emitted
//! in lowercase), names non-empty without control characters, PCI addresses
//! `DDDD:BB:SS.F`. Every value is escaped by quick-xml when written.

mod domain;
mod parse;
mod store;
pub mod template;

use std::collections::BTreeSet;
use std::fmt;

use quick_xml::encoding::Decoder;
use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

pub use domain::{
    render_domain, render_domain_with, DomainDevice, Graphics, VdiDomain, MAX_DEVICES,
};
pub use parse::{
    parse_domain, DomainSummary, MetadataDevice, MAX_DEPTH, MAX_DOMAIN_XML, METADATA_NS,
};
pub use store::{
    TemplateStore, BUILTIN_TEMPLATES, DOMAIN_FRAGMENT_LISTS, DOMAIN_VARIABLES, MAX_TEMPLATE_BYTES,
};
pub use template::{Context, Template, TemplateRefs, TEMPLATE_NS};

/// Errors from rendering, each naming the template, variable or input at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum XmlError {
    /// A `{variable}` placeholder names a variable that is not set.
    #[error("template {template}: variable `{variable}` is not set")]
    UnknownVariable {
        /// The template's name.
        template: String,
        /// The placeholder's variable.
        variable: String,
    },
    /// A `<vgpud:insert name="…"/>` names a fragment list that is not set.
    #[error("template {template}: no fragment list `{name}` for <vgpud:insert>")]
    UnknownInsert {
        /// The template's name.
        template: String,
        /// The list's name.
        name: String,
    },
    /// A variable's value holds a character XML cannot carry (a control character).
    #[error("template {template}: the value of `{variable}` holds a control character")]
    InvalidValue {
        /// The template's name.
        template: String,
        /// The variable.
        variable: String,
    },
    /// The template is malformed XML or misuses the template syntax.
    #[error("template {template}: {message}")]
    Template {
        /// The template's name.
        template: String,
        /// What is wrong.
        message: String,
    },
    /// A fragment given to `<vgpud:insert>` is malformed.
    #[error("template {template}: fragment {index} of `{list}`: {message}")]
    Fragment {
        /// The template's name.
        template: String,
        /// The fragment list's name.
        list: String,
        /// The fragment's position in the list, from 0.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// The output could not be written.
    #[error("template {template}: writing output: {message}")]
    Write {
        /// The template's name.
        template: String,
        /// What failed.
        message: String,
    },
    /// An input value is invalid.
    #[error("invalid {field} {value:?}: {reason}")]
    InvalidInput {
        /// The input field (`uuid`, `name`, `address`, …).
        field: &'static str,
        /// The rejected value.
        value: String,
        /// Why it is rejected.
        reason: String,
    },
    /// The hostdevs of a domain cannot go together, or one is not a hostdev.
    #[error("hostdev {index}: {message}")]
    InvalidHostdev {
        /// The hostdev's position in the list, from 0.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// A device of a [`VdiDomain`] is invalid or collides with another.
    #[error("device {index}: {message}")]
    InvalidDevice {
        /// The device's position in [`VdiDomain::devices`], from 0.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// A template name is not 1 to 64 of `A-Z a-z 0-9 _ -`.
    #[error("invalid template name {name:?}: a name is 1 to 64 of A-Z a-z 0-9 _ -")]
    InvalidTemplateName {
        /// The rejected name.
        name: String,
    },
    /// No built-in or user template has this name.
    #[error("no template named {name:?} (templates: {available})")]
    UnknownTemplate {
        /// The name asked for.
        name: String,
        /// The names there are, comma-separated.
        available: String,
    },
    /// A user template file or directory cannot be read.
    #[error("template file {file}: {message}")]
    TemplateFile {
        /// The file or directory.
        file: String,
        /// What failed.
        message: String,
    },
    /// A template refers to a variable or fragment list the renderer never sets.
    #[error("template {template}: unknown {kind} `{name}` (known: {known})")]
    UnsupportedName {
        /// The template (a user template's file path).
        template: String,
        /// `variable` or `fragment list`.
        kind: &'static str,
        /// The unknown name.
        name: String,
        /// The names a template may use, comma-separated.
        known: String,
    },
    /// A domain XML given to [`parse_domain`] cannot be read.
    #[error("domain XML: {message}")]
    Parse {
        /// What is wrong.
        message: String,
    },
}

/// The templates built into vgpud, from `xml-templates/`.
pub mod builtin {
    use super::Template;

    /// `<hostdev type='mdev'>` for a mediated device: variables `uuid`, optional `display`
    /// and `ramfb` (`on`/`off`), optional `guest_bus` (the guest PCI bus, `0x01`: adds
    /// `<address type='pci'>` at slot 0 of that bus).
    pub const HOSTDEV_MDEV: Template = Template::from_static(
        "hostdev-mdev.xml",
        include_str!("../../xml-templates/hostdev-mdev.xml"),
    );

    /// `<hostdev type='pci'>` for a PCI function (SR-IOV VF, passthrough): variables
    /// `managed` (`yes`/`no`), `domain`, `bus`, `slot`, `function` (hex with `0x`),
    /// optional `guest_bus` as for [`HOSTDEV_MDEV`].
    pub const HOSTDEV_PCI: Template = Template::from_static(
        "hostdev-pci.xml",
        include_str!("../../xml-templates/hostdev-pci.xml"),
    );

    /// A minimal KVM domain (template `minimal` of [`super::TemplateStore`]): variables
    /// `name`, optional `uuid`, `memory_mib`, `graphics` (the graphics type, set when a
    /// display is needed), `display_vgpu` (set when a vGPU is the display: video model
    /// none), `metadata` (set with the fragment list `metadata`); fragment lists
    /// `root_ports`, `hostdevs`, `metadata`.
    pub const DOMAIN_MINIMAL: Template = Template::from_static(
        "domain-minimal.xml",
        include_str!("../../xml-templates/domain-minimal.xml"),
    );

    /// A complete VDI domain (template `vdi` of [`super::TemplateStore`]); its variables
    /// are those of [`super::DOMAIN_VARIABLES`], documented in [`super::render_domain`].
    pub const DOMAIN_VDI: Template = Template::from_static(
        "domain-vdi.xml",
        include_str!("../../xml-templates/domain-vdi.xml"),
    );
}

/// A mediated device as a libvirt hostdev.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MdevHostdev {
    /// The mdev's UUID (canonical form).
    pub uuid: String,
    /// `display='on'|'off'`; absent when `None`. `on` needs a graphics device in the domain.
    pub display: Option<bool>,
    /// `ramfb='on'|'off'`; absent when `None`. `on` needs `display` on.
    pub ramfb: Option<bool>,
}

/// A PCI function (SR-IOV VF, passthrough device) as a libvirt hostdev.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciHostdev {
    /// The host PCI address, `DDDD:BB:SS.F` (e.g. `0000:3d:00.4`).
    pub address: String,
    /// `managed='yes'` lets libvirt rebind the device to vfio-pci; NVIDIA vGPU VFs need `no`.
    pub managed: bool,
    /// Where the guest sees it; libvirt picks an address when `None`.
    pub guest: Option<GuestPciAddress>,
}

/// A guest-side PCI address: slot 0 of a bus (one pcie-root-port per device), and for a
/// multi-function device the function, `multifunction='on'` on function 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestPciAddress {
    /// Guest bus number.
    pub bus: u8,
    /// Guest function number (0–7).
    pub function: u8,
    /// Set `multifunction='on'` (function 0 of a device with more functions).
    pub multifunction: bool,
}

/// Renders every function of a device as one multi-function device on guest bus `bus`
/// (function 0 with `multifunction='on'`), or a single function with no guest address when
/// there is one function and no bus. `managed` is `no`: vgpud binds the functions itself.
pub fn render_pci_functions(
    addresses: &[String],
    bus: Option<u8>,
) -> Result<Vec<String>, XmlError> {
    let multi = addresses.len() > 1;
    addresses
        .iter()
        .enumerate()
        .map(|(i, address)| {
            let guest = match (multi, bus) {
                (false, None) => None,
                (_, b) => Some(GuestPciAddress {
                    bus: b.unwrap_or(1),
                    function: u8::try_from(i).unwrap_or(u8::MAX),
                    multifunction: multi && i == 0,
                }),
            };
            render_pci_hostdev(&PciHostdev {
                address: address.clone(),
                managed: false,
                guest,
            })
        })
        .collect()
}

/// A minimal KVM domain, for tests and examples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MinimalDomain {
    /// The domain name.
    pub name: String,
    /// The domain UUID, if any (canonical form).
    pub uuid: Option<String>,
    /// Memory in MiB (at least 1).
    pub memory_mib: u64,
    /// Rendered `<hostdev>` fragments, e.g. from [`render_mdev_hostdev`].
    pub hostdevs: Vec<String>,
}

/// Renders the `<hostdev type='mdev'>` element with the built-in template.
pub fn render_mdev_hostdev(dev: &MdevHostdev) -> Result<String, XmlError> {
    render_mdev_hostdev_with(&builtin::HOSTDEV_MDEV, dev)
}

/// Renders the `<hostdev type='mdev'>` element with `template`.
pub fn render_mdev_hostdev_with(
    template: &Template,
    dev: &MdevHostdev,
) -> Result<String, XmlError> {
    let uuid = canonical_uuid("uuid", &dev.uuid)?;
    if dev.ramfb == Some(true) && dev.display != Some(true) {
        return Err(XmlError::InvalidInput {
            field: "ramfb",
            value: "on".to_owned(),
            reason: "ramfb='on' needs display='on'".to_owned(),
        });
    }
    let mut ctx = Context::new();
    ctx.set("uuid", uuid)
        .set_opt("display", dev.display.map(on_off))
        .set_opt("ramfb", dev.ramfb.map(on_off));
    template.render(&ctx)
}

/// Renders the `<hostdev type='pci'>` element with the built-in template.
pub fn render_pci_hostdev(dev: &PciHostdev) -> Result<String, XmlError> {
    render_pci_hostdev_with(&builtin::HOSTDEV_PCI, dev)
}

/// Renders the `<hostdev type='pci'>` element with `template`.
pub fn render_pci_hostdev_with(template: &Template, dev: &PciHostdev) -> Result<String, XmlError> {
    let addr = PciAddress::parse(&dev.address)?;
    let mut ctx = Context::new();
    ctx.set("managed", if dev.managed { "yes" } else { "no" })
        .set("domain", format!("0x{:04x}", addr.domain))
        .set("bus", format!("0x{:02x}", addr.bus))
        .set("slot", format!("0x{:02x}", addr.slot))
        .set("function", format!("0x{:x}", addr.function));
    if let Some(g) = dev.guest {
        if g.function > 7 {
            return Err(XmlError::InvalidInput {
                field: "guest function",
                value: g.function.to_string(),
                reason: "a PCI device has functions 0 to 7".to_owned(),
            });
        }
        ctx.set("guest_bus", format!("0x{:02x}", g.bus))
            .set("guest_function", format!("0x{:x}", g.function));
        if g.multifunction {
            ctx.set("multifunction", "on");
        }
    }
    template.render(&ctx)
}

/// Renders a minimal domain with the built-in template.
pub fn render_minimal_domain(dom: &MinimalDomain) -> Result<String, XmlError> {
    render_minimal_domain_with(&builtin::DOMAIN_MINIMAL, dom)
}

/// Renders a minimal domain with `template`.
///
/// Checks what libvirt's schema does not: each fragment must be one `<hostdev>`; no two
/// hostdevs may share a host source or a guest address; at most one may have
/// `ramfb='on'`. Any `display='on'` hostdev sets the `graphics` variable, which adds a VNC
/// display and `<video><model type='none'/></video>` to the built-in template.
pub fn render_minimal_domain_with(
    template: &Template,
    dom: &MinimalDomain,
) -> Result<String, XmlError> {
    check_name("name", &dom.name)?;
    if dom.memory_mib == 0 {
        return Err(XmlError::InvalidInput {
            field: "memory_mib",
            value: "0".to_owned(),
            reason: "must be at least 1".to_owned(),
        });
    }
    let uuid = dom
        .uuid
        .as_deref()
        .map(|u| canonical_uuid("uuid", u))
        .transpose()?;

    let mut needs_graphics = false;
    let mut ramfb_at = None;
    let mut sources = BTreeSet::new();
    let mut guest_addresses = BTreeSet::new();
    for (index, fragment) in dom.hostdevs.iter().enumerate() {
        let invalid = |message: String| XmlError::InvalidHostdev { index, message };
        let info = HostdevInfo::inspect(fragment).map_err(invalid)?;
        needs_graphics |= info.display_on;
        if info.ramfb_on {
            if let Some(first) = ramfb_at.replace(index) {
                return Err(invalid(format!(
                    "only one vGPU can have ramfb='on' (hostdev {first} has it too)"
                )));
            }
        }
        let source = info
            .source
            .ok_or_else(|| invalid("no <source><address …/></source>".to_owned()))?;
        if !sources.insert(source.clone()) {
            return Err(invalid(format!("host device {source} is already assigned")));
        }
        if let Some(guest) = info.guest_address {
            if !guest_addresses.insert(guest.clone()) {
                return Err(invalid(format!("guest address {guest} is already used")));
            }
        }
    }

    let mut ctx = Context::new();
    ctx.set("name", dom.name.as_str())
        .set_opt("uuid", uuid)
        .set("memory_mib", dom.memory_mib.to_string())
        .set_fragments("root_ports", Vec::new())
        .set_fragments("hostdevs", dom.hostdevs.clone());
    if needs_graphics {
        ctx.set("graphics", "vnc").set("display_vgpu", "yes");
    }
    let xml = template.render(&ctx)?;
    // A user template may ignore `graphics`: libvirt would then refuse to start the domain.
    if needs_graphics && !has_graphics(&xml) {
        return Err(XmlError::Template {
            template: template.name().to_owned(),
            message: "a hostdev has display='on' but no <graphics> device is rendered".to_owned(),
        });
    }
    Ok(xml)
}

/// Whether a rendered domain has a `<domain><devices><graphics>` element.
fn has_graphics(xml: &str) -> bool {
    let mut reader = Reader::from_str(xml);
    let mut path: Vec<Vec<u8>> = Vec::new();
    loop {
        let (e, empty) = match reader.read_event() {
            Ok(Event::Start(e)) => (e, false),
            Ok(Event::Empty(e)) => (e, true),
            Ok(Event::End(_)) => {
                path.pop();
                continue;
            }
            Ok(Event::Eof) | Err(_) => return false,
            Ok(_) => continue,
        };
        let name = e.name().as_ref().to_vec();
        if name == b"graphics" && path.len() == 2 && path[0] == b"domain" && path[1] == b"devices" {
            return true;
        }
        if !empty {
            path.push(name);
        }
    }
}

fn on_off(value: bool) -> &'static str {
    if value {
        "on"
    } else {
        "off"
    }
}

/// Checks a canonical UUID (8-4-4-4-12 hex digits, either case) and lowercases it.
fn canonical_uuid(field: &'static str, value: &str) -> Result<String, XmlError> {
    let bytes = value.as_bytes();
    let valid = bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_hexdigit(),
        });
    if valid {
        Ok(value.to_ascii_lowercase())
    } else {
        Err(XmlError::InvalidInput {
            field,
            value: value.to_owned(),
            reason: "not a canonical UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)".to_owned(),
        })
    }
}

/// An [`XmlError::InvalidInput`].
/// The longest part of a rejected value an error quotes.
const QUOTED: usize = 64;

fn invalid_input(field: &'static str, value: &str, reason: &str) -> XmlError {
    XmlError::InvalidInput {
        field,
        value: value.chars().take(QUOTED).collect(),
        reason: reason.to_owned(),
    }
}

/// Checks a sysfs-safe device or type name: 1 to 255 bytes, no `/`, no whitespace or
/// control characters, not `.` or `..`.
fn check_device_name(field: &'static str, value: &str) -> Result<(), XmlError> {
    let reason = if value.is_empty() {
        "must not be empty"
    } else if value.len() > 255 {
        "is longer than 255 bytes"
    } else if value == "." || value == ".." || value.contains('/') {
        "must not be a path"
    } else if value.chars().any(|c| c.is_control() || c.is_whitespace()) {
        "must not contain whitespace or control characters"
    } else {
        return Ok(());
    };
    Err(invalid_input(field, value, reason))
}

/// Checks a name: non-empty, no control characters.
fn check_name(field: &'static str, value: &str) -> Result<(), XmlError> {
    let reason = if value.is_empty() {
        "must not be empty"
    } else if value.chars().any(char::is_control) {
        "must not contain control characters"
    } else {
        return Ok(());
    };
    Err(invalid_input(field, value, reason))
}

/// A host PCI address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PciAddress {
    domain: u32,
    bus: u8,
    slot: u8,
    function: u8,
}

impl PciAddress {
    /// Parses `DDDD:BB:SS.F` as the kernel writes it: a 4 to 8 digit hex domain, 2 hex
    /// digits of bus, 2 of slot (at most 1f), 1 digit of function (at most 7).
    fn parse(value: &str) -> Result<Self, XmlError> {
        let invalid = |reason: &str| XmlError::InvalidInput {
            field: "address",
            value: value.to_owned(),
            reason: reason.to_owned(),
        };
        let shape = "not a PCI address DDDD:BB:SS.F (e.g. 0000:3d:00.4)";
        let hex = |s: &str, min: usize, max: usize| -> Result<u32, XmlError> {
            if s.len() < min || s.len() > max || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(invalid(shape));
            }
            u32::from_str_radix(s, 16).map_err(|_| invalid(shape))
        };
        let (rest, function) = value.rsplit_once('.').ok_or_else(|| invalid(shape))?;
        let mut parts = rest.split(':');
        let (Some(domain), Some(bus), Some(slot), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid(shape));
        };
        let domain = hex(domain, 4, 8)?;
        let bus = hex(bus, 2, 2)?;
        let slot = hex(slot, 2, 2)?;
        let function = hex(function, 1, 1)?;
        if slot > 0x1f {
            return Err(invalid("slot is above 0x1f"));
        }
        if function > 7 {
            return Err(invalid("function is above 7"));
        }
        // bus, slot and function fit in u8 by the digit counts checked above.
        Ok(Self {
            domain,
            bus: u8::try_from(bus).map_err(|_| invalid(shape))?,
            slot: u8::try_from(slot).map_err(|_| invalid(shape))?,
            function: u8::try_from(function).map_err(|_| invalid(shape))?,
        })
    }
}

impl fmt::Display for PciAddress {
    /// The kernel's form, `0000:3d:00.4`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.slot, self.function
        )
    }
}

/// What a rendered `<hostdev>` fragment says, for the checks across a domain's hostdevs.
#[derive(Debug, Default)]
struct HostdevInfo {
    display_on: bool,
    ramfb_on: bool,
    /// The host side: `type` plus the `<source><address>` attributes, normalised.
    source: Option<String>,
    /// The guest side: the `<address>` child of `<hostdev>`, normalised.
    guest_address: Option<String>,
}

impl HostdevInfo {
    fn inspect(fragment: &str) -> Result<Self, String> {
        let mut reader = Reader::from_str(fragment);
        let mut info = Self::default();
        let mut kind = String::new();
        let mut path: Vec<Vec<u8>> = Vec::new();
        let mut roots = 0;
        loop {
            let event = reader
                .read_event()
                .map_err(|e| format!("malformed XML: {e}"))?;
            let (e, empty) = match event {
                Event::Start(e) => (e, false),
                Event::Empty(e) => (e, true),
                Event::End(_) => {
                    path.pop();
                    continue;
                }
                Event::Eof => break,
                _ => continue,
            };
            let name = e.name().as_ref().to_vec();
            match path.len() {
                0 => {
                    roots += 1;
                    if name != b"hostdev" {
                        return Err(format!(
                            "<{}> is not a <hostdev>",
                            String::from_utf8_lossy(&name)
                        ));
                    }
                    kind = attr(&e, "type", reader.decoder())?.unwrap_or_default();
                    info.display_on =
                        attr(&e, "display", reader.decoder())?.as_deref() == Some("on");
                    info.ramfb_on = attr(&e, "ramfb", reader.decoder())?.as_deref() == Some("on");
                }
                1 if name == b"address" => {
                    info.guest_address = Some(address_key(&e, reader.decoder())?)
                }
                2 if name == b"address" && path[1] == b"source" => {
                    info.source = Some(format!("{kind} {}", address_key(&e, reader.decoder())?));
                }
                _ => {}
            }
            if !empty {
                path.push(name);
            }
        }
        match roots {
            1 => Ok(info),
            0 => Err("empty fragment".to_owned()),
            _ => Err("more than one element in the fragment".to_owned()),
        }
    }
}

/// The most attributes [`attr`] reads on one element (duplicate checks are quadratic).
const MAX_ATTRIBUTES: usize = 64;

/// The unescaped value of attribute `name` of `e`. Every attribute is read, so that a
/// duplicated one is an error wherever it is; more than [`MAX_ATTRIBUTES`] is an error.
fn attr(e: &BytesStart<'_>, name: &str, decoder: Decoder) -> Result<Option<String>, String> {
    let mut found = None;
    for (i, a) in e.attributes().enumerate() {
        if i >= MAX_ATTRIBUTES {
            return Err(format!("more than {MAX_ATTRIBUTES} attributes"));
        }
        let a = a.map_err(|err| format!("bad attribute: {err}"))?;
        if a.key.as_ref() == name.as_bytes() {
            let value = a
                .decode_and_unescape_value(decoder)
                .map_err(|err| format!("attribute {name}: {err}"))?;
            found = Some(value.into_owned());
        }
    }
    Ok(found)
}

/// An `<address>` as a comparable key: its attributes sorted, numbers normalised so that
/// `0x3d` and `0x003D` compare equal.
fn address_key(e: &BytesStart<'_>, decoder: Decoder) -> Result<String, String> {
    let mut pairs = Vec::new();
    for a in e.attributes() {
        let a = a.map_err(|err| format!("bad attribute in <address>: {err}"))?;
        let key = String::from_utf8_lossy(a.key.as_ref()).into_owned();
        let value = a
            .decode_and_unescape_value(decoder)
            .map_err(|err| format!("attribute {key}: {err}"))?;
        let value = match value
            .strip_prefix("0x")
            .or_else(|| value.strip_prefix("0X"))
        {
            Some(hex) => match u64::from_str_radix(hex, 16) {
                Ok(n) => n.to_string(),
                Err(_) => value.to_ascii_lowercase(),
            },
            None => value.to_ascii_lowercase(),
        };
        pairs.push(format!("{key}={value}"));
    }
    pairs.sort();
    Ok(pairs.join(","))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const UUID: &str = "3b2c8a4e-1f0d-4c1e-9b7a-5d6e7f809102";

    fn mdev(display: Option<bool>, ramfb: Option<bool>) -> String {
        render_mdev_hostdev(&MdevHostdev {
            uuid: UUID.to_owned(),
            display,
            ramfb,
        })
        .unwrap()
    }

    fn pci(address: &str, managed: bool) -> Result<String, XmlError> {
        render_pci_hostdev(&PciHostdev {
            address: address.to_owned(),
            managed,
            guest: None,
        })
    }

    fn domain(hostdevs: Vec<String>) -> Result<String, XmlError> {
        render_minimal_domain(&MinimalDomain {
            name: "vm".to_owned(),
            uuid: None,
            memory_mib: 512,
            hostdevs,
        })
    }

    #[test]
    fn mdev_optional_attributes() {
        let plain = mdev(None, None);
        assert!(
            !plain.contains("display") && !plain.contains("ramfb"),
            "{plain}"
        );
        let on = mdev(Some(true), Some(true));
        assert!(
            on.contains("display=\"on\"") && on.contains("ramfb=\"on\""),
            "{on}"
        );
        let off = mdev(Some(false), None);
        assert!(
            off.contains("display=\"off\"") && !off.contains("ramfb"),
            "{off}"
        );
    }

    #[test]
    fn mdev_uuid_is_checked_and_lowercased() {
        let upper = render_mdev_hostdev(&MdevHostdev {
            uuid: UUID.to_uppercase(),
            display: None,
            ramfb: None,
        })
        .unwrap();
        assert!(upper.contains(UUID), "{upper}");
        for bad in [
            "",
            "3b2c8a4e1f0d4c1e9b7a5d6e7f809102",
            "{3b2c8a4e-1f0d-4c1e-9b7a-5d6e7f809102}",
            "3b2c8a4e-1f0d-4c1e-9b7a-5d6e7f80910g",
            "3b2c8a4e-1f0d-4c1e-9b7a_5d6e7f809102",
            "3b2c8a4e-1f0d-4c1e-9b7a-5d6e7f809102 ",
        ] {
            let err = render_mdev_hostdev(&MdevHostdev {
                uuid: bad.to_owned(),
                display: None,
                ramfb: None,
            })
            .unwrap_err();
            assert!(
                matches!(err, XmlError::InvalidInput { field: "uuid", .. }),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn ramfb_needs_display() {
        for display in [None, Some(false)] {
            let err = render_mdev_hostdev(&MdevHostdev {
                uuid: UUID.to_owned(),
                display,
                ramfb: Some(true),
            })
            .unwrap_err();
            assert!(
                matches!(err, XmlError::InvalidInput { field: "ramfb", .. }),
                "{err}"
            );
        }
    }

    #[test]
    fn pci_address_is_split() {
        let xml = pci("0000:3D:00.4", false).unwrap();
        assert!(xml.contains("managed=\"no\""), "{xml}");
        assert!(
            xml.contains("domain=\"0x0000\" bus=\"0x3d\" slot=\"0x00\" function=\"0x4\""),
            "{xml}"
        );
        let xml = pci("10000:e1:1f.7", true).unwrap();
        assert!(
            xml.contains("domain=\"0x10000\" bus=\"0xe1\" slot=\"0x1f\" function=\"0x7\""),
            "{xml}"
        );
    }

    #[test]
    fn bad_pci_addresses() {
        for bad in [
            "",
            "3d:00.4",
            "0000:3d:00",
            "0000:3d:00.8",
            "0000:3d:20.0",
            "000:3d:00.4",
            "0000:3d:00:00.4",
            "0000:3d:0.4",
            "0000:+d:00.4",
            "0000:3d:00.4 ",
            "123456789:3d:00.4",
        ] {
            let err = pci(bad, true).unwrap_err();
            assert!(
                matches!(
                    err,
                    XmlError::InvalidInput {
                        field: "address",
                        ..
                    }
                ),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn domain_name_and_memory_checked() {
        for name in ["", "a\nb", "tab\there"] {
            let err = render_minimal_domain(&MinimalDomain {
                name: name.to_owned(),
                uuid: None,
                memory_mib: 1,
                hostdevs: Vec::new(),
            })
            .unwrap_err();
            assert!(
                matches!(err, XmlError::InvalidInput { field: "name", .. }),
                "{err}"
            );
        }
        let err = render_minimal_domain(&MinimalDomain {
            name: "vm".to_owned(),
            uuid: Some("nope".to_owned()),
            memory_mib: 1,
            hostdevs: Vec::new(),
        })
        .unwrap_err();
        assert!(
            matches!(err, XmlError::InvalidInput { field: "uuid", .. }),
            "{err}"
        );
        let err = render_minimal_domain(&MinimalDomain {
            name: "vm".to_owned(),
            uuid: None,
            memory_mib: 0,
            hostdevs: Vec::new(),
        })
        .unwrap_err();
        assert!(
            matches!(
                err,
                XmlError::InvalidInput {
                    field: "memory_mib",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn hostile_domain_name_is_escaped() {
        let xml = render_minimal_domain(&MinimalDomain {
            name: "<evil>&'\"".to_owned(),
            uuid: None,
            memory_mib: 1,
            hostdevs: Vec::new(),
        })
        .unwrap();
        assert!(
            xml.contains("<name>&lt;evil&gt;&amp;&apos;&quot;</name>"),
            "{xml}"
        );
    }

    #[test]
    fn graphics_only_with_display_on() {
        let none = domain(vec![mdev(None, None), mdev_other(Some(false))]).unwrap();
        assert!(
            !none.contains("<graphics") && !none.contains("<video"),
            "{none}"
        );
        let on = domain(vec![mdev(Some(true), None)]).unwrap();
        assert!(on.contains("<graphics type=\"vnc\""), "{on}");
        assert!(
            on.contains("<video>\n      <model type=\"none\"/>\n    </video>"),
            "{on}"
        );
    }

    fn mdev_other(display: Option<bool>) -> String {
        render_mdev_hostdev(&MdevHostdev {
            uuid: "0c1d2e3f-4a5b-4c6d-8e7f-8091a2b3c4d5".to_owned(),
            display,
            ramfb: None,
        })
        .unwrap()
    }

    #[test]
    fn duplicate_hostdevs_refused() {
        let err = domain(vec![mdev(None, None), mdev(Some(true), None)]).unwrap_err();
        assert!(
            matches!(err, XmlError::InvalidHostdev { index: 1, .. }),
            "{err}"
        );
        let a = pci("0000:3d:00.4", false).unwrap();
        let b = pci("0000:3D:00.4", true).unwrap();
        let err = domain(vec![a, b]).unwrap_err();
        assert!(
            matches!(err, XmlError::InvalidHostdev { index: 1, .. }),
            "{err}"
        );
        // An mdev and a PCI device never collide.
        domain(vec![mdev(None, None), pci("0000:3d:00.4", false).unwrap()]).unwrap();
    }

    #[test]
    fn duplicate_guest_addresses_refused() {
        let with_guest = |uuid: &str, slot: &str| {
            format!(
                "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>\
                 <source><address uuid='{uuid}'/></source>\
                 <address type='pci' domain='0x0000' bus='0x00' slot='{slot}' function='0x0'/>\
                 </hostdev>"
            )
        };
        let other = "0c1d2e3f-4a5b-4c6d-8e7f-8091a2b3c4d5";
        domain(vec![with_guest(UUID, "0x05"), with_guest(other, "0x06")]).unwrap();
        let err = domain(vec![with_guest(UUID, "0x05"), with_guest(other, "0x5")]).unwrap_err();
        assert!(
            matches!(err, XmlError::InvalidHostdev { index: 1, .. }),
            "{err}"
        );
    }

    #[test]
    fn one_ramfb_per_domain() {
        let err = domain(vec![
            mdev(Some(true), Some(true)),
            render_mdev_hostdev(&MdevHostdev {
                uuid: "0c1d2e3f-4a5b-4c6d-8e7f-8091a2b3c4d5".to_owned(),
                display: Some(true),
                ramfb: Some(true),
            })
            .unwrap(),
        ])
        .unwrap_err();
        assert!(
            matches!(err, XmlError::InvalidHostdev { index: 1, .. }),
            "{err}"
        );
    }

    #[test]
    fn fragments_must_be_hostdevs() {
        for bad in [
            "<disk/>",
            "",
            "<hostdev type='mdev'/><hostdev type='mdev'/>",
            "<hostdev type='mdev'>",
            "<hostdev mode='subsystem' type='mdev' model='vfio-pci'/>",
        ] {
            let err = domain(vec![bad.to_owned()]).unwrap_err();
            assert!(
                matches!(err, XmlError::InvalidHostdev { index: 0, .. }),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn user_template() {
        let t = Template::new(
            "custom.xml",
            "<hostdev mode='subsystem' type='mdev' model='vfio-pci' display='{display?}'>\
             <source><address uuid='{uuid}'/></source><alias name='ua-{uuid}'/></hostdev>",
        );
        let xml = render_mdev_hostdev_with(
            &t,
            &MdevHostdev {
                uuid: UUID.to_owned(),
                display: None,
                ramfb: None,
            },
        )
        .unwrap();
        assert!(
            xml.contains(&format!("<alias name=\"ua-{UUID}\"/>")),
            "{xml}"
        );
        let t = Template::new("bad.xml", "<hostdev x='{nope}'/>");
        let err = render_mdev_hostdev_with(
            &t,
            &MdevHostdev {
                uuid: UUID.to_owned(),
                display: None,
                ramfb: None,
            },
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "template bad.xml: variable `nope` is not set"
        );
    }

    #[test]
    fn user_domain_template_must_render_graphics_for_display_on() {
        let t = Template::new(
            "no-graphics.xml",
            "<domain type='kvm'><name>{name}</name><memory unit='MiB'>{memory_mib}</memory>\
             <os><type>hvm</type></os><devices><vgpud:insert name='hostdevs'/></devices>\
             </domain>",
        );
        let dom = |display| MinimalDomain {
            name: "vm".to_owned(),
            uuid: None,
            memory_mib: 64,
            hostdevs: vec![mdev(display, None)],
        };
        render_minimal_domain_with(&t, &dom(Some(false))).unwrap();
        let err = render_minimal_domain_with(&t, &dom(Some(true))).unwrap_err();
        assert!(
            matches!(&err, XmlError::Template { template, .. } if template == "no-graphics.xml"),
            "{err}"
        );
    }
}
