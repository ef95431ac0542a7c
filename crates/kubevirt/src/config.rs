//! `/etc/vgpud/kubevirt.toml`: which vgpud types are served as which kubelet resources, and
//! how (a pool of existing devices, or devices made on demand).

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The configuration file's default path.
pub const DEFAULT_PATH: &str = "/etc/vgpud/kubevirt.toml";

/// Most resources one plugin serves (each is a socket and a registration).
pub const MAX_RESOURCES: usize = 64;
/// Most device IDs one on-demand resource advertises.
pub const MAX_ON_DEMAND: u32 = 1024;

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML of this schema.
    #[error("parsing {path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        source: Box<toml::de::Error>,
    },
    /// A value is out of range or contradicts another.
    #[error("{path}: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The kubelet's device plugin directory (`kubelet.sock` and the plugins' sockets).
    #[serde(default = "default_plugin_dir")]
    pub plugin_dir: PathBuf,
    /// The kubelet's PodResources socket.
    #[serde(default = "default_pod_resources")]
    pub pod_resources_socket: PathBuf,
    /// How long an on-demand device no pod holds is kept before it is removed, seconds.
    #[serde(default = "default_grace")]
    pub reclaim_grace_s: u64,
    /// How often PodResources is asked, seconds.
    #[serde(default = "default_interval")]
    pub reclaim_interval_s: u64,
    /// The owner tag of the devices made on demand.
    #[serde(default = "default_owner")]
    pub owner: String,
    /// Resource name prefixes by GPU vendor.
    #[serde(default)]
    pub prefix: Prefixes,
    /// The resources served.
    #[serde(default, rename = "resource")]
    pub resources: Vec<ResourceConfig>,
}

/// Resource name prefixes by the GPU's PCI vendor.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prefixes {
    /// NVIDIA (0x10de), as KubeVirt's examples name vGPUs: `nvidia.com/`.
    #[serde(default = "default_nvidia")]
    pub nvidia: String,
    /// Intel (0x8086), GVT-g and SR-IOV: `intel.com/`.
    #[serde(default = "default_intel")]
    pub intel: String,
    /// AMD (0x1002).
    #[serde(default = "default_amd")]
    pub amd: String,
    /// Any other vendor (the kernel's mtty sample among them).
    #[serde(default = "default_other")]
    pub other: String,
}

impl Default for Prefixes {
    fn default() -> Self {
        Prefixes {
            nvidia: default_nvidia(),
            intel: default_intel(),
            amd: default_amd(),
            other: default_other(),
        }
    }
}

/// How a resource's devices come to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The devices that exist with the resource's `owner` tag (a layout pool's) are advertised.
    Pool,
    /// As many IDs as vgpud's `GetCapacity` allows are advertised; `Allocate` makes them.
    OnDemand,
}

/// One `[[resource]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceConfig {
    /// The vgpud type: an id (`nvidia-259`), a name (`GRID RTX6000-4Q`), or `passthrough`.
    #[serde(rename = "type")]
    pub ty: String,
    /// Pool or on demand.
    pub mode: Mode,
    /// Pool mode: the owner tag of the pool's devices (a layout pool's tag).
    #[serde(default)]
    pub pool: Option<String>,
    /// On demand: most device IDs advertised.
    #[serde(default = "default_max")]
    pub max_devices: u32,
    /// The resource name, instead of `<prefix><type name, spaces as _>`.
    #[serde(default)]
    pub name: Option<String>,
}

fn default_plugin_dir() -> PathBuf {
    PathBuf::from("/var/lib/kubelet/device-plugins")
}
fn default_pod_resources() -> PathBuf {
    PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock")
}
fn default_grace() -> u64 {
    60
}
fn default_interval() -> u64 {
    10
}
fn default_owner() -> String {
    "vgpud-kubevirt".into()
}
fn default_nvidia() -> String {
    "nvidia.com/".into()
}
fn default_intel() -> String {
    "intel.com/".into()
}
fn default_amd() -> String {
    "amd.com/".into()
}
fn default_other() -> String {
    "vgpud.io/".into()
}
fn default_max() -> u32 {
    64
}

impl Config {
    /// Reads and checks the file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Parses and checks `text`, read from `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source: Box::new(source),
        })?;
        let invalid = |why: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            why,
        };
        if config.resources.len() > MAX_RESOURCES {
            return Err(invalid(format!("more than {MAX_RESOURCES} resources")));
        }
        if config.reclaim_interval_s == 0 {
            return Err(invalid("reclaim_interval_s must be at least 1".into()));
        }
        for r in &config.resources {
            match (r.mode, &r.pool) {
                (Mode::Pool, None) => {
                    return Err(invalid(format!("resource {}: a pool needs `pool`", r.ty)))
                }
                (Mode::OnDemand, Some(_)) => {
                    return Err(invalid(format!(
                        "resource {}: `pool` is for mode = \"pool\"",
                        r.ty
                    )))
                }
                _ => {}
            }
            if r.max_devices == 0 || r.max_devices > MAX_ON_DEMAND {
                return Err(invalid(format!(
                    "resource {}: max_devices must be 1 to {MAX_ON_DEMAND}",
                    r.ty
                )));
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_example_parses() {
        let c = Config::parse(
            Path::new("kubevirt.toml"),
            include_str!("../../../integrations/kubevirt/kubevirt.toml"),
        )
        .expect("the example is valid");
        assert_eq!(c.resources.len(), 1);
        assert_eq!(c.prefix.intel, "intel.com/");
    }

    #[test]
    fn defaults_and_modes() {
        let c = Config::parse(
            Path::new("k.toml"),
            "[[resource]]\ntype = \"nvidia-259\"\nmode = \"on-demand\"\n\
             [[resource]]\ntype = \"nvidia-260\"\nmode = \"pool\"\npool = \"k8s\"\n",
        )
        .expect("valid");
        assert_eq!(c.plugin_dir, Path::new("/var/lib/kubelet/device-plugins"));
        assert_eq!(c.reclaim_grace_s, 60);
        assert_eq!(c.resources[0].mode, Mode::OnDemand);
        assert_eq!(c.resources[1].pool.as_deref(), Some("k8s"));
        let e = Config::parse(
            Path::new("k.toml"),
            "[[resource]]\ntype = \"x\"\nmode = \"pool\"\n",
        )
        .expect_err("a pool without its tag");
        assert!(e.to_string().contains("needs `pool`"), "{e}");
    }
}
