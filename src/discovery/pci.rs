//! PCI functions as passthrough sees them: driver, IOMMU group and its members, bridges, and
//! the boot VGA flag (hardware.md §5.10). Whether the host's console draws on a function is
//! `discovery::console`'s decision.

use super::sriov::pci_dir;
use crate::host::{parse_number, Host, HostResult};

/// A PCI function and what decides whether it can be handed to a guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciFunction {
    /// `0000:41:00.0`.
    pub address: String,
    /// PCI vendor id.
    pub vendor_id: u16,
    /// PCI device id.
    pub device_id: u16,
    /// PCI class code.
    pub class: u32,
    /// Bound driver, `None` when unbound.
    pub driver: Option<String>,
    /// `driver_override`, `None` when unset (`(null)`).
    pub driver_override: Option<String>,
    /// IOMMU group number.
    pub iommu_group: Option<u32>,
    /// A bridge (class 0x0604 or a `pci_bus/` below it): never moved to vfio-pci.
    pub is_bridge: bool,
    /// The firmware's boot display (`boot_vga` = 1).
    pub boot_vga: bool,
    /// For an SR-IOV virtual function, its physical function.
    pub physical_function: Option<String>,
}

impl PciFunction {
    /// `0000:41:00` of `0000:41:00.1`: the device all functions of a card share.
    pub fn slot(&self) -> &str {
        slot_of(&self.address)
    }
}

/// `0000:41:00` of `0000:41:00.1`.
pub fn slot_of(address: &str) -> &str {
    address.rsplit_once('.').map_or(address, |(s, _)| s)
}

/// Reads a PCI function, `None` if it does not exist.
pub fn read_function(host: &Host, address: &str) -> HostResult<Option<PciFunction>> {
    let dir = pci_dir(host, address);
    if !dir.exists() {
        return Ok(None);
    }
    let number = |name: &str| -> HostResult<i64> {
        Ok(host
            .read_attr_opt(&dir.join(name))?
            .and_then(|s| parse_number(s.trim()))
            .unwrap_or(0))
    };
    let class = number("class")? as u32;
    let driver_override = host
        .read_attr_opt(&dir.join("driver_override"))?
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && s != "(null)");
    Ok(Some(PciFunction {
        address: address.to_string(),
        vendor_id: number("vendor")? as u16,
        device_id: number("device")? as u16,
        class,
        driver: host.link_name(&dir.join("driver"))?,
        driver_override,
        iommu_group: host
            .link_name(&dir.join("iommu_group"))?
            .and_then(|g| g.parse().ok()),
        is_bridge: class >> 8 == 0x0604 || dir.join("pci_bus").is_dir(),
        boot_vga: number("boot_vga")? == 1,
        physical_function: host.link_name(&dir.join("physfn"))?,
    }))
}

/// The devices of an IOMMU group, by name, sorted.
pub fn group_members(host: &Host, group: u32) -> HostResult<Vec<String>> {
    host.list_dir(
        &host
            .sys("kernel/iommu_groups")
            .join(group.to_string())
            .join("devices"),
    )
}

/// Whether the host has an IOMMU (`/sys/class/iommu` is not empty).
pub fn iommu_present(host: &Host) -> HostResult<bool> {
    Ok(!host.list_dir(&host.sys("class/iommu"))?.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_drop_the_function() {
        assert_eq!(slot_of("0000:41:00.1"), "0000:41:00");
        assert_eq!(slot_of("mtty"), "mtty");
    }

    #[test]
    fn functions_read_driver_group_and_bridges() {
        let dir = tempfile::tempdir().expect("tempdir");
        vgpud_sim::write_profile("nvidia-turing", dir.path()).expect("profile");
        let host = Host::new(dir.path());
        let gpu = read_function(&host, "0000:3b:00.0")
            .expect("read")
            .expect("exists");
        assert_eq!(gpu.driver.as_deref(), Some("nvidia"));
        assert_eq!(gpu.iommu_group, Some(11));
        assert!(!gpu.is_bridge);
        assert_eq!(gpu.driver_override, None);
        let port = read_function(&host, "0000:3a:00.0")
            .expect("read")
            .expect("exists");
        assert!(port.is_bridge);
        assert_eq!(
            group_members(&host, 11).expect("group"),
            vec!["0000:3b:00.0".to_string(), "0000:3b:00.1".to_string()]
        );
        assert!(iommu_present(&host).expect("iommu"));
        assert!(read_function(&host, "0000:99:00.0")
            .expect("read")
            .is_none());
    }
}
