//! Profiles: realistic sysfs trees of hosts with mdev-capable GPUs, laid out as the kernel lays
//! them out (PCI hierarchy, bus and class links, IOMMU groups, mdev parents).
//!
//! Profiles use disjoint PCI addresses and IOMMU group numbers, so several can be written into
//! the same root; writing one twice is harmless. Every profile also writes the common platform
//! (host bridge, a root port, a dual-port NIC, the bus and driver directories, and the `etc/`,
//! `run/`, `var/lib/vgpud`, `dev/vfio` directories, plus the `etc/mdevctl.d` and
//! `usr/lib/mdevctl/scripts.d/{callouts,notifiers}` directories mdevctl 1.4 requires under its
//! `MDEVCTL_ENV_ROOT`). The exception is `qemu-vm`, the real-kernel suite's VM as it is: a
//! whole host of its own, with only the platform's directories, buses and IOMMU, whose
//! addresses and IOMMU groups collide with the platform's and other profiles'.
//!
//! A profile never changes or deletes files outside `sys/`, `dev/`, the simulator's own
//! `run/vgpud-simulator/` (its lock, and the journal of a write it finishes first) and, for the
//! NVIDIA SR-IOV profiles, the placeholder `usr/lib/nvidia/sriov-manage`: writing it
//! again into a root whose `sys`, `dev` and `run` were deleted (a simulated reboot) gives a
//! fresh `sys` tree and keeps `etc/` and `var/lib/` as they were.

mod amd;
mod intel;
mod mtty;
mod nvidia;
mod passthrough;
mod platform;
mod qemu_vm;
pub(crate) mod tree;

use std::path::Path;

use super::SimError;

pub(crate) use nvidia::board_types as nvidia_board_types;

/// The profiles: name and one-line description.
const PROFILES: &[(&str, &str)] = &[
    (
        "nvidia-turing",
        "two Quadro RTX 6000 (24 GB, Turing) legacy-mdev GPUs on NUMA nodes 0 and 1",
    ),
    (
        "intel-gvtg",
        "an Intel UHD Graphics 630 iGPU at 0000:00:02.0 with GVT-g and a 256 MB aperture",
    ),
    (
        "mtty",
        "the kernel's mtty sample mdev parent (24 serial ports)",
    ),
    ("mixed", "nvidia-turing, intel-gvtg and mtty on one host"),
    (
        "large",
        "sixteen Quadro RTX 8000 (48 GB, Turing; up to 512 vGPUs) behind four PCIe switches on two NUMA nodes",
    ),
    (
        "nvidia-l40s",
        "two NVIDIA L40S (48 GB, Ada; SR-IOV, vendor-specific VFIO, VFs off) on NUMA nodes 0 and 1",
    ),
    (
        "nvidia-a40",
        "one NVIDIA A40 (48 GB, Ampere; SR-IOV with an mdev parent per VF, VFs off)",
    ),
    (
        "amd-mxgpu",
        "one AMD Instinct MI300X under GIM with its 8 SR-IOV VFs unbound",
    ),
    (
        "passthrough",
        "three RTX A4000 for whole-GPU passthrough: a clean one, the console, one sharing a group with a NIC",
    ),
    (
        "intel-sriov",
        "an Intel UHD Graphics 770 at 0000:00:02.0 with 7 SR-IOV VFs through sriov_numvfs (not with intel-gvtg)",
    ),
    (
        "nvidia-h200",
        "two NVIDIA H200 SXM (141 GB, Hopper; SR-IOV, vendor-specific VFIO, MIG-capable, VFs off) on NUMA nodes 0 and 1",
    ),
    (
        "nvidia-h100",
        "one NVIDIA H100 PCIe (80 GB, Hopper; SR-IOV, vendor-specific VFIO, MIG-capable, VFs off)",
    ),
    (
        "nvidia-a100",
        "one NVIDIA A100 PCIe 80GB (Ampere, MIG; SR-IOV with an mdev parent per VF, VFs off)",
    ),
    (
        "qemu-vm",
        "the real-kernel suite's q35 VM: mtty, two std VGAs on bochs-drm (the console's, one with an e1000e function), a qxl sharing a group with edu",
    ),
];

const NAMES: &[&str] = &[
    "nvidia-turing",
    "intel-gvtg",
    "mtty",
    "mixed",
    "large",
    "nvidia-l40s",
    "nvidia-a40",
    "amd-mxgpu",
    "passthrough",
    "intel-sriov",
    "nvidia-h200",
    "nvidia-h100",
    "nvidia-a100",
    "qemu-vm",
];

/// The profiles there are, with a one-line description each.
pub fn profiles() -> &'static [(&'static str, &'static str)] {
    PROFILES
}

/// The names of the profiles there are.
pub fn profile_names() -> &'static [&'static str] {
    NAMES
}

/// Writes profile `name` into `root` (created if missing), next to whatever is there.
pub fn write_profile(name: &str, root: &Path) -> Result<(), SimError> {
    if !NAMES.contains(&name) {
        return Err(SimError::UnknownProfile {
            name: name.to_string(),
            known: NAMES.join(", "),
        });
    }
    let tree = tree::Tree::new(root)?;
    // Serialize with simulated writes on the same tree (another process may be running on it).
    let _guard = super::lock_tree(tree.root()).map_err(|source| SimError::Io {
        path: tree.root().to_path_buf(),
        source,
    })?;
    if name == "qemu-vm" {
        return qemu_vm::write(&tree);
    }
    platform::write(&tree)?;
    match name {
        "nvidia-turing" => nvidia::turing(&tree),
        "intel-gvtg" => intel::gvtg(&tree),
        "mtty" => mtty::write(&tree),
        "mixed" => {
            nvidia::turing(&tree)?;
            intel::gvtg(&tree)?;
            mtty::write(&tree)
        }
        "large" => nvidia::large(&tree),
        "nvidia-l40s" => nvidia::l40s(&tree),
        "nvidia-a40" => nvidia::a40(&tree),
        "amd-mxgpu" => amd::mxgpu(&tree),
        "intel-sriov" => intel::sriov(&tree),
        "nvidia-h200" => nvidia::h200(&tree),
        "nvidia-h100" => nvidia::h100(&tree),
        "nvidia-a100" => nvidia::a100(&tree),
        _ => passthrough::write(&tree),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_descriptions_agree() {
        let from_table: Vec<&str> = profiles().iter().map(|(n, _)| *n).collect();
        assert_eq!(from_table, profile_names());
    }

    #[test]
    fn unknown_profiles_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = write_profile("nope", dir.path()).expect_err("unknown");
        assert!(err.to_string().contains("nvidia-turing"));
    }
}
