//! Complete VDI domains: [`render_domain`] with the built-in and user templates, against
//! golden files in `tests/golden/xml/`, libvirt's schema (`virt-xml-validate`) and libvirt's
//! own parser (the test driver `test:///default`: define, read back, undefine); and
//! [`parse_domain`], the libvirt hook's reader, on what vgpud renders, on what libvirt gives
//! back and on hostile input.
//!
//! `VGPUD_REGENERATE_GOLDEN=1 cargo test --test domain_render` rewrites the golden files.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::fs;

use common::golden::assert_golden;
use common::libvirt::{assert_defines, assert_valid_domain, define_and_read_back};
use quick_xml::events::{BytesStart, Event};
use vgpud::xml::{
    parse_domain, render_domain, DomainDevice, DomainSummary, Graphics, MetadataDevice,
    TemplateStore, VdiDomain, XmlError, MAX_DOMAIN_XML, METADATA_NS,
};

const DOMAIN_UUID: &str = "6f1a9c2e-8b3d-4e5f-a061-7c8d9e0f1a2b";
const MDEV_1: &str = "3b2c8a4e-1f0d-4c1e-9b7a-5d6e7f809102";
const MDEV_2: &str = "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a";
const PCI_HANDLE: &str = "c0ffee00-1234-4abc-8def-0123456789ab";
const GPU_0: &str = "0000:3b:00.0";
const GPU_1: &str = "0000:3d:00.0";
const VF: &str = "0000:3d:00.4";

fn domain(name: &str, graphics: Graphics) -> VdiDomain {
    VdiDomain {
        name: name.to_owned(),
        uuid: None,
        memory_mib: 4096,
        vcpus: 4,
        disk: None,
        network: None,
        uefi: false,
        graphics,
        devices: Vec::new(),
    }
}

fn with_all(mut d: VdiDomain, disk: &str) -> VdiDomain {
    d.uuid = Some(DOMAIN_UUID.to_owned());
    d.uefi = true;
    d.disk = Some(disk.to_owned());
    d.network = Some("default".to_owned());
    d
}

fn mdev(uuid: &str, parent: &str, display: bool) -> DomainDevice {
    DomainDevice::Mdev {
        uuid: uuid.to_owned(),
        type_id: "nvidia-259".to_owned(),
        type_name: "GRID RTX6000-4Q".to_owned(),
        parent: parent.to_owned(),
        display,
    }
}

fn pci(uuid: &str, address: &str, managed: bool) -> DomainDevice {
    DomainDevice::Pci {
        uuid: uuid.to_owned(),
        address: address.to_owned(),
        managed,
        type_id: "nvidia-559".to_owned(),
        parent: GPU_1.to_owned(),
    }
}

fn builtin() -> TemplateStore {
    TemplateStore::new(None)
}

/// What one `<hostdev>` says, as read by the test itself (not by the code under test).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hostdev {
    kind: String,
    managed: Option<String>,
    display: Option<String>,
    ramfb: Option<String>,
    /// The mdev UUID or the host PCI address.
    source: String,
    /// The guest PCI address.
    guest: Option<String>,
}

/// What the test checks of a domain XML, read with quick-xml independently of vgpud.
#[derive(Debug, Default)]
struct Facts {
    /// Every `<address type='pci'>` outside a `<source>`, normalised.
    guest_addresses: Vec<String>,
    hostdevs: Vec<Hostdev>,
    /// `(uuid, kind, type, parent, address)` of each `<device>` in vgpud's namespace.
    metadata: Vec<[String; 5]>,
    graphics: Vec<String>,
    video_models: Vec<String>,
    root_ports: usize,
}

fn get(e: &BytesStart<'_>, name: &str) -> Option<String> {
    e.try_get_attribute(name)
        .unwrap()
        .map(|a| a.unescape_value().unwrap().into_owned())
}

fn number(text: &str) -> u32 {
    match text.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).unwrap(),
        None => text.parse().unwrap(),
    }
}

fn pci_of(e: &BytesStart<'_>) -> String {
    format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        number(&get(e, "domain").unwrap_or_else(|| "0".to_owned())),
        number(&get(e, "bus").unwrap()),
        number(&get(e, "slot").unwrap()),
        number(&get(e, "function").unwrap())
    )
}

fn facts(xml: &str) -> Facts {
    let mut reader = quick_xml::NsReader::from_str(xml);
    let mut facts = Facts::default();
    let mut path: Vec<String> = Vec::new();
    loop {
        let (e, empty) = match reader.read_event().unwrap() {
            Event::Start(e) => (e, false),
            Event::Empty(e) => (e, true),
            Event::End(_) => {
                path.pop();
                continue;
            }
            Event::Eof => break,
            _ => continue,
        };
        let name = String::from_utf8(e.name().as_ref().to_vec()).unwrap();
        let parent = path.last().map(String::as_str);
        let (ns, local) = reader.resolve_element(e.name());
        let in_vgpud_ns = matches!(ns, quick_xml::name::ResolveResult::Bound(n)
            if n.as_ref() == METADATA_NS.as_bytes());
        match (parent, name.as_str()) {
            (Some("source"), "address") => {
                if let Some(h) = facts.hostdevs.last_mut() {
                    if path.len() == 4 && path[2] == "hostdev" {
                        h.source = get(&e, "uuid").unwrap_or_else(|| pci_of(&e));
                    }
                }
            }
            (_, "address") if get(&e, "type").as_deref() == Some("pci") => {
                let address = pci_of(&e);
                if parent == Some("hostdev") {
                    facts.hostdevs.last_mut().unwrap().guest = Some(address.clone());
                }
                facts.guest_addresses.push(address);
            }
            (Some("devices"), "hostdev") => facts.hostdevs.push(Hostdev {
                kind: get(&e, "type").unwrap(),
                managed: get(&e, "managed"),
                display: get(&e, "display"),
                ramfb: get(&e, "ramfb"),
                source: String::new(),
                guest: None,
            }),
            (Some("devices"), "graphics") => facts.graphics.push(get(&e, "type").unwrap()),
            (Some("video"), "model") => facts.video_models.push(get(&e, "type").unwrap()),
            (Some("devices"), "controller")
                if get(&e, "model").as_deref() == Some("pcie-root-port") =>
            {
                facts.root_ports += 1
            }
            _ if in_vgpud_ns && local.as_ref() == b"device" => facts.metadata.push(
                ["uuid", "kind", "type", "parent", "address"]
                    .map(|a| get(&e, a).unwrap_or_default()),
            ),
            _ => {}
        }
        if !empty {
            path.push(name);
        }
    }
    facts
}

#[track_caller]
fn assert_unique_addresses(xml: &str, facts: &Facts) {
    let unique: BTreeSet<&String> = facts.guest_addresses.iter().collect();
    assert_eq!(
        unique.len(),
        facts.guest_addresses.len(),
        "guest PCI addresses collide: {:?}\n{xml}",
        facts.guest_addresses
    );
}

/// The hostdevs and metadata `d` must give, as the test reads them.
fn expected(d: &VdiDomain) -> (Vec<Hostdev>, Vec<[String; 5]>) {
    let mut hostdevs = Vec::new();
    let mut metadata = Vec::new();
    for device in &d.devices {
        match device {
            DomainDevice::Mdev {
                uuid,
                type_id,
                parent,
                display,
                ..
            } => {
                let on = display.then(|| "on".to_owned());
                hostdevs.push(Hostdev {
                    kind: "mdev".to_owned(),
                    managed: None,
                    display: on.clone(),
                    ramfb: on,
                    source: uuid.clone(),
                    guest: None,
                });
                metadata.push([
                    uuid.clone(),
                    "mdev".to_owned(),
                    type_id.clone(),
                    parent.clone(),
                    String::new(),
                ]);
            }
            DomainDevice::Pci {
                uuid,
                address,
                managed,
                type_id,
                parent,
            } => {
                hostdevs.push(Hostdev {
                    kind: "pci".to_owned(),
                    managed: Some(if *managed { "yes" } else { "no" }.to_owned()),
                    display: None,
                    ramfb: None,
                    source: address.clone(),
                    guest: None,
                });
                metadata.push([
                    uuid.clone(),
                    "pci".to_owned(),
                    type_id.clone(),
                    parent.clone(),
                    address.clone(),
                ]);
            }
        }
    }
    (hostdevs, metadata)
}

/// Checks a rendered domain every way: golden file, schema, test-driver define and read
/// back, unique guest addresses before and after, hostdevs and metadata surviving, and
/// `parse_domain` agreeing on both texts. Returns the read-back XML.
#[track_caller]
fn check(golden: &str, d: &VdiDomain, xml: &str) -> String {
    assert_golden(format!("xml/{golden}.xml"), xml);
    assert_valid_domain(xml);

    let (want_hostdevs, want_metadata) = expected(d);
    let rendered = facts(xml);
    assert_unique_addresses(xml, &rendered);
    let strip = |h: &[Hostdev]| {
        h.iter()
            .map(|h| Hostdev {
                guest: None,
                ..h.clone()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&rendered.hostdevs), want_hostdevs, "{xml}");
    assert!(
        rendered.hostdevs.iter().all(|h| h.guest.is_some()),
        "a hostdev has no guest address: {xml}"
    );
    assert_eq!(rendered.metadata, want_metadata, "{xml}");

    let read_back = assert_defines(xml);
    let back = facts(&read_back);
    assert_unique_addresses(&read_back, &back);
    // libvirt keeps every guest address vgpud chose, hostdevs and metadata as rendered.
    for address in &rendered.guest_addresses {
        assert!(
            back.guest_addresses.contains(address),
            "libvirt dropped guest address {address}:\n{read_back}"
        );
    }
    // libvirt adds managed='no' to mdev hostdevs, where it means nothing.
    let unmanaged = |h: &[Hostdev]| {
        h.iter()
            .map(|h| Hostdev {
                managed: if h.kind == "mdev" {
                    None
                } else {
                    h.managed.clone()
                },
                ..h.clone()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(unmanaged(&back.hostdevs), rendered.hostdevs, "{read_back}");
    assert_eq!(back.metadata, rendered.metadata, "{read_back}");
    assert_eq!(back.graphics, rendered.graphics, "{read_back}");

    // The hook's reader agrees with the test on both texts.
    let summary = parse_domain(xml).unwrap();
    assert_eq!(summary, parse_domain(&read_back).unwrap());
    assert_eq!(summary.name, d.name);
    let mdevs: Vec<String> = want_hostdevs
        .iter()
        .filter(|h| h.kind == "mdev")
        .map(|h| h.source.clone())
        .collect();
    let pcis: Vec<String> = want_hostdevs
        .iter()
        .filter(|h| h.kind == "pci")
        .map(|h| h.source.clone())
        .collect();
    assert_eq!(summary.mdev_hostdevs, mdevs);
    assert_eq!(summary.pci_hostdevs, pcis);
    let devices: Vec<[String; 5]> = summary
        .devices
        .iter()
        .map(|m| {
            [
                m.uuid.clone(),
                m.kind.clone(),
                m.type_id.clone(),
                m.parent.clone(),
                m.address.clone().unwrap_or_default(),
            ]
        })
        .collect();
    assert_eq!(devices, want_metadata);
    read_back
}

#[test]
fn vnc_bare() {
    let d = domain("vdi-vnc-bare", Graphics::Vnc);
    let xml = render_domain(&builtin(), "vdi", &d).unwrap();
    check("domain-vdi-vnc-bare", &d, &xml);
    let f = facts(&xml);
    assert_eq!(f.graphics, ["vnc"]);
    assert_eq!(f.video_models, ["virtio"]);
    assert!(!xml.contains("firmware") && !xml.contains("<disk") && !xml.contains("<interface"));
}

#[test]
fn spice_uefi_disk_network() {
    let d = with_all(
        domain("vdi-spice-full", Graphics::Spice),
        "/var/lib/libvirt/images/win11.qcow2",
    );
    let xml = render_domain(&builtin(), "vdi", &d).unwrap();
    let read_back = check("domain-vdi-spice-uefi-disk-network", &d, &xml);
    let f = facts(&xml);
    assert_eq!(f.graphics, ["spice"]);
    assert_eq!(f.video_models, ["virtio"]);
    // usb, disk, nic, video: one root port each.
    assert_eq!(f.root_ports, 4);
    assert!(xml.contains("<os firmware=\"efi\">"), "{xml}");
    assert!(
        xml.contains("<driver name=\"qemu\" type=\"qcow2\"/>"),
        "{xml}"
    );
    assert!(xml.contains("<source network=\"default\"/>"), "{xml}");
    assert!(read_back.contains("firmware='efi'"), "{read_back}");
    assert!(read_back.contains(DOMAIN_UUID), "{read_back}");
}

#[test]
fn vnc_uefi_raw_disk_one_vgpu_driving_the_display() {
    let mut d = with_all(
        domain("vdi-one-vgpu", Graphics::Vnc),
        "/srv/images/desktop.img",
    );
    d.devices = vec![mdev(MDEV_1, GPU_0, true)];
    let xml = render_domain(&builtin(), "vdi", &d).unwrap();
    check("domain-vdi-vnc-one-vgpu-display", &d, &xml);
    let f = facts(&xml);
    assert_eq!(f.video_models, ["none"]);
    // usb, disk, nic, the vGPU; no PCI video.
    assert_eq!(f.root_ports, 4);
    assert!(
        xml.contains("<driver name=\"qemu\" type=\"raw\"/>"),
        "{xml}"
    );
}

#[test]
fn spice_two_vgpus_first_drives_the_display() {
    let mut d = domain("vdi-two-vgpus", Graphics::Spice);
    d.devices = vec![mdev(MDEV_1, GPU_0, true), mdev(MDEV_2, GPU_1, false)];
    let xml = render_domain(&builtin(), "vdi", &d).unwrap();
    check("domain-vdi-spice-two-vgpus", &d, &xml);
    let f = facts(&xml);
    assert_eq!(f.video_models, ["none"]);
    assert_eq!(f.hostdevs[0].display.as_deref(), Some("on"));
    assert_eq!(f.hostdevs[1].display, None);
}

#[test]
fn two_vgpus_none_driving_the_display() {
    let mut d = domain("vdi-two-headless", Graphics::Vnc);
    d.devices = vec![mdev(MDEV_1, GPU_0, false), mdev(MDEV_2, GPU_1, false)];
    let xml = render_domain(&builtin(), "vdi", &d).unwrap();
    check("domain-vdi-vnc-two-vgpus-headless", &d, &xml);
    assert_eq!(facts(&xml).video_models, ["virtio"]);
}

#[test]
fn mdev_and_pci_hostdev() {
    let mut d = with_all(
        domain("vdi-mdev-pci", Graphics::Vnc),
        "/srv/images/cad.qcow2",
    );
    d.devices = vec![mdev(MDEV_1, GPU_0, false), pci(PCI_HANDLE, VF, false)];
    let xml = render_domain(&builtin(), "vdi", &d).unwrap();
    check("domain-vdi-mdev-pci", &d, &xml);
    assert!(xml.contains("managed=\"no\""), "{xml}");
    assert!(xml.contains(&format!("address=\"{VF}\"")), "{xml}");
}

#[test]
fn many_devices_share_slots_of_root_ports_without_collisions() {
    let mut d = domain("vdi-many", Graphics::Vnc);
    d.devices = (0..12)
        .map(|i| {
            let uuid = format!("00000000-0000-4000-8000-{i:012x}");
            let address = format!("0000:{:02x}:00.{}", 0x40 + i / 8, i % 8);
            pci(&uuid, &address, true)
        })
        .collect();
    let xml = render_domain(&builtin(), "vdi", &d).unwrap();
    check("domain-vdi-many-pci", &d, &xml);
    let f = facts(&xml);
    // usb, video, 12 hostdevs.
    assert_eq!(f.root_ports, 14);
    assert!(xml.contains("multifunction=\"on\""), "{xml}");
}

#[test]
fn minimal_template_through_the_store() {
    let mut d = domain("minimal-store", Graphics::Vnc);
    d.devices = vec![mdev(MDEV_1, GPU_0, true), pci(PCI_HANDLE, VF, true)];
    let xml = render_domain(&builtin(), "minimal", &d).unwrap();
    check("domain-minimal-store-mdev-pci", &d, &xml);
    assert_eq!(facts(&xml).video_models, ["none"]);
}

const USER_VDI: &str = r#"<!-- an operator's own VDI template: Windows guests, localtime clock -->
<domain xmlns:vgpud="urn:vgpud:template:1" type="kvm">
  <name>{name}</name>
  <uuid vgpud:if="uuid">{uuid}</uuid>
  <description>rendered by vgpud from /etc/vgpud/templates/vdi.xml</description>
  <metadata>
    <site:info xmlns:site="http://example.com/site/1" pool="cad"/>
    <vgpud:insert name="metadata"/>
  </metadata>
  <memory unit="MiB">{memory_mib}</memory>
  <vcpu>{vcpus}</vcpu>
  <os firmware="{firmware?}">
    <type arch="x86_64" machine="q35">hvm</type>
  </os>
  <features>
    <acpi/>
    <apic/>
    <hyperv mode="passthrough"/>
  </features>
  <clock offset="localtime"/>
  <devices>
    <vgpud:insert name="root_ports"/>
    <controller type="usb" model="qemu-xhci">
      <address type="pci" domain="0x0000" bus="{usb_bus}" slot="0x00" function="0x0"/>
    </controller>
    <disk vgpud:if="disk_path" type="file" device="disk">
      <driver name="qemu" type="{disk_format}"/>
      <source file="{disk_path}"/>
      <target dev="vda" bus="virtio"/>
      <address type="pci" domain="0x0000" bus="{disk_bus}" slot="0x00" function="0x0"/>
    </disk>
    <graphics type="{graphics}" autoport="yes">
      <listen type="address" address="127.0.0.1"/>
    </graphics>
    <video>
      <model type="{video_model}"/>
      <address vgpud:if="video_bus" type="pci" domain="0x0000" bus="{video_bus}" slot="0x00" function="0x0"/>
    </video>
    <vgpud:insert name="hostdevs"/>
  </devices>
</domain>
"#;

/// A store whose user directory is `<tmp>/templates`, holding `files`.
fn user_store(files: &[(&str, &str)]) -> (std::path::PathBuf, tempfile::TempDir, TemplateStore) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("templates");
    fs::create_dir(&dir).unwrap();
    for (name, text) in files {
        fs::write(dir.join(name), text).unwrap();
    }
    let store = TemplateStore::new(Some(dir.clone()));
    (dir, tmp, store)
}

#[test]
fn user_template_overrides_vdi() {
    let (_dir, _tmp, store) = user_store(&[("vdi.xml", USER_VDI)]);
    let mut d = with_all(domain("user-vdi", Graphics::Vnc), "/srv/images/w.qcow2");
    d.devices = vec![mdev(MDEV_1, GPU_0, true), mdev(MDEV_2, GPU_1, false)];
    let xml = render_domain(&store, "vdi", &d).unwrap();
    let read_back = check("domain-user-vdi", &d, &xml);
    assert!(xml.contains("<clock offset=\"localtime\"/>"), "{xml}");
    // The other metadata survives next to vgpud's, in libvirt too.
    assert!(
        read_back.contains("http://example.com/site/1"),
        "{read_back}"
    );
    // Without the user directory the built-in is used again.
    let builtin_xml = render_domain(&builtin(), "vdi", &d).unwrap();
    assert!(!builtin_xml.contains("localtime"), "{builtin_xml}");
}

#[test]
fn store_lists_builtin_and_user_templates() {
    let (dir, _tmp, store) = user_store(&[
        ("vdi.xml", USER_VDI),
        ("cad-ws.xml", USER_VDI),
        ("bad name.xml", USER_VDI),
        ("notes.txt", "not a template"),
        (".hidden.xml", USER_VDI),
    ]);
    fs::create_dir(dir.join("dir.xml")).unwrap();
    assert_eq!(store.names().unwrap(), ["cad-ws", "minimal", "vdi"]);
    assert_eq!(builtin().names().unwrap(), ["minimal", "vdi"]);
    // A user directory that does not exist holds no templates.
    let missing = TemplateStore::new(Some(dir.join("nope")));
    assert_eq!(missing.names().unwrap(), ["minimal", "vdi"]);
    assert!(missing.get("vdi").is_ok());
    let d = domain("user-new-name", Graphics::Vnc);
    let xml = render_domain(&store, "cad-ws", &d).unwrap();
    assert_valid_domain(&xml);
    assert_defines(&xml);
}

#[test]
fn unknown_and_malformed_template_names() {
    let (dir, _tmp, store) = user_store(&[("vdi.xml", USER_VDI)]);
    // A template next to the user directory: "../x" must not reach it.
    fs::write(dir.parent().unwrap().join("x.xml"), USER_VDI).unwrap();
    let d = domain("names", Graphics::Vnc);
    for bad in [
        "../x",
        "..",
        "a/b",
        "/etc/passwd",
        "",
        "x.xml",
        "vdi ",
        "é",
        &"a".repeat(65),
    ] {
        let err = render_domain(&store, bad, &d).unwrap_err();
        assert!(
            matches!(&err, XmlError::InvalidTemplateName { name } if name == bad),
            "{bad:?}: {err}"
        );
    }
    assert!(render_domain(&store, &"a".repeat(64), &d).is_err());
    let err = render_domain(&store, "nope", &d).unwrap_err();
    assert!(
        matches!(&err, XmlError::UnknownTemplate { name, .. } if name == "nope"),
        "{err}"
    );
    assert!(err.to_string().contains("minimal, vdi"), "{err}");
}

#[test]
fn user_template_errors_name_the_file() {
    let unknown_var = USER_VDI.replace("{vcpus}", "{cpus}");
    let unknown_list = USER_VDI.replace("name=\"root_ports\"", "name=\"ports\"");
    let malformed = USER_VDI.replace("</devices>", "");
    let cases: [(&str, &str, &str); 3] = [
        ("vars", &unknown_var, "cpus"),
        ("lists", &unknown_list, "ports"),
        ("broken", &malformed, "broken.xml"),
    ];
    let files: Vec<(String, &str)> = cases
        .iter()
        .map(|(name, text, _)| (format!("{name}.xml"), *text))
        .collect();
    let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    let (dir, _tmp, store) = user_store(&files);
    let d = domain("errors", Graphics::Vnc);
    for (name, _, what) in cases {
        let file = dir.join(format!("{name}.xml"));
        let err = render_domain(&store, name, &d).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(&file.display().to_string()) && msg.contains(what),
            "{name}: {msg}"
        );
        // Checked when fetched, before any render.
        assert!(store.get(name).is_err());
    }
    let err = render_domain(&store, "vars", &d).unwrap_err();
    assert!(
        matches!(&err, XmlError::UnsupportedName { kind: "variable", name, .. } if name == "cpus"),
        "{err}"
    );
    let err = render_domain(&store, "lists", &d).unwrap_err();
    assert!(
        matches!(&err, XmlError::UnsupportedName { kind: "fragment list", name, .. } if name == "ports"),
        "{err}"
    );
}

#[test]
fn user_templates_that_break_the_contract_are_refused() {
    let no_hostdevs = USER_VDI.replace("<vgpud:insert name=\"hostdevs\"/>", "");
    let no_metadata = USER_VDI.replace("<vgpud:insert name=\"metadata\"/>", "");
    let no_graphics = USER_VDI.replace("<graphics type=\"{graphics}\" autoport=\"yes\">\n      <listen type=\"address\" address=\"127.0.0.1\"/>\n    </graphics>", "");
    let colliding = USER_VDI.replace(
        "<vgpud:insert name=\"hostdevs\"/>",
        "<vgpud:insert name=\"hostdevs\"/>\n<sound model=\"ich9\"><address type=\"pci\" domain=\"0x0000\" bus=\"{usb_bus}\" slot=\"0x00\" function=\"0x0\"/></sound>",
    );
    let hostdevs_twice = USER_VDI.replace(
        "<vgpud:insert name=\"hostdevs\"/>",
        "<vgpud:insert name=\"hostdevs\"/><vgpud:insert name=\"hostdevs\"/>",
    );
    let not_a_domain = "<network><name>{name}</name></network>";
    assert_ne!(no_graphics, USER_VDI);
    // A hostdev of the template's own is fine next to vgpud's.
    let extra_hostdev = USER_VDI.replace(
        "<vgpud:insert name=\"hostdevs\"/>",
        "<vgpud:insert name=\"hostdevs\"/>\n<hostdev mode=\"subsystem\" type=\"pci\" managed=\"yes\">\
         <source><address domain=\"0x0000\" bus=\"0x41\" slot=\"0x00\" function=\"0x1\"/></source></hostdev>",
    );
    let (_dir, _tmp, store) = user_store(&[
        ("no-hostdevs.xml", &no_hostdevs),
        ("no-metadata.xml", &no_metadata),
        ("no-graphics.xml", &no_graphics),
        ("colliding.xml", &colliding),
        ("hostdevs-twice.xml", &hostdevs_twice),
        ("not-a-domain.xml", not_a_domain),
        ("extra-hostdev.xml", &extra_hostdev),
    ]);
    let mut d = domain("contract", Graphics::Vnc);
    d.devices = vec![mdev(MDEV_1, GPU_0, true)];
    for (name, what) in [
        ("no-hostdevs", "hostdevs"),
        ("no-metadata", "metadata"),
        ("no-graphics", "graphics"),
        ("colliding", "used more than once"),
        ("hostdevs-twice", "2 times"),
        ("not-a-domain", "not <domain>"),
    ] {
        let err = render_domain(&store, name, &d).unwrap_err();
        assert!(
            matches!(&err, XmlError::Template { template, .. } if template.ends_with(&format!("{name}.xml"))),
            "{name}: {err}"
        );
        assert!(err.to_string().contains(what), "{name}: {err}");
    }
    let xml = render_domain(&store, "extra-hostdev", &d).unwrap();
    assert_valid_domain(&xml);
    let summary = parse_domain(&assert_defines(&xml)).unwrap();
    assert_eq!(summary.pci_hostdevs, ["0000:41:00.1"]);
    assert_eq!(summary.mdev_hostdevs, [MDEV_1]);
}

#[track_caller]
fn refused(d: &VdiDomain) -> XmlError {
    render_domain(&builtin(), "vdi", d).unwrap_err()
}

#[test]
fn bad_domain_fields() {
    for name in ["", "a\nb", "tab\there", "a/b", "nul\0"] {
        let err = refused(&domain(name, Graphics::Vnc));
        assert!(
            matches!(err, XmlError::InvalidInput { field: "name", .. }),
            "{name:?}: {err}"
        );
    }
    let field_of = |d: VdiDomain| match refused(&d) {
        XmlError::InvalidInput { field, .. } => field,
        other => panic!("{other}"),
    };
    let base = || domain("fields", Graphics::Vnc);
    assert_eq!(
        field_of(VdiDomain {
            memory_mib: 0,
            ..base()
        }),
        "memory_mib"
    );
    assert_eq!(field_of(VdiDomain { vcpus: 0, ..base() }), "vcpus");
    assert_eq!(
        field_of(VdiDomain {
            uuid: Some("not-a-uuid".to_owned()),
            ..base()
        }),
        "uuid"
    );
    for disk in ["disk.qcow2", "images/disk.qcow2", "", "/a\nb.img"] {
        assert_eq!(
            field_of(VdiDomain {
                disk: Some(disk.to_owned()),
                ..base()
            }),
            "disk",
            "{disk:?}"
        );
    }
    for network in ["", "a/b", "x\u{7f}"] {
        assert_eq!(
            field_of(VdiDomain {
                network: Some(network.to_owned()),
                ..base()
            }),
            "network"
        );
    }
    assert_eq!(
        field_of(VdiDomain {
            devices: (0..65).map(|_| mdev(MDEV_1, GPU_0, false)).collect(),
            ..base()
        }),
        "devices"
    );
}

#[track_caller]
fn device_error(devices: Vec<DomainDevice>) -> (usize, String) {
    let mut d = domain("devices", Graphics::Vnc);
    d.devices = devices;
    match refused(&d) {
        XmlError::InvalidDevice { index, message } => (index, message),
        other => panic!("{other}"),
    }
}

#[test]
fn bad_and_colliding_devices() {
    let (index, message) = device_error(vec![mdev(MDEV_1, GPU_0, true), mdev(MDEV_2, GPU_1, true)]);
    assert_eq!(index, 1);
    assert!(message.contains("display"), "{message}");

    let (index, message) = device_error(vec![
        mdev(MDEV_1, GPU_0, false),
        mdev(&MDEV_1.to_uppercase(), GPU_1, false),
    ]);
    assert_eq!(index, 1);
    assert!(message.contains(MDEV_1), "{message}");

    let (index, _) = device_error(vec![mdev(MDEV_1, GPU_0, false), pci(MDEV_1, VF, false)]);
    assert_eq!(index, 1);

    let (index, message) = device_error(vec![
        pci(PCI_HANDLE, VF, false),
        pci(MDEV_2, &VF.to_uppercase(), true),
    ]);
    assert_eq!(index, 1);
    assert!(message.contains(VF), "{message}");

    for bad in [
        mdev("3b2c8a4e1f0d4c1e9b7a5d6e7f809102", GPU_0, false),
        mdev(MDEV_1, "../x", false),
        mdev(MDEV_1, "", false),
        mdev(MDEV_1, "a b", false),
        DomainDevice::Mdev {
            uuid: MDEV_1.to_owned(),
            type_id: "nvidia/259".to_owned(),
            type_name: String::new(),
            parent: GPU_0.to_owned(),
            display: false,
        },
        DomainDevice::Mdev {
            uuid: MDEV_1.to_owned(),
            type_id: "nvidia-259".to_owned(),
            type_name: "bad\u{1}name".to_owned(),
            parent: GPU_0.to_owned(),
            display: false,
        },
        pci(PCI_HANDLE, "3d:00.4", false),
        pci("nope", VF, false),
    ] {
        let (index, _) = device_error(vec![bad.clone()]);
        assert_eq!(index, 0, "{bad:?}");
    }
}

#[test]
fn hostile_values_are_escaped_and_survive_libvirt() {
    let mut d = domain("<evil>&'\" vdi", Graphics::Vnc);
    d.disk = Some("/srv/images/it's <mine> & \"yours\".qcow2".to_owned());
    d.network = Some("net<&>'\"".to_owned());
    d.devices = vec![DomainDevice::Mdev {
        uuid: MDEV_1.to_owned(),
        type_id: "nvidia-259".to_owned(),
        type_name: "GRID <RTX> & \"co\"".to_owned(),
        parent: "par<&>'\"ent".to_owned(),
        display: true,
    }];
    let xml = render_domain(&builtin(), "vdi", &d).unwrap();
    assert_valid_domain(&xml);
    let read_back = assert_defines(&xml);
    for text in [&xml, &read_back] {
        let summary = parse_domain(text).unwrap();
        assert_eq!(summary.name, d.name);
        assert_eq!(summary.devices[0].parent, "par<&>'\"ent");
    }
}

/// libvirt's own spelling: single quotes, attributes reordered, extra elements, an alias
/// and guest address in the hostdev, our metadata under another prefix next to others.
const LIBVIRT_STYLE: &str = r#"<domain type='kvm' id='7' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>win&amp;11</name>
  <uuid>6f1a9c2e-8b3d-4e5f-a061-7c8d9e0f1a2b</uuid>
  <metadata>
    <libosinfo:libosinfo xmlns:libosinfo="http://libosinfo.org/xmlns/libvirt/domain/1.0">
      <libosinfo:os id="http://microsoft.com/win/11"/>
    </libosinfo:libosinfo>
    <v:devices xmlns:v="http://vgpud.org/xmlns/domain/1">
      <v:device parent='0000:3b:00.0' type='nvidia-259' kind='mdev' uuid='3B2C8A4E-1F0D-4C1E-9B7A-5D6E7F809102' name='GRID RTX6000-4Q' future='ignored'><v:extra/></v:device>
      <v:device uuid="c0ffee00-1234-4abc-8def-0123456789ab" kind="pci" type="nvidia-559" parent="0000:3d:00.0" address="0000:3D:00.4"/>
    </v:devices>
    <other:devices xmlns:other="http://example.com/not-vgpud">
      <other:device uuid="not checked" kind="whatever"/>
    </other:devices>
    <device uuid="no namespace either"/>
  </metadata>
  <memory unit='KiB'>4194304</memory>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci' display='on' ramfb='on'>
      <source>
        <address uuid='3b2c8a4e-1f0d-4c1e-9b7a-5d6e7f809102'/>
      </source>
      <alias name='hostdev0'/>
      <address type='pci' domain='0x0000' bus='0x05' slot='0x00' function='0x0'/>
    </hostdev>
    <hostdev mode='subsystem' type='pci' managed='no'>
      <driver name='vfio'/>
      <source writeFiltering='no'>
        <address domain='0x0000' bus='0x3D' slot='0x00' function='0x4'/>
      </source>
      <alias name='hostdev1'/>
      <address type='pci' domain='0x0000' bus='0x06' slot='0x00' function='0x0'/>
    </hostdev>
    <hostdev mode='subsystem' type='usb' managed='yes'>
      <source><vendor id='0x1234'/><product id='0xbeef'/></source>
    </hostdev>
    <interface type='hostdev'>
      <source><address type='pci' domain='0x0000' bus='0x41' slot='0x10' function='0x1'/></source>
    </interface>
  </devices>
  <qemu:commandline><qemu:arg value='-display'/></qemu:commandline>
</domain>
"#;

#[test]
fn parse_libvirt_style_xml() {
    let s = parse_domain(LIBVIRT_STYLE).unwrap();
    assert_eq!(
        s,
        DomainSummary {
            name: "win&11".to_owned(),
            mdev_hostdevs: vec![MDEV_1.to_owned()],
            pci_hostdevs: vec![VF.to_owned()],
            devices: vec![
                MetadataDevice {
                    uuid: MDEV_1.to_owned(),
                    kind: "mdev".to_owned(),
                    type_id: "nvidia-259".to_owned(),
                    parent: GPU_0.to_owned(),
                    address: None,
                },
                MetadataDevice {
                    uuid: PCI_HANDLE.to_owned(),
                    kind: "pci".to_owned(),
                    type_id: "nvidia-559".to_owned(),
                    parent: GPU_1.to_owned(),
                    address: Some(VF.to_owned()),
                },
            ],
        }
    );
    // A domain libvirt wrote without any vgpud metadata.
    let plain = "<domain type=\"kvm\"><name>plain</name><devices/></domain>";
    assert_eq!(
        parse_domain(plain).unwrap(),
        DomainSummary {
            name: "plain".to_owned(),
            ..DomainSummary::default()
        }
    );
}

#[track_caller]
fn parse_refused(xml: &str) -> String {
    match parse_domain(xml) {
        Err(XmlError::Parse { message }) => message,
        Err(other) => panic!("not a parse error: {other}"),
        Ok(s) => panic!("accepted {s:?}:\n{xml}"),
    }
}

#[test]
fn parse_refuses_bad_and_hostile_input() {
    for (xml, what) in [
        ("", "no <domain>"),
        ("<network><name>x</name></network>", "not <domain>"),
        ("<domain><name>x</name></domain><domain/>", "more than one root"),
        ("<domain><devices>", ""),
        ("<domain><name>x</name></devices></domain>", ""),
        ("<domain><name>x</name><devices></domain>", ""),
        ("<domain/>", "no <name>"),
        ("<domain><name> </name></domain>", "empty"),
        ("<domain><name>a</name><name>b</name></domain>", "more than one <name>"),
        (
            "<!DOCTYPE d [<!ENTITY a 'aaaa'>]><domain><name>&a;</name></domain>",
            "DOCTYPE",
        ),
        ("<domain><name>&xx;</name></domain>", "entity"),
        ("<d:domain xmlns:d='urn:x'><name>x</name></d:domain>", "not <domain>"),
        (
            "<domain><name>x</name><devices><hostdev type='mdev'><source><address uuid='../../x'/></source></hostdev></devices></domain>",
            "uuid",
        ),
        (
            "<domain><name>x</name><devices><hostdev type='mdev'><source><address/></source></hostdev></devices></domain>",
            "uuid",
        ),
        (
            "<domain><name>x</name><devices><hostdev type='pci'><source><address domain='0x0' bus='0x100' slot='0' function='0'/></source></hostdev></devices></domain>",
            "bus",
        ),
        (
            "<domain><name>x</name><devices><hostdev type='pci'><source><address bus='1' bus='2' slot='0' function='0'/></source></hostdev></devices></domain>",
            "",
        ),
        (
            "<domain><name>x</name><devices><hostdev type='pci'><address type='pci' bus='-1' slot='0' function='0'/></hostdev></devices></domain>",
            "bus",
        ),
    ] {
        let message = parse_refused(xml);
        assert!(message.contains(what), "{xml}: {message}");
    }
    let meta = |attrs: &str| {
        format!(
            "<domain><name>x</name><metadata><v:devices xmlns:v='{METADATA_NS}'><v:device {attrs}/></v:devices></metadata></domain>"
        )
    };
    for attrs in [
        format!("uuid='{MDEV_1}' kind='mdev' type='nvidia-259'"),
        format!("uuid='{MDEV_1}' kind='mig' type='nvidia-259' parent='{GPU_0}'"),
        format!("uuid='{MDEV_1}' kind='mdev' type='../../x' parent='{GPU_0}'"),
        format!("uuid='{MDEV_1}' kind='mdev' type='nvidia-259' parent='..'"),
        format!("uuid='{MDEV_1}' kind='mdev' type='nvidia-259' parent='a/b'"),
        format!("uuid='x' kind='mdev' type='nvidia-259' parent='{GPU_0}'"),
        format!("uuid='{MDEV_1}' kind='pci' type='t' parent='{GPU_0}' address='0000:3d:00.8'"),
    ] {
        let message = parse_refused(&meta(&attrs));
        assert!(message.contains("metadata"), "{attrs}: {message}");
    }

    // Deep nesting is refused, not recursed into.
    let deep = format!(
        "<domain><name>x</name>{}{}</domain>",
        "<a>".repeat(100_000),
        "</a>".repeat(100_000)
    );
    assert!(parse_refused(&deep).contains("deeper"));
    // An element with very many attributes is refused without a quadratic duplicate check.
    let attributes: String = (0..200_000).map(|i| format!(" a{i}=''")).collect();
    let wide = format!(
        "<domain><name>x</name><devices><hostdev type='pci'>\
         <address type='pci'{attributes}/></hostdev></devices></domain>"
    );
    let started = std::time::Instant::now();
    assert!(parse_refused(&wide).contains("attributes"));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // Elements the reader skips may be wide, and namespace declarations many.
    let declarations: String = (0..200_000)
        .map(|i| format!(" xmlns:p{i}='urn:{i}'"))
        .collect();
    let skipped =
        format!("<domain><name>x</name><description{attributes}/><p0:x{declarations}/></domain>");
    let started = std::time::Instant::now();
    // Read, not refused: the skipped elements do not hide the domain's name.
    let summary = parse_domain(&skipped).expect("wide skipped elements are read");
    assert_eq!(summary.name, "x");
    assert!(summary.mdev_hostdevs.is_empty() && summary.pci_hostdevs.is_empty());
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // Huge input is refused before reading.
    let huge = format!(
        "<domain><name>x</name><description>{}</description></domain>",
        "x".repeat(MAX_DOMAIN_XML)
    );
    assert!(parse_refused(&huge).contains("bytes"));
    // A billion-laughs style document never expands.
    let laughs = "<?xml version='1.0'?><!DOCTYPE lolz [<!ENTITY lol 'lol'><!ENTITY lol2 '&lol;&lol;&lol;'>]><domain><name>&lol2;</name></domain>";
    assert!(parse_refused(laughs).contains("DOCTYPE"));
}

/// Every prefix of a real domain, and the domain with bytes replaced, gives an answer,
/// never a panic: the whole domain parses, and every prefix cut before its end tag is
/// refused.
#[test]
fn parse_never_panics_on_damaged_input() {
    let mut d = with_all(domain("damaged", Graphics::Vnc), "/srv/d.qcow2");
    d.devices = vec![mdev(MDEV_1, GPU_0, true), pci(PCI_HANDLE, VF, false)];
    let xml = render_domain(&builtin(), "vdi", &d).unwrap();
    assert!(parse_domain(&xml).is_ok(), "the whole domain parses");
    let end_tag = xml.rfind("</domain>").expect("the end tag");
    for end in (0..xml.len()).filter(|i| xml.is_char_boundary(*i)) {
        let parsed = parse_domain(&xml[..end]);
        if end <= end_tag {
            assert!(parsed.is_err(), "a domain cut at byte {end} is refused");
        }
    }
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let replacements = [
        '<', '>', '/', '\'', '"', '&', '=', ' ', 'x', ':', '\u{0}', 'é',
    ];
    for _ in 0..3000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut chars: Vec<char> = xml.chars().collect();
        let at = (seed % chars.len() as u64) as usize;
        chars[at] = replacements[(seed >> 32) as usize % replacements.len()];
        let damaged: String = chars.into_iter().collect();
        let _ = parse_domain(&damaged);
    }
}

/// libvirt's own parser refuses what the renderer must never produce, proving the define
/// check can fail.
#[test]
fn test_driver_refuses_a_broken_domain() {
    let d = domain("broken-define", Graphics::Vnc);
    let xml = render_domain(&builtin(), "vdi", &d).unwrap();
    let broken = xml.replace("<memory unit=\"MiB\">4096</memory>", "");
    let err = define_and_read_back(&broken).unwrap_err();
    assert!(!err.is_empty());
}
