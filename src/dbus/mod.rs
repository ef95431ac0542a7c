//! The `org.vgpud1` D-Bus adapter: a thin layer over the [`Engine`]. It exports one object per
//! GPU and per device, turns engine errors into named bus errors in one place
//! ([`error::Error`]), and emits signals and property changes. No logic lives here.

pub mod client;
pub mod error;
mod manager;
mod objects;
pub mod options;
pub mod paths;

use std::sync::Arc;

use zbus::object_server::SignalEmitter;
use zbus::{Connection, ObjectServer, OwnedObjectPath};

use crate::engine::{DeviceChanges, DeviceInfo, Engine};
use crate::libvirt::LibvirtOps;
pub use manager::Manager;
pub use objects::{DeviceObject, GpuObject};

/// The well-known bus name.
pub const BUS_NAME: &str = "org.vgpud1";

/// Exports the manager, the ObjectManager and every GPU and device object on `conn`. Call it
/// before requesting the bus name, so clients never see a half-populated tree.
pub async fn serve(
    conn: &Connection,
    engine: Arc<Engine>,
    libvirt: Arc<dyn LibvirtOps>,
) -> zbus::Result<()> {
    let server = conn.object_server();
    server
        .at(
            paths::ROOT,
            Manager {
                engine: engine.clone(),
                libvirt,
            },
        )
        .await?;
    for gpu in engine.list_gpus() {
        server
            .at(
                paths::gpu_path(&gpu.address),
                GpuObject {
                    engine: engine.clone(),
                    address: gpu.address.clone(),
                },
            )
            .await?;
    }
    for dev in engine.list_devices() {
        server
            .at(
                paths::device_path(&dev.uuid),
                DeviceObject {
                    engine: engine.clone(),
                    uuid: dev.uuid.clone(),
                },
            )
            .await?;
    }
    server.at(paths::ROOT, zbus::fdo::ObjectManager).await?;
    Ok(())
}

/// Exports a new device's object and tells its GPU's watchers.
async fn export_device(
    server: &ObjectServer,
    engine: &Arc<Engine>,
    info: &DeviceInfo,
) -> zbus::Result<OwnedObjectPath> {
    let path = paths::device_path(&info.uuid);
    server
        .at(
            &path,
            DeviceObject {
                engine: engine.clone(),
                uuid: info.uuid.clone(),
            },
        )
        .await?;
    gpu_devices_changed(server, &engine.gpu_of_parent(&info.parent)).await;
    Ok(path)
}

/// Removes a device's object and tells its GPU's watchers.
async fn unexport_device(
    server: &ObjectServer,
    info: &DeviceInfo,
) -> zbus::Result<OwnedObjectPath> {
    let path = paths::device_path(&info.uuid);
    server.remove::<DeviceObject, _>(&path).await?;
    gpu_devices_changed(server, &info.parent).await;
    Ok(path)
}

/// Emits PropertiesChanged for a GPU's `Devices`.
async fn gpu_devices_changed(server: &ObjectServer, parent: &str) {
    let path = paths::gpu_path(parent);
    if let Ok(iface) = server.interface::<_, GpuObject>(&path).await {
        let emitter = iface.signal_emitter().clone();
        if let Err(e) = iface.get().await.devices_changed(&emitter).await {
            tracing::warn!(%parent, error = %e, "could not emit PropertiesChanged");
        }
    }
}

/// Emits PropertiesChanged for a GPU's SR-IOV properties and what follows from them.
async fn gpu_sriov_changed(server: &ObjectServer, address: &str) {
    let path = paths::gpu_path(address);
    let Ok(iface) = server.interface::<_, GpuObject>(&path).await else {
        return;
    };
    let emitter = iface.signal_emitter().clone();
    let obj = iface.get().await;
    let results = [
        obj.num_vfs_changed(&emitter).await,
        obj.heterogeneous_mode_changed(&emitter).await,
        obj.vfs_changed(&emitter).await,
        obj.sharing_modes_changed(&emitter).await,
        obj.types_changed(&emitter).await,
    ];
    if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
        tracing::warn!(%address, error = %e, "could not emit PropertiesChanged");
    }
}

/// Emits PropertiesChanged for every changeable property of a device.
async fn device_changed(server: &ObjectServer, uuid: &str) {
    let path = paths::device_path(uuid);
    let Ok(iface) = server.interface::<_, DeviceObject>(&path).await else {
        return;
    };
    let emitter = iface.signal_emitter().clone();
    let obj = iface.get().await;
    let results = [
        obj.active_changed(&emitter).await,
        obj.persistent_changed(&emitter).await,
        obj.autostart_changed(&emitter).await,
        obj.owner_changed(&emitter).await,
        obj.iommu_group_changed(&emitter).await,
        obj.attributes_changed(&emitter).await,
        obj.address_changed(&emitter).await,
    ];
    if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
        tracing::warn!(%uuid, error = %e, "could not emit PropertiesChanged");
    }
}

/// Publishes what changed: GPU and device objects come and go, properties change, and the
/// manager's signals tell what happened. A failure on one item is logged and the others are
/// still published.
pub async fn publish(conn: &Connection, engine: &Arc<Engine>, changes: DeviceChanges) {
    let server = conn.object_server();
    let emitter = match SignalEmitter::new(conn, paths::ROOT) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(error = %e, "cannot emit signals");
            return;
        }
    };
    let log = |what: &str, r: zbus::Result<()>| {
        if let Err(e) = r {
            tracing::warn!(error = %e, "could not publish {what}");
        }
    };
    for address in &changes.gpus_added {
        let gpu = GpuObject {
            engine: engine.clone(),
            address: address.clone(),
        };
        log(
            "a new GPU",
            server.at(paths::gpu_path(address), gpu).await.map(|_| ()),
        );
    }
    for info in &changes.added {
        let r = async {
            let path = export_device(server, engine, info).await?;
            Manager::device_created(&emitter, &info.uuid, path.as_ref()).await
        };
        log("a new device", r.await);
    }
    for info in &changes.removed {
        let r = async {
            let path = unexport_device(server, info).await?;
            Manager::device_removed(&emitter, &info.uuid, path.as_ref()).await
        };
        log("a removed device", r.await);
    }
    for info in &changes.updated {
        device_changed(server, &info.uuid).await;
        gpu_devices_changed(server, &info.parent).await;
    }
    for drift in &changes.drift {
        tracing::info!(uuid = %drift.uuid, event = drift.event, "{}", drift.detail);
        log(
            "drift",
            Manager::device_drift(&emitter, &drift.uuid, drift.event, &drift.detail).await,
        );
    }
    for address in &changes.gpus_removed {
        log(
            "a removed GPU",
            server
                .remove::<GpuObject, _>(paths::gpu_path(address))
                .await
                .map(|_| ()),
        );
    }
}
