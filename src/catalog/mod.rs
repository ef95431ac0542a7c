//! What vgpud knows about hardware that sysfs does not say: marketing names of PCI devices and
//! the NVIDIA vGPU type tables of hardware.md §5.

/// The marketing name of a PCI device, if vgpud knows it.
pub fn pci_model_name(_vendor: u16, _device: u16) -> Option<&'static str> {
    None
}
