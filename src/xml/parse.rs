//! Reading libvirt domain XML back: what the libvirt hook needs ([`parse_domain`]) and the
//! checks [`super::render_domain`] makes on its own output.
//!
//! libvirt rewrites the XML it stores (quotes, attribute order, added elements and
//! addresses, other metadata), so the reader is namespace-aware and looks only at what it
//! needs: `/domain/name`, `/domain/devices/hostdev`, and vgpud's metadata element found by
//! its namespace [`METADATA_NS`], whatever prefix libvirt gives it. Everything else is
//! skipped. Input over [`MAX_DOMAIN_XML`] bytes, nested deeper than [`MAX_DEPTH`], with a
//! DOCTYPE, or malformed, is an [`XmlError::Parse`].

use std::collections::BTreeSet;

use quick_xml::events::{BytesStart, Event};
use quick_xml::name::{Namespace, ResolveResult};
use quick_xml::NsReader;

use super::{attr, canonical_uuid, check_device_name, PciAddress, XmlError};

/// The namespace of vgpud's domain metadata:
/// `<metadata><vgpud:devices xmlns:vgpud="http://vgpud.org/xmlns/domain/1">…`.
pub const METADATA_NS: &str = "http://vgpud.org/xmlns/domain/1";

/// The largest domain XML [`parse_domain`] reads, in bytes.
pub const MAX_DOMAIN_XML: usize = 16 << 20;

/// The deepest element nesting [`parse_domain`] accepts.
pub const MAX_DEPTH: usize = 128;

/// What the libvirt hook needs of a domain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DomainSummary {
    /// The domain name.
    pub name: String,
    /// The UUIDs (lowercase) of the `<hostdev type='mdev'>` devices, in document order.
    pub mdev_hostdevs: Vec<String>,
    /// The host PCI addresses (`0000:3d:00.4`, lowercase) of the `<hostdev type='pci'>`
    /// devices, in document order.
    pub pci_hostdevs: Vec<String>,
    /// The devices recorded in vgpud's metadata, in document order.
    pub devices: Vec<MetadataDevice>,
}

/// One `<vgpud:device>` of vgpud's domain metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataDevice {
    /// The device's UUID (lowercase): the mdev UUID, or vgpud's handle of a PCI device.
    pub uuid: String,
    /// `mdev` or `pci`.
    pub kind: String,
    /// The type id (`nvidia-259`), attribute `type`.
    pub type_id: String,
    /// The parent device (`0000:3b:00.0`, or a device name such as `mtty`).
    pub parent: String,
    /// The host PCI address of a `pci` device (`0000:3d:00.4`), attribute `address`.
    pub address: Option<String>,
}

/// Reads the name, the mdev and PCI hostdevs and vgpud's metadata from a libvirt domain XML.
///
/// UUIDs and PCI addresses are checked and normalised to lowercase; metadata values are
/// checked to be safe as sysfs names (no `/`, no control characters), since the hook builds
/// paths from them.
pub fn parse_domain(xml: &str) -> Result<DomainSummary, XmlError> {
    scan_domain(xml)
        .map(|scan| scan.summary)
        .map_err(|message| XmlError::Parse { message })
}

/// A guest PCI address: domain, bus, slot, function.
pub(crate) type GuestAddress = (u32, u32, u32, u32);

/// Everything the reader collects: the summary plus the checks of rendered domains.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    pub(crate) summary: DomainSummary,
    /// Whether `/domain/metadata` holds a vgpud metadata element.
    pub(crate) has_metadata: bool,
    /// Whether `/domain/devices/graphics` exists.
    pub(crate) has_graphics: bool,
    /// The `<address type='pci'>` elements outside a `<source>`, in document order.
    pub(crate) guest_addresses: Vec<GuestAddress>,
}

/// Where the reader is: the elements it cares about, the rest is [`Node::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Domain,
    Name,
    Devices,
    Hostdev(HostdevKind),
    HostdevSource(HostdevKind),
    Source,
    Metadata,
    VgpudDevices,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HostdevKind {
    Mdev,
    Pci,
    Other,
}

pub(crate) fn scan_domain(xml: &str) -> Result<Scan, String> {
    if xml.len() > MAX_DOMAIN_XML {
        return Err(format!(
            "{} bytes is more than the {MAX_DOMAIN_XML} bytes accepted",
            xml.len()
        ));
    }
    let mut reader = NsReader::from_str(xml);
    let mut scan = Scan::default();
    let mut path: Vec<Node> = Vec::new();
    let mut seen_root = false;
    let mut name: Option<String> = None;
    loop {
        let event = reader
            .read_event()
            .map_err(|e| format!("malformed XML at byte {}: {e}", reader.error_position()))?;
        let (e, empty) = match event {
            Event::Start(e) => (e, false),
            Event::Empty(e) => (e, true),
            Event::End(_) => {
                path.pop();
                continue;
            }
            Event::Text(t) => {
                if path.last() == Some(&Node::Name) {
                    let text = t.decode().map_err(|e| format!("<name>: {e}"))?;
                    name.get_or_insert_with(String::new).push_str(&text);
                }
                continue;
            }
            Event::CData(t) => {
                if path.last() == Some(&Node::Name) {
                    let text = t.decode().map_err(|e| format!("<name>: {e}"))?;
                    name.get_or_insert_with(String::new).push_str(&text);
                }
                continue;
            }
            Event::GeneralRef(r) => {
                if path.last() == Some(&Node::Name) {
                    let c = super::template::resolve_reference(&r)
                        .map_err(|e| format!("<name>: {e}"))?;
                    name.get_or_insert_with(String::new).push(c);
                }
                continue;
            }
            Event::DocType(_) => return Err("a DOCTYPE is not allowed".to_owned()),
            Event::Eof => break,
            Event::Comment(_) | Event::Decl(_) | Event::PI(_) => continue,
        };
        if path.len() >= MAX_DEPTH {
            return Err(format!("elements nested deeper than {MAX_DEPTH}"));
        }
        let (ns, local) = reader.resolve_element(e.name());
        let local = local.as_ref();
        let plain = matches!(ns, ResolveResult::Unbound);
        let ours =
            matches!(ns, ResolveResult::Bound(Namespace(uri)) if uri == METADATA_NS.as_bytes());
        let node = match path.last() {
            None => {
                if seen_root {
                    return Err("more than one root element".to_owned());
                }
                seen_root = true;
                if !(plain && local == b"domain") {
                    return Err(format!(
                        "the root element is <{}>, not <domain>",
                        String::from_utf8_lossy(e.name().as_ref())
                    ));
                }
                Node::Domain
            }
            Some(Node::Domain) if plain && local == b"name" => {
                if name.is_some() {
                    return Err("more than one <name>".to_owned());
                }
                name = Some(String::new());
                Node::Name
            }
            Some(Node::Domain) if plain && local == b"devices" => Node::Devices,
            Some(Node::Domain) if plain && local == b"metadata" => Node::Metadata,
            Some(Node::Devices) if plain && local == b"hostdev" => {
                match attr(&e, "type", reader.decoder())?.as_deref() {
                    Some("mdev") => Node::Hostdev(HostdevKind::Mdev),
                    Some("pci") => Node::Hostdev(HostdevKind::Pci),
                    _ => Node::Hostdev(HostdevKind::Other),
                }
            }
            Some(Node::Devices) if plain && local == b"graphics" => {
                scan.has_graphics = true;
                Node::Other
            }
            Some(Node::Hostdev(kind)) if plain && local == b"source" => Node::HostdevSource(*kind),
            Some(Node::HostdevSource(kind)) if plain && local == b"address" => {
                match kind {
                    HostdevKind::Mdev => {
                        let uuid = attr(&e, "uuid", reader.decoder())?
                            .ok_or("an mdev <hostdev> source <address> has no uuid")?;
                        let uuid = canonical_uuid("uuid", &uuid).map_err(|e| e.to_string())?;
                        scan.summary.mdev_hostdevs.push(uuid);
                    }
                    HostdevKind::Pci => {
                        let (domain, bus, slot, function) = pci_address(&e, reader.decoder())
                            .map_err(|m| format!("a PCI <hostdev> source <address>: {m}"))?;
                        scan.summary
                            .pci_hostdevs
                            .push(format!("{domain:04x}:{bus:02x}:{slot:02x}.{function:x}"));
                    }
                    HostdevKind::Other => {}
                }
                Node::Other
            }
            Some(Node::Metadata) if ours && local == b"devices" => {
                scan.has_metadata = true;
                Node::VgpudDevices
            }
            Some(Node::VgpudDevices) if ours && local == b"device" => {
                let device = metadata_device(&e, reader.decoder())
                    .map_err(|m| format!("vgpud metadata <device>: {m}"))?;
                scan.summary.devices.push(device);
                Node::Other
            }
            Some(_) if plain && local == b"source" => Node::Source,
            _ => Node::Other,
        };
        // Guest addresses: every <address type='pci'> that does not name a host source.
        if plain
            && local == b"address"
            && !matches!(path.last(), Some(Node::Source | Node::HostdevSource(_)))
            && attr(&e, "type", reader.decoder())?.as_deref() == Some("pci")
        {
            let address = pci_address(&e, reader.decoder())
                .map_err(|m| format!("a guest PCI <address>: {m}"))?;
            scan.guest_addresses.push(address);
        }
        if !empty {
            path.push(node);
        }
    }
    if let Some(open) = path.last() {
        return Err(format!("unexpected end of input inside {open:?}"));
    }
    if !seen_root {
        return Err("no <domain> element".to_owned());
    }
    let name = name.ok_or("the domain has no <name>")?;
    let name = name.trim();
    if name.is_empty() {
        return Err("the domain <name> is empty".to_owned());
    }
    scan.summary.name = name.to_owned();
    Ok(scan)
}

/// Reads a `<vgpud:device>` element.
fn metadata_device(
    e: &BytesStart<'_>,
    decoder: quick_xml::encoding::Decoder,
) -> Result<MetadataDevice, String> {
    let required = |name: &str| -> Result<String, String> {
        attr(e, name, decoder)?.ok_or_else(|| format!("no {name} attribute"))
    };
    let uuid = canonical_uuid("uuid", &required("uuid")?).map_err(|e| e.to_string())?;
    let kind = required("kind")?;
    if kind != "mdev" && kind != "pci" {
        return Err(format!("unknown kind {kind:?} (mdev or pci)"));
    }
    let type_id = required("type")?;
    check_device_name("type", &type_id).map_err(|e| e.to_string())?;
    let parent = required("parent")?;
    check_device_name("parent", &parent).map_err(|e| e.to_string())?;
    let address = attr(e, "address", decoder)?
        .map(|a| PciAddress::parse(&a).map(|a| a.to_string()))
        .transpose()
        .map_err(|e| e.to_string())?;
    Ok(MetadataDevice {
        uuid,
        kind,
        type_id,
        parent,
        address,
    })
}

/// The `domain`, `bus`, `slot` and `function` attributes of an `<address>`, read as libvirt
/// reads them (`0x` hex, a leading `0` octal, else decimal); `domain` defaults to 0.
fn pci_address(
    e: &BytesStart<'_>,
    decoder: quick_xml::encoding::Decoder,
) -> Result<GuestAddress, String> {
    let number = |name: &str, max: u32, default: Option<u32>| -> Result<u32, String> {
        let Some(text) = attr(e, name, decoder)? else {
            return default.ok_or_else(|| format!("no {name} attribute"));
        };
        let (digits, radix) =
            if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
                (hex, 16)
            } else if text.len() > 1 && text.starts_with('0') {
                (&text[1..], 8)
            } else {
                (text.as_str(), 10)
            };
        let valid = !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix));
        match u64::from_str_radix(digits, radix) {
            Ok(n) if valid && n <= u64::from(max) => u32::try_from(n).map_err(|e| e.to_string()),
            _ => Err(format!("bad {name} {text:?}")),
        }
    };
    Ok((
        number("domain", u32::MAX, Some(0))?,
        number("bus", 0xff, None)?,
        number("slot", 0x1f, None)?,
        number("function", 7, None)?,
    ))
}

/// The guest addresses used more than once, formatted.
pub(crate) fn duplicate_addresses(addresses: &[GuestAddress]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut twice = BTreeSet::new();
    for a in addresses {
        if !seen.insert(a) {
            twice.insert(a);
        }
    }
    twice
        .into_iter()
        .map(|(d, b, s, f)| format!("{d:04x}:{b:02x}:{s:02x}.{f:x}"))
        .collect()
}
