//! The libvirt XML renderer: rendered output against the golden files in
//! `tests/golden/xml/`, and every rendered domain against libvirt's schema with
//! `virt-xml-validate` (needs the Debian packages libvirt-clients and libxml2-utils).
//!
//! `VGPUD_REGENERATE_GOLDEN=1 cargo test --test xml_render` rewrites the golden files.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::process::Command;

use common::golden::assert_golden;
use common::libvirt::{assert_valid_domain, assert_valid_hostdev, validate_domain};
use vgpud::xml::{
    render_mdev_hostdev, render_minimal_domain, render_pci_hostdev, MdevHostdev, MinimalDomain,
    PciHostdev,
};

const MDEV_UUID: &str = "3b2c8a4e-1f0d-4c1e-9b7a-5d6e7f809102";
const DOMAIN_UUID: &str = "6f1a9c2e-8b3d-4e5f-a061-7c8d9e0f1a2b";
const VF_ADDRESS: &str = "0000:3d:00.4";

fn mdev(display: Option<bool>, ramfb: Option<bool>) -> String {
    render_mdev_hostdev(&MdevHostdev {
        uuid: MDEV_UUID.to_owned(),
        display,
        ramfb,
    })
    .unwrap()
}

fn pci(managed: bool) -> String {
    render_pci_hostdev(&PciHostdev {
        address: VF_ADDRESS.to_owned(),
        managed,
        guest: None,
    })
    .unwrap()
}

fn domain(name: &str, uuid: Option<&str>, hostdevs: Vec<String>) -> String {
    render_minimal_domain(&MinimalDomain {
        name: name.to_owned(),
        uuid: uuid.map(str::to_owned),
        memory_mib: 1024,
        hostdevs,
    })
    .unwrap()
}

#[test]
fn mdev_plain() {
    let xml = mdev(None, None);
    assert_golden("xml/hostdev-mdev-plain.xml", &xml);
    assert_valid_hostdev(&xml);
}

#[test]
fn mdev_display_on_ramfb_on() {
    let xml = mdev(Some(true), Some(true));
    assert_golden("xml/hostdev-mdev-display-on-ramfb-on.xml", &xml);
    assert_valid_hostdev(&xml);
}

#[test]
fn mdev_display_off() {
    let xml = mdev(Some(false), None);
    assert_golden("xml/hostdev-mdev-display-off.xml", &xml);
    assert_valid_hostdev(&xml);
}

#[test]
fn pci_managed() {
    let xml = pci(true);
    assert_golden("xml/hostdev-pci-managed.xml", &xml);
    assert_valid_hostdev(&xml);
}

#[test]
fn pci_unmanaged() {
    let xml = pci(false);
    assert_golden("xml/hostdev-pci-unmanaged.xml", &xml);
    assert_valid_hostdev(&xml);
}

#[test]
fn domain_without_hostdev() {
    let xml = domain("vgpud-test", Some(DOMAIN_UUID), Vec::new());
    assert_golden("xml/domain-minimal-empty.xml", &xml);
    assert!(
        !xml.contains("<graphics") && !xml.contains("<video"),
        "{xml}"
    );
    assert_valid_domain(&xml);
}

#[test]
fn domain_with_mdev_display_on() {
    let xml = domain(
        "vgpud-test",
        Some(DOMAIN_UUID),
        vec![mdev(Some(true), None)],
    );
    assert_golden("xml/domain-minimal-mdev-display-on.xml", &xml);
    assert!(xml.contains("<graphics type=\"vnc\""), "{xml}");
    assert!(xml.contains("<model type=\"none\"/>"), "{xml}");
    assert_valid_domain(&xml);
}

#[test]
fn domain_with_mdev_and_pci() {
    let xml = domain("vgpud-test", None, vec![mdev(None, None), pci(false)]);
    assert_golden("xml/domain-minimal-mdev-pci.xml", &xml);
    assert!(
        !xml.contains("<graphics") && !xml.contains("<uuid>"),
        "{xml}"
    );
    assert_valid_domain(&xml);
}

#[test]
fn hostile_name_stays_valid_and_round_trips() {
    let name = "<evil>&'\"";
    let xml = domain(name, None, vec![mdev(None, None)]);
    assert!(
        xml.contains("<name>&lt;evil&gt;&amp;&apos;&quot;</name>"),
        "{xml}"
    );
    assert_valid_domain(&xml);
    // xmllint reads the name back unchanged.
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(xml.as_bytes()).unwrap();
    let out = Command::new("xmllint")
        .args(["--xpath", "string(/domain/name)"])
        .arg(file.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // xmllint ends the string with a newline of its own.
    let read_back = String::from_utf8_lossy(&out.stdout);
    assert_eq!(read_back.strip_suffix('\n').unwrap_or(&read_back), name);
}

/// Proves the validation can fail: an mdev hostdev without `<source>` is rejected.
#[test]
fn schema_rejects_mdev_hostdev_without_source() {
    let broken = domain("vgpud-test", None, Vec::new()).replace(
        "<devices/>",
        "<devices>\n    <hostdev mode=\"subsystem\" type=\"mdev\" model=\"vfio-pci\"/>\n  </devices>",
    );
    assert!(broken.contains("type=\"mdev\""), "{broken}");
    let output = validate_domain(&broken).expect_err("virt-xml-validate accepted a broken domain");
    assert!(output.contains("fails to validate"), "{output}");
}
