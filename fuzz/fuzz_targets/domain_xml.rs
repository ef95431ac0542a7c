//! A libvirt domain XML as the libvirt hook gets it on stdin (`vgpud libvirt-hook`), and
//! [`parse_domain`] behind it: bytes that are not UTF-8 or do not parse are the hook's `Xml`
//! error, never a panic; what parses is canonical (lowercase UUIDs and addresses, names safe
//! as sysfs names); vgpud's metadata devices rendered into a VDI domain with the built-in
//! template read back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vgpud::hook::{self, HookError};
use vgpud::model::normalize_uuid;
use vgpud::xml::{
    parse_domain, render_domain, DomainDevice, Graphics, MetadataDevice, TemplateStore, VdiDomain,
    XmlError,
};

/// The hook, as libvirt runs it, for an operation it acts on; only for input that asks it
/// nothing of vgpud (no mdev hostdevs), since it would call vgpud on the system bus.
fn hook_says(op: &str, sub: &str, data: &[u8]) -> Result<(), HookError> {
    let args: Vec<String> = ["fuzz-domain", op, sub, "-"].map(String::from).into();
    hook::run(&args, data)
}

fn canonical_address(a: &str) -> bool {
    a.len() >= 12
        && a.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b) || b == b':' || b == b'.')
}

fn safe_name(s: &str) -> bool {
    !s.is_empty() && !s.contains('/') && !s.chars().any(char::is_control)
}

fuzz_target!(|data: &[u8]| vgpud_fuzz::bytes(data, |data| {
    let Ok(text) = std::str::from_utf8(data) else {
        assert!(matches!(
            hook_says("prepare", "begin", data),
            Err(HookError::Xml { .. })
        ));
        return;
    };
    // An operation the hook ignores never fails on text, whatever it is.
    assert!(hook_says("started", "begin", data).is_ok());
    let summary = match parse_domain(text) {
        Ok(summary) => summary,
        Err(XmlError::Parse { message }) => {
            assert!(!message.is_empty());
            assert!(matches!(
                hook_says("prepare", "begin", data),
                Err(HookError::Xml { .. })
            ));
            return;
        }
        Err(e) => panic!("parse_domain gives {e:?}, not Parse"),
    };
    if summary.mdev_hostdevs.is_empty() {
        assert!(hook_says("prepare", "begin", data).is_ok());
        assert!(hook_says("release", "end", data).is_ok());
    }
    assert!(!summary.name.is_empty() && summary.name.trim() == summary.name);
    for u in summary
        .mdev_hostdevs
        .iter()
        .chain(summary.devices.iter().map(|d| &d.uuid))
    {
        assert_eq!(normalize_uuid(u).as_deref(), Some(u.as_str()));
        assert_eq!(u.to_ascii_lowercase(), *u);
    }
    for a in summary
        .pci_hostdevs
        .iter()
        .chain(summary.devices.iter().filter_map(|d| d.address.as_ref()))
    {
        assert!(canonical_address(a), "{a:?}");
    }
    for d in &summary.devices {
        assert!(d.kind == "mdev" || d.kind == "pci", "{d:?}");
        assert!(safe_name(&d.type_id) && safe_name(&d.parent), "{d:?}");
    }

    // Render vgpud's metadata devices into a domain and read it back.
    let mut devices = Vec::new();
    let mut expected = Vec::new();
    for d in summary.devices.iter().take(vgpud::xml::MAX_DEVICES) {
        match (d.kind.as_str(), &d.address) {
            ("mdev", _) => {
                devices.push(DomainDevice::Mdev {
                    uuid: d.uuid.clone(),
                    type_id: d.type_id.clone(),
                    type_name: String::new(),
                    parent: d.parent.clone(),
                    display: false,
                });
                expected.push(MetadataDevice {
                    address: None,
                    ..d.clone()
                });
            }
            ("pci", Some(address)) => {
                devices.push(DomainDevice::Pci {
                    uuid: d.uuid.clone(),
                    address: address.clone(),
                    managed: false,
                    type_id: d.type_id.clone(),
                    parent: d.parent.clone(),
                });
                expected.push(d.clone());
            }
            _ => {}
        }
    }
    let mut domain = VdiDomain {
        name: summary.name.clone(),
        uuid: None,
        memory_mib: 4096,
        vcpus: 2,
        disk: None,
        network: None,
        uefi: false,
        graphics: Graphics::Vnc,
        devices,
    };
    let store = TemplateStore::new(None);
    let mut rendered = render_domain(&store, "vdi", &domain);
    if matches!(&rendered, Err(XmlError::InvalidInput { field: "name", .. })) {
        domain.name = "fuzz-domain".into();
        rendered = render_domain(&store, "vdi", &domain);
    }
    let xml = match rendered {
        Ok(xml) => xml,
        // Two metadata devices of one UUID or address, and the like.
        Err(XmlError::InvalidDevice { .. } | XmlError::InvalidInput { .. }) => return,
        Err(e) => panic!("the built-in template fails on {domain:?}: {e}"),
    };
    let back = parse_domain(&xml)
        .unwrap_or_else(|e| panic!("vgpud cannot read its own domain ({e}):\n{xml}"));
    assert_eq!(back.name, domain.name);
    assert_eq!(back.devices, expected, "{xml}");
    let mdevs: Vec<&String> = expected
        .iter()
        .filter(|d| d.kind == "mdev")
        .map(|d| &d.uuid)
        .collect();
    assert_eq!(back.mdev_hostdevs.iter().collect::<Vec<_>>(), mdevs);
    let pcis: Vec<&String> = expected.iter().filter_map(|d| d.address.as_ref()).collect();
    assert_eq!(back.pci_hostdevs.iter().collect::<Vec<_>>(), pcis);
}));
