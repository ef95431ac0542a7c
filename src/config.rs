//! The configuration file, `ROOT/etc/vgpud/vgpud.toml`: defaults an operator sets once.
//! Command-line flags win over the file, the file over the built-in defaults. A missing file
//! is an empty one; an unknown key or a bad value is an error naming the file, so a typo
//! never goes unnoticed.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::engine::Policy;

/// Where the file is, below the root.
pub const PATH: &str = "etc/vgpud/vgpud.toml";

/// An error reading the configuration file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file is not valid TOML or holds unknown keys or bad values.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, from the parser.
        message: String,
    },
}

/// The file's contents; every key is optional.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `[placement]`.
    #[serde(default)]
    pub placement: PlacementConfig,
    /// `[libvirt]`.
    #[serde(default)]
    pub libvirt: LibvirtConfig,
    /// `[sriov]`.
    #[serde(default)]
    pub sriov: SriovConfig,
    /// `[nvidia]`.
    #[serde(default)]
    pub nvidia: NvidiaConfig,
}

/// `[nvidia]`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvidiaConfig {
    /// `nvidia_smi = "/usr/bin/nvidia-smi"`: sets the heterogeneous vGPU mode.
    pub nvidia_smi: Option<PathBuf>,
}

/// `[placement]`: where a new device goes when the request does not say.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementConfig {
    /// `policy = "pack" | "spread"`.
    pub policy: Option<Policy>,
    /// `numa_node = N`: prefer GPUs on this NUMA node.
    pub numa_node: Option<u32>,
}

/// `[libvirt]`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LibvirtConfig {
    /// `uri = "qemu:///system"`.
    pub uri: Option<String>,
}

/// `[sriov]`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SriovConfig {
    /// `sriov_manage = "/usr/lib/nvidia/sriov-manage"`: NVIDIA's VF tool.
    pub sriov_manage: Option<PathBuf>,
}

impl FileConfig {
    /// Parses the text of a configuration file.
    pub fn parse(text: &str, path: &Path) -> Result<FileConfig, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Invalid {
            path: path.to_path_buf(),
            message: e.to_string().trim().replace('\n', " "),
        })
    }

    /// Reads `ROOT/etc/vgpud/vgpud.toml`; an absent file is an empty configuration.
    pub fn load(root: &Path) -> Result<FileConfig, ConfigError> {
        let path = root.join(PATH);
        match std::fs::read_to_string(&path) {
            Ok(text) => FileConfig::parse(&text, &path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(FileConfig::default()),
            Err(source) => Err(ConfigError::Read { path, source }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_example_parses() {
        let text = include_str!("../etc/vgpud/vgpud.toml");
        let c = FileConfig::parse(text, Path::new("vgpud.toml")).expect("example parses");
        assert_eq!(c.placement.policy, Some(Policy::Pack));
    }

    #[test]
    fn every_key_is_optional_and_a_missing_file_is_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            FileConfig::load(dir.path()).expect("absent"),
            FileConfig::default()
        );
        let c = FileConfig::parse(
            "[placement]\npolicy = \"spread\"\nnuma_node = 1\n[libvirt]\nuri = \"test:///default\"\n",
            Path::new("x"),
        )
        .expect("parses");
        assert_eq!(c.placement.policy, Some(Policy::Spread));
        assert_eq!(c.placement.numa_node, Some(1));
        assert_eq!(c.libvirt.uri.as_deref(), Some("test:///default"));
    }

    #[test]
    fn typos_and_bad_values_are_errors_naming_the_file() {
        for bad in [
            "[placement]\npolcy = \"pack\"\n",
            "[placement]\npolicy = \"densest\"\n",
            "[placement]\nnuma_node = -1\n",
            "[nope]\n",
            "not toml",
        ] {
            let err = FileConfig::parse(bad, Path::new("/etc/vgpud/vgpud.toml"))
                .expect_err(bad)
                .to_string();
            assert!(err.starts_with("/etc/vgpud/vgpud.toml: "), "{err}");
        }
    }
}
