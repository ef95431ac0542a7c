//! The configuration file, `etc/vgpud/vgpud.toml`: an error is `Invalid` naming the file,
//! never a panic; a configuration that parses, written back as TOML, parses the same.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use vgpud::config::{ConfigError, FileConfig};

/// A TOML basic string: JSON's escapes are TOML's.
fn string(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

fn path(p: &Path) -> String {
    string(p.to_str().expect("a path from TOML is UTF-8"))
}

fn render(c: &FileConfig) -> String {
    let mut out = String::from("[placement]\n");
    if let Some(p) = c.placement.policy {
        out += &format!("policy = {}\n", string(p.as_str()));
    }
    if let Some(n) = c.placement.numa_node {
        out += &format!("numa_node = {n}\n");
    }
    out += "[libvirt]\n";
    if let Some(uri) = &c.libvirt.uri {
        out += &format!("uri = {}\n", string(uri));
    }
    out += "[sriov]\n";
    if let Some(p) = &c.sriov.sriov_manage {
        out += &format!("sriov_manage = {}\n", path(p));
    }
    out += "[nvidia]\n";
    if let Some(p) = &c.nvidia.nvidia_smi {
        out += &format!("nvidia_smi = {}\n", path(p));
    }
    out
}

fuzz_target!(|data: &[u8]| vgpud_fuzz::text(data, |text| {
    let file = Path::new("/etc/vgpud/vgpud.toml");
    match FileConfig::parse(text, file) {
        Ok(config) => {
            let toml = render(&config);
            let again = FileConfig::parse(&toml, file)
                .unwrap_or_else(|e| panic!("{config:?} written as {toml:?} does not parse: {e}"));
            assert_eq!(again, config, "{toml:?}");
        }
        Err(ConfigError::Invalid { path, message }) => {
            assert_eq!(path, file);
            assert!(!message.contains('\n'), "{message:?}");
        }
        Err(e) => panic!("parsing gives {e:?}, not Invalid"),
    }
}));
