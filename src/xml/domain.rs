//! Complete VDI domains: [`VdiDomain`] rendered with a template of a [`TemplateStore`].

use std::collections::BTreeMap;
use std::path::Path;

use quick_xml::events::{BytesEnd, BytesStart, Event};
use quick_xml::Writer;

use super::parse::{duplicate_addresses, scan_domain, MetadataDevice};
use super::store::TemplateStore;
use super::{
    builtin, canonical_uuid, check_device_name, check_name, Context, PciAddress, Template,
    XmlError, METADATA_NS,
};

/// The most devices a [`VdiDomain`] may have.
pub const MAX_DEVICES: usize = 64;

/// The first pcie-root-port's slot on pcie-root (slot 1 is left to a legacy VGA, 0x1f to
/// the ICH9 functions).
const FIRST_PORT_SLOT: u32 = 0x02;
/// The last slot on pcie-root that holds root ports.
const LAST_PORT_SLOT: u32 = 0x1e;

/// The remote display of a [`VdiDomain`], listening on 127.0.0.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Graphics {
    /// `<graphics type='vnc'>`.
    Vnc,
    /// `<graphics type='spice'>`.
    Spice,
}

impl Graphics {
    fn as_str(self) -> &'static str {
        match self {
            Self::Vnc => "vnc",
            Self::Spice => "spice",
        }
    }
}

/// A device of a [`VdiDomain`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainDevice {
    /// A mediated device (vGPU): `<hostdev type='mdev'>`.
    Mdev {
        /// The mdev UUID (canonical form).
        uuid: String,
        /// The mdev type id (`nvidia-259`).
        type_id: String,
        /// The type's name (`GRID RTX6000-4Q`), recorded in the metadata when not empty.
        type_name: String,
        /// The parent device (`0000:3b:00.0`).
        parent: String,
        /// Whether this vGPU should drive the display (at most one device).
        display: bool,
    },
    /// A PCI function (SR-IOV vGPU VF, passthrough GPU): `<hostdev type='pci'>`.
    Pci {
        /// vgpud's handle of the device (canonical UUID form).
        uuid: String,
        /// The host PCI address, `DDDD:BB:SS.F` (`0000:3d:00.4`).
        address: String,
        /// `managed='yes'`: libvirt rebinds the function to vfio-pci (NVIDIA VFs: no).
        managed: bool,
        /// The type id (`nvidia-559`, or a name for passthrough).
        type_id: String,
        /// The parent device (the physical function, `0000:3d:00.0`).
        parent: String,
    },
}

/// A complete VDI guest, rendered by [`render_domain`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VdiDomain {
    /// The domain name: not empty, no control characters, no `/`.
    pub name: String,
    /// The domain UUID (canonical form); libvirt makes one when `None`.
    pub uuid: Option<String>,
    /// Memory in MiB, at least 1.
    pub memory_mib: u64,
    /// vCPUs, at least 1.
    pub vcpus: u32,
    /// The disk image's absolute path: qcow2 when it ends in `.qcow2` (any case), raw
    /// otherwise.
    pub disk: Option<String>,
    /// The libvirt network of the NIC.
    pub network: Option<String>,
    /// Boot with UEFI (`<os firmware='efi'>`).
    pub uefi: bool,
    /// The remote display.
    pub graphics: Graphics,
    /// The vGPUs and PCI functions, at most [`MAX_DEVICES`].
    pub devices: Vec<DomainDevice>,
}

/// Renders `d` with the template `template` of `store` (`vdi`, `minimal`, or a user
/// template).
///
/// The template gets these variables (see `xml-templates/domain-vdi.xml`):
/// `name`, `uuid`?, `memory_mib`, `vcpus`, `firmware`? (`efi`), `disk_path`?,
/// `disk_format`? (`qcow2`/`raw`), `disk_bus`?, `network`?, `network_bus`?, `usb_bus`,
/// `graphics` (`vnc`/`spice`), `vnc`? or `spice`?, `display_vgpu`? (its UUID),
/// `video_model` (`none`/`virtio`), `video_bus`?, `metadata`; `?` marks those that may be
/// unset. Fragment lists: `root_ports`, `hostdevs`, `metadata`.
///
/// Every PCI endpoint (USB controller, disk, NIC, virtio video, each hostdev) gets its own
/// `pcie-root-port` and sits at slot 0 of that port's bus, so guest addresses never
/// collide. The first `Mdev` with `display: true` gets `display='on'` and `ramfb='on'`,
/// and the video model is then `none`. vgpud's metadata (namespace [`METADATA_NS`])
/// records each device for the libvirt hook.
///
/// Errors: invalid input ([`XmlError::InvalidInput`], [`XmlError::InvalidDevice`] for a bad
/// or colliding device or a second display device), template errors, and
/// [`XmlError::Template`] when the rendered domain lacks a hostdev, the metadata, or a
/// graphics device the display needs, or uses a guest PCI address twice.
pub fn render_domain(
    store: &TemplateStore,
    template: &str,
    d: &VdiDomain,
) -> Result<String, XmlError> {
    let template = store.get(template)?;
    render_domain_with(&template, d)
}

/// Renders `d` with `template`, as [`render_domain`] does.
pub fn render_domain_with(template: &Template, d: &VdiDomain) -> Result<String, XmlError> {
    let plan = Plan::new(d)?;
    let xml = template.render(&plan.context)?;
    plan.check(template.name(), &xml)?;
    Ok(xml)
}

/// A checked domain: the template's context and what its rendering must contain.
struct Plan {
    context: Context,
    mdev_uuids: Vec<String>,
    pci_addresses: Vec<String>,
    metadata: Vec<MetadataDevice>,
    needs_graphics: bool,
}

impl Plan {
    fn new(d: &VdiDomain) -> Result<Self, XmlError> {
        check_domain_name(&d.name)?;
        let uuid = d
            .uuid
            .as_deref()
            .map(|u| canonical_uuid("uuid", u))
            .transpose()?;
        if d.memory_mib == 0 {
            return Err(invalid("memory_mib", "0", "must be at least 1"));
        }
        if d.vcpus == 0 {
            return Err(invalid("vcpus", "0", "must be at least 1"));
        }
        if d.memory_mib > MAX_MEMORY_MIB {
            return Err(invalid(
                "memory_mib",
                &d.memory_mib.to_string(),
                "is more than a host has (at most 16 TiB, 16777216 MiB)",
            ));
        }
        if d.vcpus > MAX_VCPUS {
            return Err(invalid(
                "vcpus",
                &d.vcpus.to_string(),
                "is more than QEMU takes (at most 4096)",
            ));
        }
        if let Some(disk) = &d.disk {
            check_name("disk", disk)?;
            if !Path::new(disk).is_absolute() {
                return Err(invalid("disk", disk, "must be an absolute path"));
            }
        }
        if let Some(network) = &d.network {
            check_name("network", network)?;
            if network.contains('/') {
                return Err(invalid("network", network, "must not contain '/'"));
            }
        }
        if d.devices.len() > MAX_DEVICES {
            return Err(invalid(
                "devices",
                &d.devices.len().to_string(),
                &format!("at most {MAX_DEVICES} devices"),
            ));
        }
        let devices = check_devices(&d.devices)?;

        let mut buses = Buses::default();
        let usb_bus = buses.next();
        let disk_bus = d.disk.as_ref().map(|_| buses.next());
        let network_bus = d.network.as_ref().map(|_| buses.next());
        let display = devices.iter().find(|c| c.display).map(|c| c.uuid.clone());
        let video_bus = display.is_none().then(|| buses.next());

        let mut hostdevs = Vec::with_capacity(devices.len());
        for (index, (device, checked)) in d.devices.iter().zip(&devices).enumerate() {
            let guest_bus = bus_hex(buses.next());
            let mut ctx = Context::new();
            ctx.set("guest_bus", guest_bus);
            let fragment = match device {
                DomainDevice::Mdev { .. } => {
                    ctx.set("uuid", checked.uuid.as_str());
                    if checked.display {
                        ctx.set("display", "on").set("ramfb", "on");
                    }
                    builtin::HOSTDEV_MDEV.render(&ctx)
                }
                DomainDevice::Pci { managed, .. } => {
                    let addr = checked.address.ok_or_else(|| XmlError::InvalidDevice {
                        index,
                        message: "a PCI device needs an address".to_owned(),
                    })?;
                    ctx.set("managed", if *managed { "yes" } else { "no" })
                        .set("domain", format!("0x{:04x}", addr.domain))
                        .set("bus", format!("0x{:02x}", addr.bus))
                        .set("slot", format!("0x{:02x}", addr.slot))
                        .set("function", format!("0x{:x}", addr.function))
                        .set("guest_function", "0x0");
                    builtin::HOSTDEV_PCI.render(&ctx)
                }
            }?;
            hostdevs.push(fragment);
        }
        let root_ports = buses.root_ports()?;

        let metadata_fragment = metadata_element(&devices)?;
        let metadata: Vec<MetadataDevice> = devices.iter().map(|c| c.metadata.clone()).collect();

        let mut context = Context::new();
        context
            .set("name", d.name.as_str())
            .set_opt("uuid", uuid)
            .set("memory_mib", d.memory_mib.to_string())
            .set("vcpus", d.vcpus.to_string())
            .set_opt("firmware", d.uefi.then_some("efi"))
            .set("usb_bus", bus_hex(usb_bus))
            .set("graphics", d.graphics.as_str())
            .set(d.graphics.as_str(), "yes")
            .set_opt("display_vgpu", display.clone())
            .set(
                "video_model",
                if display.is_some() { "none" } else { "virtio" },
            )
            .set_opt("video_bus", video_bus.map(bus_hex))
            .set("metadata", "yes")
            .set_fragments("root_ports", root_ports)
            .set_fragments("hostdevs", hostdevs)
            .set_fragments("metadata", vec![metadata_fragment]);
        if let (Some(disk), Some(bus)) = (&d.disk, disk_bus) {
            let format = if disk.to_ascii_lowercase().ends_with(".qcow2") {
                "qcow2"
            } else {
                "raw"
            };
            context
                .set("disk_path", disk.as_str())
                .set("disk_format", format)
                .set("disk_bus", bus_hex(bus));
        }
        if let (Some(network), Some(bus)) = (&d.network, network_bus) {
            context
                .set("network", network.as_str())
                .set("network_bus", bus_hex(bus));
        }
        Ok(Self {
            context,
            mdev_uuids: devices
                .iter()
                .filter(|c| c.metadata.kind == "mdev")
                .map(|c| c.uuid.clone())
                .collect(),
            pci_addresses: devices
                .iter()
                .filter_map(|c| c.address.map(|a| a.to_string()))
                .collect(),
            metadata,
            needs_graphics: display.is_some(),
        })
    }

    /// Checks that the rendered domain holds what vgpud and its hook rely on; a user
    /// template may have left something out.
    fn check(&self, template: &str, xml: &str) -> Result<(), XmlError> {
        let fail = |message: String| XmlError::Template {
            template: template.to_owned(),
            message,
        };
        let scan = scan_domain(xml).map_err(|m| fail(format!("the rendered domain: {m}")))?;
        // Each of vgpud's hostdevs exactly once; a template may add hostdevs of its own.
        let hint = "insert the fragment list `hostdevs` in <devices>, once";
        for (kind, want, got) in [
            ("mdev", &self.mdev_uuids, &scan.summary.mdev_hostdevs),
            ("PCI", &self.pci_addresses, &scan.summary.pci_hostdevs),
        ] {
            for device in want {
                let count = got.iter().filter(|g| *g == device).count();
                if count != 1 {
                    return Err(fail(format!(
                        "the {kind} hostdev {device} is rendered {count} times ({hint})"
                    )));
                }
            }
        }
        if !scan.has_metadata || scan.summary.devices != self.metadata {
            return Err(fail(
                "vgpud's metadata is missing or altered (insert the fragment list \
                 `metadata` in <metadata>)"
                    .to_owned(),
            ));
        }
        if self.needs_graphics && !scan.has_graphics {
            return Err(fail(
                "a vGPU drives the display but no <graphics> device is rendered".to_owned(),
            ));
        }
        let twice = duplicate_addresses(&scan.guest_addresses);
        if !twice.is_empty() {
            return Err(fail(format!(
                "guest PCI address used more than once: {}",
                twice.join(", ")
            )));
        }
        Ok(())
    }
}

/// A device after its checks.
struct Checked {
    uuid: String,
    /// The type name for the metadata's `name` attribute, when not empty.
    type_name: Option<String>,
    display: bool,
    address: Option<PciAddress>,
    metadata: MetadataDevice,
}

/// Checks each device and that they go together: distinct UUIDs and host addresses, at most
/// one display device.
fn check_devices(devices: &[DomainDevice]) -> Result<Vec<Checked>, XmlError> {
    let mut out = Vec::with_capacity(devices.len());
    let mut uuids = BTreeMap::new();
    let mut addresses = BTreeMap::new();
    let mut display_at = None;
    for (index, device) in devices.iter().enumerate() {
        let wrap = |e: XmlError| XmlError::InvalidDevice {
            index,
            message: e.to_string(),
        };
        let collide = |message: String| XmlError::InvalidDevice { index, message };
        let checked = match device {
            DomainDevice::Mdev {
                uuid,
                type_id,
                type_name,
                parent,
                display,
            } => {
                let uuid = canonical_uuid("uuid", uuid).map_err(wrap)?;
                check_device_name("type_id", type_id).map_err(wrap)?;
                if type_name.chars().any(char::is_control) {
                    return Err(wrap(super::invalid_input(
                        "type_name",
                        type_name,
                        "must not contain control characters",
                    )));
                }
                check_device_name("parent", parent).map_err(wrap)?;
                if *display {
                    if let Some(first) = display_at.replace(index) {
                        return Err(collide(format!(
                            "only one vGPU can drive the display (device {first} does)"
                        )));
                    }
                }
                Checked {
                    metadata: MetadataDevice {
                        uuid: uuid.clone(),
                        kind: "mdev".to_owned(),
                        type_id: type_id.clone(),
                        parent: parent.clone(),
                        address: None,
                    },
                    uuid,
                    type_name: (!type_name.is_empty()).then(|| type_name.clone()),
                    display: *display,
                    address: None,
                }
            }
            DomainDevice::Pci {
                uuid,
                address,
                managed: _,
                type_id,
                parent,
            } => {
                let uuid = canonical_uuid("uuid", uuid).map_err(wrap)?;
                let address = PciAddress::parse(address).map_err(wrap)?;
                check_device_name("type_id", type_id).map_err(wrap)?;
                check_device_name("parent", parent).map_err(wrap)?;
                if let Some(first) = addresses.insert(address.to_string(), index) {
                    return Err(collide(format!(
                        "host PCI device {address} is already device {first}"
                    )));
                }
                Checked {
                    metadata: MetadataDevice {
                        uuid: uuid.clone(),
                        kind: "pci".to_owned(),
                        type_id: type_id.clone(),
                        parent: parent.clone(),
                        address: Some(address.to_string()),
                    },
                    uuid,
                    type_name: None,
                    display: false,
                    address: Some(address),
                }
            }
        };
        // The functions of one passthrough device share its UUID; nothing else may.
        let is_pci = matches!(device, DomainDevice::Pci { .. });
        if let Some((first, first_pci)) = uuids.insert(checked.uuid.clone(), (index, is_pci)) {
            if !(is_pci && first_pci) {
                return Err(collide(format!(
                    "UUID {} is already device {first}",
                    checked.uuid
                )));
            }
        }
        out.push(checked);
    }
    Ok(out)
}

/// Hands out guest buses 1, 2, …, one pcie-root-port each.
#[derive(Default)]
struct Buses {
    used: u32,
}

impl Buses {
    fn next(&mut self) -> u32 {
        self.used += 1;
        self.used
    }

    /// The `pcie-root-port` controllers of buses 1 to N: port `i` at slot
    /// `FIRST_PORT_SLOT + (i-1)/8`, function `(i-1)%8` of pcie-root; function 0 is
    /// `multifunction='on'` when its slot holds more than one port.
    fn root_ports(&self) -> Result<Vec<String>, XmlError> {
        let capacity = (LAST_PORT_SLOT - FIRST_PORT_SLOT + 1) * 8;
        if self.used > capacity {
            return Err(invalid(
                "devices",
                &self.used.to_string(),
                &format!("more than {capacity} PCI endpoints"),
            ));
        }
        (1..=self.used)
            .map(|index| {
                let slot = FIRST_PORT_SLOT + (index - 1) / 8;
                let function = (index - 1) % 8;
                let shares_slot = function == 0 && index < self.used;
                root_port(index, slot, function, shares_slot)
            })
            .collect()
    }
}

fn root_port(
    index: u32,
    slot: u32,
    function: u32,
    multifunction: bool,
) -> Result<String, XmlError> {
    let mut w = Writer::new(Vec::new());
    let mut controller = BytesStart::new("controller");
    controller.push_attribute(("type", "pci"));
    controller.push_attribute(("index", index.to_string().as_str()));
    controller.push_attribute(("model", "pcie-root-port"));
    let mut address = BytesStart::new("address");
    address.push_attribute(("type", "pci"));
    address.push_attribute(("domain", "0x0000"));
    address.push_attribute(("bus", "0x00"));
    address.push_attribute(("slot", format!("0x{slot:02x}").as_str()));
    address.push_attribute(("function", format!("0x{function:x}").as_str()));
    if multifunction {
        address.push_attribute(("multifunction", "on"));
    }
    write_events(
        &mut w,
        [
            Event::Start(controller),
            Event::Empty(address),
            Event::End(BytesEnd::new("controller")),
        ],
    )?;
    into_string(w)
}

/// vgpud's metadata element: `<vgpud:devices xmlns:vgpud=METADATA_NS>` with one
/// `<vgpud:device uuid kind type parent [name] [address]/>` per device.
fn metadata_element(devices: &[Checked]) -> Result<String, XmlError> {
    let mut w = Writer::new(Vec::new());
    let mut root = BytesStart::new("vgpud:devices");
    root.push_attribute(("xmlns:vgpud", METADATA_NS));
    write_events(&mut w, [Event::Start(root)])?;
    for device in devices {
        let m = &device.metadata;
        let mut e = BytesStart::new("vgpud:device");
        e.push_attribute(("uuid", m.uuid.as_str()));
        e.push_attribute(("kind", m.kind.as_str()));
        e.push_attribute(("type", m.type_id.as_str()));
        e.push_attribute(("parent", m.parent.as_str()));
        if let Some(name) = &device.type_name {
            e.push_attribute(("name", name.as_str()));
        }
        if let Some(address) = &m.address {
            e.push_attribute(("address", address.as_str()));
        }
        write_events(&mut w, [Event::Empty(e)])?;
    }
    write_events(&mut w, [Event::End(BytesEnd::new("vgpud:devices"))])?;
    into_string(w)
}

fn write_events<'a>(
    w: &mut Writer<Vec<u8>>,
    events: impl IntoIterator<Item = Event<'a>>,
) -> Result<(), XmlError> {
    for event in events {
        w.write_event(event).map_err(|e| XmlError::Write {
            template: "domain fragments".to_owned(),
            message: e.to_string(),
        })?;
    }
    Ok(())
}

fn into_string(w: Writer<Vec<u8>>) -> Result<String, XmlError> {
    String::from_utf8(w.into_inner()).map_err(|e| XmlError::Write {
        template: "domain fragments".to_owned(),
        message: e.to_string(),
    })
}

/// A guest bus number as the templates write it: `0x01`.
fn bus_hex(bus: u32) -> String {
    format!("0x{bus:02x}")
}

/// The most memory a rendered domain may ask for, in MiB (16 TiB).
pub const MAX_MEMORY_MIB: u64 = 16 * 1024 * 1024;
/// The most vCPUs a rendered domain may have (QEMU's q35 limit).
pub const MAX_VCPUS: u32 = 4096;
/// The longest domain name, in bytes (libvirt keeps `<name>.xml` files: names stay well
/// under a file name's 255 bytes).
pub const MAX_DOMAIN_NAME: usize = 200;

/// A libvirt domain name: 1 to [`MAX_DOMAIN_NAME`] bytes, not blank, no white space at either
/// end, no `/`, not `.` or `..`, no control or invisible formatting characters (bidi
/// overrides such as U+202E would show a name other than the real one).
pub fn check_domain_name(name: &str) -> Result<(), XmlError> {
    let reason = if name.len() > MAX_DOMAIN_NAME {
        "is longer than 200 bytes"
    } else if name.trim().is_empty() {
        "must not be empty or blank"
    } else if name.trim() != name {
        "must not start or end with white space"
    } else if name == "." || name == ".." {
        "must not be a dot name"
    } else if name.contains('/') {
        "must not contain '/'"
    } else if name.chars().any(|c| c.is_control() || is_format_char(c)) {
        "must not contain control or invisible formatting characters"
    } else {
        return Ok(());
    };
    Err(invalid("name", name, reason))
}

/// Characters that change how text shows without showing themselves (the engine's rule,
/// which owner tags follow too).
fn is_format_char(c: char) -> bool {
    crate::engine::is_invisible(c)
}

fn invalid(field: &'static str, value: &str, reason: &str) -> XmlError {
    super::invalid_input(field, value, reason)
}
