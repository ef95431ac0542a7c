//! `mtty`: the kernel sample (samples/vfio-mdev/mtty.c). Its parent is a class device,
//! `sys/devices/virtual/mtty/mtty` (class `mtty`, no driver, no IOMMU group, no device
//! number), offering
//! `mtty-1` "Single port serial" and `mtty-2` "Dual port serial" (no `description`), which
//! share 24 ports.

use super::tree::{write_mdev_parent, Tree, TypeSpec};
use crate::SimError;

/// Writes `mtty`.
pub(super) fn write(tree: &Tree) -> Result<(), SimError> {
    let rel = "sys/devices/virtual/mtty/mtty";
    tree.dir(rel)?;
    // mtty registers its char region and cdev but never gives the device its devt: no `dev`
    // attribute, nothing in `uevent` (as the real 6.1 kernel shows).
    tree.file(&format!("{rel}/uevent"), "", 0o644)?;
    tree.dir(&format!("{rel}/power"))?;
    tree.link(&format!("{rel}/subsystem"), "sys/class/mtty")?;
    tree.link("sys/class/mtty/mtty", rel)?;
    let types = [
        ("mtty-1", "Single port serial"),
        ("mtty-2", "Dual port serial"),
    ]
    .into_iter()
    .map(|(id, name)| TypeSpec {
        id: id.to_string(),
        name: name.to_string(),
        description: None,
    })
    .collect::<Vec<_>>();
    write_mdev_parent(tree, rel, "mtty", "mtty", &types)
}
