//! SR-IOV physical and virtual functions, and NVIDIA's vendor-specific VFIO vGPU files on
//! virtual functions (hardware.md §2, §5.10).

use std::path::PathBuf;

use crate::host::{Host, HostError, HostResult};
use crate::model::Sriov;

/// The directory of a PCI function: `sys/bus/pci/devices/<address>`.
pub fn pci_dir(host: &Host, address: &str) -> PathBuf {
    host.sys("bus/pci/devices").join(address)
}

/// The `nvidia/` directory of a virtual function.
pub fn vgpu_dir(host: &Host, vf: &str) -> PathBuf {
    pci_dir(host, vf).join("nvidia")
}

/// Reads the SR-IOV state of a function, `None` if it has no SR-IOV capability.
pub fn read_sriov(host: &Host, address: &str) -> HostResult<Option<Sriov>> {
    let dir = pci_dir(host, address);
    let Some(total) = host.read_attr_opt(&dir.join("sriov_totalvfs"))? else {
        return Ok(None);
    };
    let count = |path: PathBuf, text: &str| -> HostResult<u32> {
        text.trim().parse().map_err(|_| HostError::Parse {
            path,
            reason: format!("{text:?} is not a VF count"),
        })
    };
    let total_vfs = count(dir.join("sriov_totalvfs"), &total)?;
    let num_vfs = match host.read_attr_opt(&dir.join("sriov_numvfs"))? {
        Some(n) => count(dir.join("sriov_numvfs"), &n)?,
        None => 0,
    };
    let mut indexed: Vec<(u32, String)> = Vec::new();
    for entry in host.list_dir(&dir)? {
        let Some(index) = entry
            .strip_prefix("virtfn")
            .and_then(|i| i.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(vf) = host.link_name(&dir.join(&entry))? {
            indexed.push((index, vf));
        }
    }
    indexed.sort();
    Ok(Some(Sriov {
        total_vfs,
        num_vfs,
        vfs: indexed.into_iter().map(|(_, vf)| vf).collect(),
    }))
}

/// The physical function of a virtual function (its `physfn` link), `None` for others.
pub fn physical_function(host: &Host, address: &str) -> HostResult<Option<String>> {
    host.link_name(&pci_dir(host, address).join("physfn"))
}

/// One entry of `creatable_vgpu_types`: the numeric type id and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatableType {
    /// Type id, the number written to `current_vgpu_type` (`1150`).
    pub id: u32,
    /// Name as the driver prints it (`NVIDIA L40S-4Q`).
    pub name: String,
}

/// Parses `creatable_vgpu_types` as NVIDIA's own tools do: the `ID : vGPU Name` header is
/// optional, blank lines are ignored, and an entry is `<id> : <name>` or `<id> <name>`.
/// Lines that start with no number (the header, anything unknown) are skipped.
pub fn parse_creatable(text: &str) -> Vec<CreatableType> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let digits_end = line
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(line.len());
        let Ok(id) = line[..digits_end].parse::<u32>() else {
            continue;
        };
        let rest = line[digits_end..].trim_start();
        let name = rest.strip_prefix(':').unwrap_or(rest).trim();
        if name.is_empty() {
            continue;
        }
        out.push(CreatableType {
            id,
            name: name.to_string(),
        });
    }
    out
}

/// The vGPU state of a virtual function under NVIDIA's vendor-specific VFIO framework.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VfVgpu {
    /// The VF's address.
    pub vf: String,
    /// The type id written to `current_vgpu_type`, 0 when none.
    pub current: u32,
    /// What `creatable_vgpu_types` lists now.
    pub creatable: Vec<CreatableType>,
    /// `vgpu_params`, empty when unset.
    pub params: String,
    /// `placement_id` of its vGPU (heterogeneous mode), when the driver tells it.
    pub placement_id: Option<u64>,
}

/// Reads a VF's vGPU files; `None` when it has none (not a vendor-VFIO VF, or not bound to
/// the NVIDIA driver).
pub fn read_vf_vgpu(host: &Host, vf: &str) -> HostResult<Option<VfVgpu>> {
    let dir = vgpu_dir(host, vf);
    let Some(current) = host.read_attr_opt(&dir.join("current_vgpu_type"))? else {
        return Ok(None);
    };
    let current = current.trim().parse().map_err(|_| HostError::Parse {
        path: dir.join("current_vgpu_type"),
        reason: format!("{current:?} is not a type id"),
    })?;
    let creatable = host
        .read_attr_opt(&dir.join("creatable_vgpu_types"))?
        .map(|t| parse_creatable(&t))
        .unwrap_or_default();
    // A single space is how the parameters are cleared: blank is none.
    let params = host
        .read_attr_opt(&dir.join("vgpu_params"))?
        .filter(|p| !p.trim().is_empty())
        .unwrap_or_default();
    // The real driver fails the read (ENXIO) while the VF has no vGPU: that is "none".
    let placement_id = match host.read_attr_opt(&dir.join("placement_id")) {
        Ok(v) => v.and_then(|s| s.trim().parse().ok()),
        Err(_) => None,
    };
    Ok(Some(VfVgpu {
        vf: vf.to_string(),
        current,
        creatable,
        params,
        placement_id,
    }))
}

/// The GPU instance the MIG-backed vGPU on VF `vf` runs in (`nvidia/gpu_instance_id`);
/// `None` when the VF has no such vGPU (the driver fails the read then) or the file is
/// unreadable.
pub fn read_vf_gpu_instance(host: &Host, vf: &str) -> Option<u32> {
    let path = vgpu_dir(host, vf).join("gpu_instance_id");
    host.read_attr_opt(&path).ok()??.trim().parse().ok()
}

/// The number in an NVIDIA type id (`nvidia-1150` → 1150).
pub fn nvidia_type_number(type_id: &str) -> Option<u32> {
    type_id.strip_prefix("nvidia-")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creatable_lists_parse_with_and_without_header() {
        let real = "ID    : vGPU Name\n1145  : NVIDIA L40S-1B\n1146  : NVIDIA L40S-2B\n\n2164  : NVIDIA L40S-3B\n";
        let parsed = parse_creatable(real);
        assert_eq!(parsed.len(), 3);
        assert_eq!(
            parsed[0],
            CreatableType {
                id: 1145,
                name: "NVIDIA L40S-1B".into()
            }
        );
        assert_eq!(parsed[2].id, 2164);
        let headless = "1428 : NVIDIA H200X-141C\n1414 : NVIDIA H200X-1-18C";
        let parsed = parse_creatable(headless);
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[1].name, "NVIDIA H200X-1-18C");
        let no_colon = "10001 NVIDIA X-1Q\n";
        assert_eq!(parse_creatable(no_colon)[0].id, 10001);
        assert!(parse_creatable("ID    : vGPU Name\n").is_empty());
        assert!(parse_creatable("").is_empty());
        assert!(parse_creatable("12 :\nabc : def\n").is_empty());
    }

    #[test]
    fn nvidia_type_numbers() {
        assert_eq!(nvidia_type_number("nvidia-1150"), Some(1150));
        assert_eq!(nvidia_type_number("i915-GVTg_V5_4"), None);
        assert_eq!(nvidia_type_number("nvidia-x"), None);
    }
}
