//! Publishes the core's event stream on the bus: objects come and go (the ObjectManager's
//! InterfacesAdded and InterfacesRemoved follow), the manager's signals tell what happened,
//! and each object that changed gets one PropertiesChanged with only the properties whose
//! values differ from what was last published.
//!
//! A method that changed state calls [`Publisher::catch_up`] before it replies, so a client
//! that gets the reply finds the objects and has been sent the signals; everything else
//! (changes found by a look at the host) is published by [`Publisher::run`] as it happens.
//! Events drained together are coalesced: an object gets at most one PropertiesChanged per
//! batch.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use zbus::names::InterfaceName;
use zbus::object_server::{Interface, SignalEmitter};
use zbus::{Connection, ObjectServer, OwnedObjectPath, OwnedVariant, Variant};

use super::objects::{DeviceObject, GpuObject};
use super::{paths, Manager};
use crate::engine::{Engine, Event, Subscription};

/// Property values as last published, per object.
type Published = HashMap<OwnedObjectPath, HashMap<String, OwnedVariant>>;

/// The bus side of the event stream.
pub struct Publisher {
    conn: Connection,
    engine: Arc<Engine>,
    events: Subscription,
    woken: Arc<tokio::sync::Notify>,
    /// Held while a batch is published: batches go out one at a time, in order.
    published: tokio::sync::Mutex<Published>,
}

/// An object whose properties are compared after a batch.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Dirty {
    Gpu(String),
    Device(String),
}

impl Publisher {
    /// Subscribes to the engine's events. Call it before exporting the objects that exist,
    /// so that nothing that happens meanwhile is missed.
    pub fn new(conn: Connection, engine: Arc<Engine>) -> Arc<Self> {
        let woken = Arc::new(tokio::sync::Notify::new());
        let wake = woken.clone();
        let events = engine.events().subscribe(move || wake.notify_one());
        Arc::new(Publisher {
            conn,
            engine,
            events,
            woken,
            published: tokio::sync::Mutex::new(HashMap::new()),
        })
    }

    /// Exports every GPU and device that exists now and remembers their properties.
    pub async fn export_all(&self) -> zbus::Result<()> {
        let mut published = self.published.lock().await;
        for gpu in self.engine.list_gpus() {
            self.add_gpu(&mut published, &gpu.address).await?;
        }
        for dev in self.engine.list_devices() {
            self.add_device(&mut published, &dev.uuid).await?;
        }
        Ok(())
    }

    /// Publishes events as they come, until the task is dropped.
    pub async fn run(self: Arc<Self>) {
        loop {
            self.woken.notified().await;
            self.catch_up().await;
        }
    }

    /// Publishes every event sent so far. Failures are logged; the next batch goes on.
    pub async fn catch_up(&self) {
        let mut published = self.published.lock().await;
        let events = self.events.drain();
        if events.is_empty() {
            return;
        }
        let server = self.conn.object_server();
        let mut dirty: BTreeSet<Dirty> = BTreeSet::new();
        for record in events {
            let event = record.event;
            if let Err(e) = self.publish(&mut published, &mut dirty, &event).await {
                tracing::warn!(error = %e, ?event, "could not publish an event");
            }
        }
        for object in dirty {
            let r = match &object {
                Dirty::Gpu(a) => {
                    self.changed::<GpuObject>(server, &mut published, paths::gpu_path(a))
                        .await
                }
                Dirty::Device(u) => {
                    self.changed::<DeviceObject>(server, &mut published, paths::device_path(u))
                        .await
                }
            };
            if let Err(e) = r {
                tracing::warn!(error = %e, "could not emit PropertiesChanged");
            }
        }
    }

    async fn publish(
        &self,
        published: &mut Published,
        dirty: &mut BTreeSet<Dirty>,
        event: &Event,
    ) -> zbus::Result<()> {
        let emitter = SignalEmitter::new(&self.conn, paths::ROOT)?;
        match event {
            Event::DeviceAdded { device, .. } => {
                dirty.insert(Dirty::Gpu(self.engine.gpu_of_parent(&device.parent)));
                let path = paths::device_path(&device.uuid);
                if self.add_device(published, &device.uuid).await? {
                    Manager::device_created(&emitter, &device.uuid, path.as_ref()).await?;
                } else {
                    dirty.insert(Dirty::Device(device.uuid.clone()));
                }
            }
            Event::DeviceChanged { before, after } => {
                dirty.insert(Dirty::Device(after.uuid.clone()));
                dirty.insert(Dirty::Gpu(self.engine.gpu_of_parent(&after.parent)));
                if before.parent != after.parent {
                    dirty.insert(Dirty::Gpu(self.engine.gpu_of_parent(&before.parent)));
                }
            }
            Event::DeviceRemoved { device } => {
                dirty.insert(Dirty::Gpu(self.engine.gpu_of_parent(&device.parent)));
                dirty.remove(&Dirty::Device(device.uuid.clone()));
                let path = paths::device_path(&device.uuid);
                published.remove(&path);
                let server = self.conn.object_server();
                match server.remove::<DeviceObject, _>(&path).await {
                    Ok(_) => Manager::device_removed(&emitter, &device.uuid, path.as_ref()).await?,
                    // Never exported (made and gone within one batch's events).
                    Err(zbus::Error::InterfaceNotFound) => {}
                    Err(e) => return Err(e),
                }
            }
            Event::Drift(drift) => {
                tracing::info!(uuid = %drift.uuid, event = drift.event, "{}", drift.detail);
                Manager::device_drift(&emitter, &drift.uuid, drift.event, &drift.detail).await?;
            }
            Event::DeviceReclaimed { device, reason } => {
                Manager::device_reclaimed(&emitter, &device.uuid, reason).await?;
            }
            Event::GpuDrift { gpu, event, detail } => {
                tracing::info!(%gpu, event, "{detail}");
                Manager::gpu_drift(&emitter, gpu, event, detail).await?;
            }
            Event::GpuAdded { gpu } => {
                if gpu.is_physical() && !self.add_gpu(published, &gpu.address).await? {
                    dirty.insert(Dirty::Gpu(gpu.address.clone()));
                }
            }
            Event::GpuChanged { after, .. } => {
                dirty.insert(Dirty::Gpu(self.engine.gpu_of_parent(&after.address)));
            }
            Event::GpuModeChanged { gpu, .. } => {
                dirty.insert(Dirty::Gpu(gpu.clone()));
            }
            Event::GpuRemoved { address } => {
                dirty.remove(&Dirty::Gpu(address.clone()));
                let path = paths::gpu_path(address);
                if published.remove(&path).is_some() {
                    self.conn
                        .object_server()
                        .remove::<GpuObject, _>(&path)
                        .await?;
                }
            }
            // No property tells capacity: clients ask GetCapacity or ListTypes.
            Event::CapacityChanged { .. } => {}
        }
        Ok(())
    }

    /// Exports a GPU's object; `false` if it was exported already.
    async fn add_gpu(&self, published: &mut Published, address: &str) -> zbus::Result<bool> {
        let path = paths::gpu_path(address);
        let object = GpuObject {
            engine: self.engine.clone(),
            address: address.to_string(),
        };
        self.add(published, path, object).await
    }

    /// Exports a device's object; `false` if it was exported already.
    async fn add_device(&self, published: &mut Published, uuid: &str) -> zbus::Result<bool> {
        let path = paths::device_path(uuid);
        let object = DeviceObject {
            engine: self.engine.clone(),
            uuid: uuid.to_string(),
        };
        self.add(published, path, object).await
    }

    async fn add<I: Interface>(
        &self,
        published: &mut Published,
        path: OwnedObjectPath,
        object: I,
    ) -> zbus::Result<bool> {
        let server = self.conn.object_server();
        let added = server.at(&path, object).await?.is_none();
        if added {
            let now = properties::<I>(server, &self.conn, &path).await?;
            published.insert(path, now);
        }
        Ok(added)
    }

    /// Emits one PropertiesChanged for an object with the properties that differ from what
    /// was last published, if any.
    async fn changed<I: Interface>(
        &self,
        server: &ObjectServer,
        published: &mut Published,
        path: OwnedObjectPath,
    ) -> zbus::Result<()> {
        let Some(before) = published.get(&path) else {
            return Ok(());
        };
        let now = properties::<I>(server, &self.conn, &path).await?;
        let changed: HashMap<&str, Variant<'_>> = now
            .iter()
            .filter(|(name, value)| before.get(*name) != Some(*value))
            .map(|(name, value)| Ok((name.as_str(), Variant::try_from(value)?)))
            .collect::<zbus::Result<_>>()?;
        if !changed.is_empty() {
            let emitter = SignalEmitter::new(&self.conn, &path)?;
            let iface: InterfaceName<'_> = I::name();
            zbus::fdo::Properties::properties_changed(&emitter, iface, changed, (&[]).into())
                .await?;
        }
        published.insert(path, now);
        Ok(())
    }
}

/// Every property of an exported object, as `GetAll` answers.
async fn properties<I: Interface>(
    server: &ObjectServer,
    conn: &Connection,
    path: &OwnedObjectPath,
) -> zbus::Result<HashMap<String, OwnedVariant>> {
    let iface = server.interface::<_, I>(path).await?;
    let emitter = iface.signal_emitter().clone();
    let object = iface.get().await;
    let all = Interface::get_all(&*object, server, conn, None, &emitter)
        .await
        .map_err(zbus::Error::from)?;
    Ok(all)
}
