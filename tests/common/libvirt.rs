//! libvirt's own schema checks: `virt-xml-validate` (Debian packages libvirt-clients and
//! libxml2-utils) on rendered domains and hostdevs.

#![allow(clippy::unwrap_used)]

use std::io::{ErrorKind, Write};
use std::process::Command;

use vgpud::xml::{render_minimal_domain, MinimalDomain};

/// Fails, never skips, when the schema tools are missing.
pub fn require_tools() {
    for (tool, arg) in [("virt-xml-validate", "--version"), ("xmllint", "--version")] {
        match Command::new(tool).arg(arg).output() {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => panic!(
                "{tool} is not installed: the libvirt schema checks need it; install it with \
                 `apt-get install libvirt-clients libxml2-utils`"
            ),
            Err(e) => panic!("cannot run {tool}: {e}"),
        }
    }
}

/// Runs `virt-xml-validate FILE domain`: `Ok(())` when valid (exit 0), `Err(output)` when
/// invalid (exit 3). Any other outcome is a broken setup and panics.
pub fn validate_domain(xml: &str) -> Result<(), String> {
    require_tools();
    let mut file = tempfile::Builder::new()
        .prefix("vgpud-domain-")
        .suffix(".xml")
        .tempfile()
        .unwrap();
    file.write_all(xml.as_bytes()).unwrap();
    file.flush().unwrap();
    let out = Command::new("virt-xml-validate")
        .arg(file.path())
        .arg("domain")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match out.status.code() {
        Some(0) => Ok(()),
        Some(3) => Err(text),
        other => panic!("virt-xml-validate failed to run (exit {other:?}): {text}"),
    }
}

#[track_caller]
pub fn assert_valid_domain(xml: &str) {
    if let Err(output) = validate_domain(xml) {
        panic!("libvirt's schema rejects the domain:\n{output}\n--- domain ---\n{xml}");
    }
}

/// A hostdev fragment is validated inside the minimal domain.
#[track_caller]
pub fn assert_valid_hostdev(fragment: &str) {
    let domain = render_minimal_domain(&MinimalDomain {
        name: "hostdev-check".to_owned(),
        uuid: None,
        memory_mib: 1024,
        hostdevs: vec![fragment.to_owned()],
    })
    .unwrap();
    assert_valid_domain(&domain);
}

/// libvirt's test driver is one shared state per process: one test at a time uses it.
static TEST_DRIVER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Defines `xml` in libvirt's built-in test driver (`test:///default`, no daemon) with
/// `VIR_DOMAIN_DEFINE_VALIDATE` (the schema check in process), reads it back with
/// `virDomainGetXMLDesc(0)` and undefines it. `Err` carries libvirt's message when the
/// define is refused.
pub fn define_and_read_back(xml: &str) -> Result<String, String> {
    let _guard = TEST_DRIVER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    virt::error::clear_error_callback();
    let conn = virt::connect::Connect::open(Some("test:///default"))
        .map_err(|e| format!("opening test:///default: {e}"))
        .unwrap();
    let domain = conn
        .define_domain_xml_flags(xml, virt::sys::VIR_DOMAIN_DEFINE_VALIDATE)
        .map_err(|e| e.to_string())?;
    let read_back = domain.xml_desc(0);
    domain.undefine().unwrap();
    Ok(read_back.unwrap())
}

/// [`define_and_read_back`] that panics, with the domain, when libvirt refuses it.
#[track_caller]
pub fn assert_defines(xml: &str) -> String {
    match define_and_read_back(xml) {
        Ok(read_back) => read_back,
        Err(e) => panic!("libvirt's test driver refuses the domain: {e}\n--- domain ---\n{xml}"),
    }
}
