//! `vgpuctl export nova|placement`: what vgpud made on a host, in the form OpenStack Nova and
//! Placement take it, so that Nova serves exactly the pools vgpud made. Pure functions of
//! vgpud's tree and types (unit-tested below); main.rs reads them over D-Bus.
//!
//! Nova's facts (nova/conf/devices.py, nova/virt/libvirt/driver.py): `[devices]
//! enabled_mdev_types` lists the mdev types; each type has a section `[mdev_<type>]` whose
//! `device_addresses` names the PCI devices (mdev parents) given to it, one type per device;
//! `max_instances` caps the devices of a type (needed where each SR-IOV VF is a parent of its
//! own and says 1); Nova reuses existing unassigned mdevs of an enabled type before making new
//! ones. Placement: one resource provider per mdev parent, named `<node>_pci_<dddd>_<bb>_<ss>_<f>`,
//! a child of the compute node's provider `<node>`, with a `VGPU` inventory of `total` = the
//! existing mdevs of the type plus those the parent can still make, `min_unit` 1, `max_unit`
//! = total, `step_size` 1, `reserved` 0, `allocation_ratio` 1.0. Nova makes no trait per type:
//! operators create `CUSTOM_` traits by hand; this names one per type.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;
use vgpud_client::{DeviceDetails, GpuDetails, TypeSummary};

/// The trait a type gets: `CUSTOM_` and its name upper-cased, every other character `_`
/// (`GRID RTX6000-4Q` → `CUSTOM_GRID_RTX6000_4Q`), as Placement's trait names allow.
pub fn trait_of(type_name: &str) -> String {
    let body: String = type_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("CUSTOM_{body}")
}

/// libvirt's name of a PCI device, which Nova's provider names use (`0000:84:00.0` →
/// `pci_0000_84_00_0`).
pub fn libvirt_pci_name(address: &str) -> String {
    format!("pci_{}", address.replace([':', '.'], "_"))
}

/// One GPU's share for Nova: the type its mdevs are of, and the mdev parents.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Share {
    gpu: String,
    type_id: String,
    type_name: String,
    parents: BTreeSet<String>,
    /// The parents are VFs (each says 1 free): the type needs `max_instances`.
    on_vfs: bool,
    devices: u32,
}

/// What the export says: the shares, and why other GPUs are left out.
#[derive(Debug, Default)]
struct Plan {
    shares: Vec<Share>,
    notes: Vec<String>,
}

/// Which type each physical GPU serves to Nova: the one type of its mdevs; a GPU without
/// mdevs, the first of `wanted` it offers. A GPU with mdevs of several types, or vGPUs on VFs
/// (not mdevs), is left out with a note.
fn plan(
    gpus: &[GpuDetails],
    devices: &[DeviceDetails],
    types: &[TypeSummary],
    wanted: &[String],
) -> Plan {
    let mut out = Plan::default();
    for g in gpus {
        let mdevs: Vec<&DeviceDetails> = devices
            .iter()
            .filter(|d| d.gpu == g.address && d.kind == "mdev")
            .collect();
        if devices
            .iter()
            .any(|d| d.gpu == g.address && d.kind == "sriov-vgpu")
        {
            out.notes.push(format!(
                "{}: its vGPUs are on SR-IOV VFs with NVIDIA's vendor VFIO, not mediated devices: Nova serves those as PCI devices ([pci] device_spec and alias), not through [devices]",
                g.address
            ));
            continue;
        }
        let of_types: BTreeSet<&str> = mdevs.iter().map(|d| d.type_id.as_str()).collect();
        let (type_id, type_name) = match of_types.len() {
            0 => {
                let offered = wanted.iter().find_map(|w| {
                    types.iter().filter(|t| t.gpu == g.address).find(|t| {
                        t.id.eq_ignore_ascii_case(w)
                            || t.name.eq_ignore_ascii_case(w)
                            || t.name
                                .split_once(' ')
                                .is_some_and(|(_, short)| short.eq_ignore_ascii_case(w))
                    })
                });
                match offered {
                    Some(t) => (t.id.clone(), t.name.clone()),
                    None => continue,
                }
            }
            1 => {
                let d = mdevs[0];
                (d.type_id.clone(), d.type_name.clone())
            }
            _ => {
                out.notes.push(format!(
                    "{}: mdevs of several types ({}): Nova gives each GPU one type; left out",
                    g.address,
                    of_types.into_iter().collect::<Vec<_>>().join(", ")
                ));
                continue;
            }
        };
        let mut parents: BTreeSet<String> = mdevs.iter().map(|d| d.parent.clone()).collect();
        let on_vfs = parents.iter().any(|p| *p != g.address)
            || (mdevs.is_empty() && !g.vfs.is_empty() && g.num_vfs > 0);
        if parents.is_empty() {
            if on_vfs {
                parents.extend(g.vfs.iter().cloned());
            } else {
                parents.insert(g.address.clone());
            }
        }
        out.shares.push(Share {
            gpu: g.address.clone(),
            type_id,
            type_name,
            parents,
            on_vfs,
            devices: mdevs.len() as u32,
        });
    }
    out
}

/// How many of `type_id` the GPU holds at most: what it holds plus what it can still make.
fn total(share: &Share, types: &[TypeSummary]) -> u32 {
    let available: u32 = types
        .iter()
        .filter(|t| t.gpu == share.gpu && t.id == share.type_id)
        .map(|t| t.available)
        .sum();
    share.devices + available
}

/// The nova.conf sections for this host.
pub fn nova(
    gpus: &[GpuDetails],
    devices: &[DeviceDetails],
    types: &[TypeSummary],
    wanted: &[String],
) -> String {
    let p = plan(gpus, devices, types, wanted);
    let mut by_type: BTreeMap<&str, Vec<&Share>> = BTreeMap::new();
    for s in &p.shares {
        by_type.entry(s.type_id.as_str()).or_default().push(s);
    }
    let mut out = String::from(
        "# From vgpuctl export nova: the mdev types vgpud serves on this host, for nova-compute's\n\
         # nova.conf. Nova reuses the unassigned mdevs of an enabled type before it makes new ones.\n",
    );
    for n in &p.notes {
        out.push_str(&format!("# {n}\n"));
    }
    out.push_str("[devices]\n");
    out.push_str(&format!(
        "enabled_mdev_types = {}\n",
        by_type.keys().copied().collect::<Vec<_>>().join(", ")
    ));
    for (type_id, shares) in &by_type {
        let name = &shares[0].type_name;
        out.push_str(&format!("\n# {name}: trait {}\n", trait_of(name)));
        out.push_str(&format!("[mdev_{type_id}]\n"));
        let parents: Vec<&str> = shares
            .iter()
            .flat_map(|s| s.parents.iter().map(String::as_str))
            .collect();
        out.push_str(&format!("device_addresses = {}\n", parents.join(",")));
        if shares.iter().any(|s| s.on_vfs) {
            let max: u32 = shares.iter().map(|s| total(s, types)).sum();
            out.push_str(&format!("max_instances = {max}\n"));
        }
    }
    out
}

/// The inventory as Placement would hold it: a provider per GPU serving a type, under the
/// compute node `node`.
pub fn placement(
    node: &str,
    gpus: &[GpuDetails],
    devices: &[DeviceDetails],
    types: &[TypeSummary],
    wanted: &[String],
) -> serde_json::Value {
    let p = plan(gpus, devices, types, wanted);
    let providers: Vec<serde_json::Value> = p
        .shares
        .iter()
        .map(|s| {
            let total = total(s, types);
            json!({
                "name": format!("{node}_{}", libvirt_pci_name(&s.gpu)),
                "parent_provider_name": node,
                "gpu": s.gpu,
                "mdev_type": s.type_id,
                "inventories": {
                    "VGPU": {
                        "total": total,
                        "reserved": 0,
                        "min_unit": 1,
                        "max_unit": total,
                        "step_size": 1,
                        "allocation_ratio": 1.0,
                    }
                },
                "traits": [trait_of(&s.type_name)],
            })
        })
        .collect();
    json!({ "resource_providers": providers, "left_out": p.notes })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(address: &str, vfs: &[&str]) -> GpuDetails {
        GpuDetails {
            address: address.into(),
            model: "Quadro RTX 6000".into(),
            vendor_id: 0x10de,
            device_id: 0x1e30,
            driver: "nvidia".into(),
            iommu_group: 1,
            numa_node: 0,
            sharing_modes: vec!["mdev".into()],
            types: Vec::new(),
            devices: Vec::new(),
            total_vfs: vfs.len() as u32,
            num_vfs: vfs.len() as u32,
            vfs: vfs.iter().map(|v| v.to_string()).collect(),
            heterogeneous_mode: false,
            mig_current: false,
            mig_pending: false,
            gpu_instances: Vec::new(),
            scheduler: BTreeMap::new(),
        }
    }

    fn dev(gpu: &str, parent: &str, kind: &str, type_id: &str, name: &str) -> DeviceDetails {
        DeviceDetails {
            uuid: format!("{gpu}-{parent}-{type_id}"),
            kind: kind.into(),
            parent: parent.into(),
            gpu: gpu.into(),
            address: String::new(),
            functions: Vec::new(),
            type_id: type_id.into(),
            type_name: name.into(),
            owner: String::new(),
            iommu_group: -1,
            attributes: BTreeMap::new(),
            active: true,
            persistent: true,
            autostart: true,
            created: 0,
        }
    }

    fn ty(gpu: &str, id: &str, name: &str, available: u32) -> TypeSummary {
        TypeSummary {
            gpu: gpu.into(),
            id: id.into(),
            name: name.into(),
            framebuffer: 4 << 30,
            max_instances: 6,
            available,
        }
    }

    #[test]
    fn each_gpu_serves_the_type_of_its_mdevs_and_the_rest_is_said() {
        let gpus = [
            gpu("0000:3b:00.0", &[]),
            gpu("0000:3c:00.0", &[]),
            gpu("0000:5e:00.0", &[]),
            gpu("0000:86:00.0", &[]),
            gpu("0000:af:00.0", &["0000:af:00.4", "0000:af:00.5"]),
        ];
        let q4 = ("nvidia-259", "GRID RTX6000-4Q");
        let devices = [
            dev("0000:3b:00.0", "0000:3b:00.0", "mdev", q4.0, q4.1),
            dev("0000:3b:00.0", "0000:3b:00.0", "mdev", q4.0, q4.1),
            dev("0000:5e:00.0", "0000:5e:00.0", "mdev", q4.0, q4.1),
            dev(
                "0000:5e:00.0",
                "0000:5e:00.0",
                "mdev",
                "nvidia-257",
                "GRID RTX6000-2Q",
            ),
            dev(
                "0000:86:00.0",
                "0000:86:00.1",
                "sriov-vgpu",
                "nvidia-500",
                "NVIDIA A40-4Q",
            ),
            dev(
                "0000:af:00.0",
                "0000:af:00.4",
                "mdev",
                "nvidia-470",
                "GRID A100-4C",
            ),
        ];
        let types = [
            ty("0000:3b:00.0", q4.0, q4.1, 4),
            ty("0000:3c:00.0", "nvidia-257", "GRID RTX6000-2Q", 12),
            ty("0000:af:00.0", "nvidia-470", "GRID A100-4C", 1),
        ];
        let text = nova(&gpus, &devices, &types, &["RTX6000-2Q".to_string()]);
        assert!(
            text.contains("[devices]\nenabled_mdev_types = nvidia-257, nvidia-259, nvidia-470\n"),
            "{text}"
        );
        assert!(
            text.contains("[mdev_nvidia-259]\ndevice_addresses = 0000:3b:00.0\n"),
            "{text}"
        );
        assert!(
            text.contains("[mdev_nvidia-257]\ndevice_addresses = 0000:3c:00.0\n"),
            "a GPU without mdevs serves the type asked for: {text}"
        );
        assert!(
            text.contains(
                "[mdev_nvidia-470]\ndevice_addresses = 0000:af:00.4\nmax_instances = 2\n"
            ),
            "mdevs on VFs need max_instances: {text}"
        );
        assert!(
            text.contains("# 0000:5e:00.0: mdevs of several types"),
            "{text}"
        );
        assert!(
            text.contains("# 0000:86:00.0: its vGPUs are on SR-IOV VFs"),
            "{text}"
        );
        assert!(
            text.contains("# GRID RTX6000-4Q: trait CUSTOM_GRID_RTX6000_4Q\n"),
            "{text}"
        );

        let p = placement("compute-7", &gpus, &devices, &types, &[]);
        let providers = p["resource_providers"].as_array().expect("providers");
        assert_eq!(providers.len(), 2, "{p:#}");
        let first = &providers[0];
        assert_eq!(first["name"], "compute-7_pci_0000_3b_00_0");
        assert_eq!(first["parent_provider_name"], "compute-7");
        assert_eq!(
            first["inventories"]["VGPU"]["total"], 6,
            "2 made + 4 available"
        );
        assert_eq!(first["inventories"]["VGPU"]["max_unit"], 6);
        assert_eq!(first["traits"][0], "CUSTOM_GRID_RTX6000_4Q");
        assert_eq!(p["left_out"].as_array().map(Vec::len), Some(2));
    }
}
