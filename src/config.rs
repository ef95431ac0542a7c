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
    /// The file exists but cannot be read: not a regular file (a FIFO never hangs vgpud),
    /// larger than [`crate::persist::MAX_STATE_FILE_BYTES`], unreadable or not UTF-8.
    #[error("cannot read {}: {}", .0.path.display(), .0.reason)]
    Read(crate::persist::BadFile),
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
    /// `[layouts]`.
    #[serde(default)]
    pub layouts: LayoutsConfig,
    /// `[metrics]`.
    #[serde(default)]
    pub metrics: MetricsConfig,
}

/// `[metrics]`: Prometheus metrics, off unless a key says where.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// `listen = "127.0.0.1:9835"`: serve `GET /metrics` there (a loopback address only).
    pub listen: Option<std::net::SocketAddr>,
    /// `textfile = "/var/lib/prometheus/node-exporter/vgpud.prom"`: write them there for
    /// node_exporter's textfile collector.
    pub textfile: Option<PathBuf>,
    /// `textfile_interval_s = 15`: how often the textfile is written.
    pub textfile_interval_s: Option<u64>,
}

/// `[layouts]`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutsConfig {
    /// `apply_at_boot = "NAME"`: the layout (`etc/vgpud/layouts/NAME.toml`) applied after
    /// the restore each time vgpud starts.
    pub apply_at_boot: Option<String>,
}

/// `[nvidia]`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvidiaConfig {
    /// `nvidia_smi = "/usr/bin/nvidia-smi"`: sets the heterogeneous vGPU mode.
    pub nvidia_smi: Option<PathBuf>,
    /// `nvml_library = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"`: the NVML library
    /// (MIG, scheduler, telemetry); `"none"` runs without NVML.
    pub nvml_library: Option<PathBuf>,
}

/// `[placement]`: where a new device goes when the request does not say.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementConfig {
    /// `policy = "pack" | "spread" | "least-busy"`.
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

    /// Reads `ROOT/etc/vgpud/vgpud.toml` with vgpud's one defensive reader (a link is
    /// followed: configuration management installs links); an absent file is an empty
    /// configuration. The operator's file is never moved aside: a bad one is an error.
    pub fn load(root: &Path) -> Result<FileConfig, ConfigError> {
        use crate::persist::{read_file, Links, MAX_STATE_FILE_BYTES};
        let path = root.join(PATH);
        match read_file(&path, MAX_STATE_FILE_BYTES, Links::Follow) {
            Ok(Some(text)) => FileConfig::parse(&text, &path),
            Ok(None) => Ok(FileConfig::default()),
            Err(bad) => Err(ConfigError::Read(bad)),
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
    fn a_fifo_or_a_directory_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(PATH);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o644))
            .expect("mkfifo");
        let err = FileConfig::load(dir.path()).expect_err("fifo").to_string();
        assert!(err.contains("vgpud.toml: a FIFO"), "{err}");
        std::fs::remove_file(&path).expect("rm");
        std::fs::create_dir(&path).expect("dir");
        let err = FileConfig::load(dir.path()).expect_err("dir").to_string();
        assert!(err.contains("a directory"), "{err}");
        std::fs::remove_dir(&path).expect("rm");
        // A link (configuration management) is followed.
        let real = dir.path().join("real.toml");
        std::fs::write(&real, "[placement]\npolicy = \"spread\"\n").expect("write");
        std::os::unix::fs::symlink(&real, &path).expect("link");
        let c = FileConfig::load(dir.path()).expect("through a link");
        assert_eq!(c.placement.policy, Some(Policy::Spread));
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
