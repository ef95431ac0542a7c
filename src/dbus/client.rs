//! A client of `org.vgpud1` for vgpud's own tools (the libvirt hook, the benchmark).

use std::collections::HashMap;

use zbus::{OwnedObjectPath, Variant};

/// `org.vgpud1.Manager`, the calls vgpud's own tools make.
#[zbus::proxy(
    interface = "org.vgpud1.Manager",
    default_service = "org.vgpud1",
    default_path = "/org/vgpud1"
)]
pub trait Manager {
    /// CreateDevice(s type, a{sv} options) → (s uuid, o path)
    fn create_device(
        &self,
        r#type: &str,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<(String, OwnedObjectPath)>;
    /// StartDevice(s uuid, a{sv} options)
    fn start_device(&self, uuid: &str, options: HashMap<&str, Variant<'_>>) -> zbus::Result<()>;
    /// RemoveDevice(s uuid, a{sv} options)
    fn remove_device(&self, uuid: &str, options: HashMap<&str, Variant<'_>>) -> zbus::Result<()>;
}
