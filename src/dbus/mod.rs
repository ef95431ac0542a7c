//! The `org.vgpud1` D-Bus adapter: a thin layer over the [`Engine`]. It exports one object per
//! GPU and per device, turns engine errors into named bus errors in one place
//! ([`error::Error`]), and publishes the engine's event stream as signals and property
//! changes ([`Publisher`]). No logic lives here.

pub mod access;
pub mod error;
pub mod layouts;
pub mod limits;
mod manager;
pub mod nvidia;
mod objects;
pub mod options;
pub mod paths;
mod publish;

use std::sync::Arc;

use zbus::Connection;

use crate::engine::Engine;
use crate::libvirt::LibvirtOps;
pub use manager::Manager;
pub use objects::{DeviceObject, GpuObject};
pub use publish::Publisher;

/// The well-known bus name.
pub const BUS_NAME: &str = "org.vgpud1";

/// Exports the manager, the NVIDIA control object, the ObjectManager and every GPU and
/// device object on `conn`, and
/// starts publishing the engine's events. Call it before requesting the bus name, so
/// clients never see a half-populated tree. The publisher's task ends with the runtime.
pub async fn serve(
    conn: &Connection,
    engine: Arc<Engine>,
    libvirt: Arc<dyn LibvirtOps>,
) -> zbus::Result<Arc<Publisher>> {
    let publisher = Publisher::new(conn.clone(), engine.clone());
    let server = conn.object_server();
    let access = Arc::new(access::Access::new(conn.clone()));
    // Property reads and GetManagedObjects show owners: they pass the methods' check.
    server.set_call_guard(access::call_guard(access.clone()));
    server.set_dispatch_limit(access::dispatch_limit(access.clone()));
    let manager = |libvirt| Manager {
        engine: engine.clone(),
        libvirt,
        publisher: publisher.clone(),
        access: access.clone(),
    };
    server
        .at(nvidia::PATH, nvidia::NvidiaObject(manager(libvirt.clone())))
        .await?;
    server
        .at(
            layouts::PATH,
            layouts::LayoutsObject(manager(libvirt.clone())),
        )
        .await?;
    server.at(paths::ROOT, manager(libvirt)).await?;
    publisher.export_all().await?;
    server.at(paths::ROOT, zbus::fdo::ObjectManager).await?;
    tokio::spawn(publisher.clone().run());
    Ok(publisher)
}
