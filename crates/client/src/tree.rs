//! vgpud's objects read whole: every GPU and device in one
//! `org.freedesktop.DBus.ObjectManager.GetManagedObjects` on `/org/vgpud1` ([`Tree`]), and one
//! object's properties in one `org.freedesktop.DBus.Properties.GetAll`, never one call per
//! property. vgpud has served the ObjectManager at `/org/vgpud1` since its first release, so
//! there is no per-object fallback.

use std::collections::HashMap;

use zbus::names::InterfaceName;
use zbus::{Connection, OwnedObjectPath, OwnedVariant};

use crate::model::{self, DeviceDetails, GpuDetails, GpuInstance};
use crate::{paths, Result, BUS_NAME};

/// The interface of a GPU object.
const GPU: &str = "org.vgpud1.Gpu";
/// The interface of a device object.
const DEVICE: &str = "org.vgpud1.Device";

/// One object's properties of one interface, as `GetAll` and `GetManagedObjects` answer them.
type Props = HashMap<String, OwnedVariant>;

/// Every GPU and device object vgpud serves, read in one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    /// The GPUs, by address (the order of `ListGpus`).
    pub gpus: Vec<GpuDetails>,
    /// The devices, by UUID (the order of `ListDevices`).
    pub devices: Vec<DeviceDetails>,
}

/// The whole tree: one `GetManagedObjects` on `/org/vgpud1`.
pub(crate) async fn read(conn: &Connection) -> Result<Tree> {
    let om = zbus::fdo::ObjectManagerProxy::builder(conn)
        .destination(BUS_NAME)
        .path(paths::ROOT)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?;
    let objects = om.get_managed_objects().await.map_err(zbus::Error::from)?;
    let mut gpus = Vec::new();
    let mut devices = Vec::new();
    for (_path, interfaces) in objects {
        for (name, props) in interfaces {
            match name.as_str() {
                GPU => gpus.push(gpu_details(props)?),
                DEVICE => devices.push(device_details(props)?),
                _ => {}
            }
        }
    }
    gpus.sort_by(|a: &GpuDetails, b| a.address.cmp(&b.address));
    devices.sort_by(|a: &DeviceDetails, b| a.uuid.cmp(&b.uuid));
    Ok(Tree { gpus, devices })
}

/// One GPU object's properties: one `GetAll`.
pub(crate) async fn gpu(conn: &Connection, address: &str) -> Result<GpuDetails> {
    gpu_details(get_all(conn, paths::gpu_path(address), GPU).await?)
}

/// One device object's properties: one `GetAll`.
pub(crate) async fn device(conn: &Connection, uuid: &str) -> Result<DeviceDetails> {
    device_details(get_all(conn, paths::device_path(uuid), DEVICE).await?)
}

async fn get_all(conn: &Connection, path: OwnedObjectPath, interface: &str) -> Result<Props> {
    let p = zbus::fdo::PropertiesProxy::builder(conn)
        .destination(BUS_NAME)
        .path(path)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?;
    let interface = InterfaceName::try_from(interface)?;
    Ok(p.get_all(interface).await.map_err(zbus::Error::from)?)
}

/// Takes property `name` out of `props` as a `T`; a missing or mistyped one is a bus error
/// that names it, as a property read of the wrong type is.
fn take<T>(props: &mut Props, name: &str) -> Result<T>
where
    T: TryFrom<OwnedVariant>,
    T::Error: Into<zbus::Error>,
{
    let value = props
        .remove(name)
        .ok_or_else(|| zbus::Error::Failure(format!("vgpud's answer has no property {name}")))?;
    T::try_from(value).map_err(|e| {
        let e: zbus::Error = e.into();
        zbus::Error::Failure(format!("property {name}: {e}")).into()
    })
}

fn gpu_details(mut p: Props) -> Result<GpuDetails> {
    let (mig_current, mig_pending) = take::<(bool, bool)>(&mut p, "MigMode")?;
    let devices: Vec<OwnedObjectPath> = take(&mut p, "Devices")?;
    let instances: Vec<crate::proxy::GpuInstanceRow> = take(&mut p, "GpuInstances")?;
    let scheduler: crate::proxy::Dict = take(&mut p, "Scheduler")?;
    Ok(GpuDetails {
        address: take(&mut p, "Address")?,
        model: take(&mut p, "Model")?,
        vendor_id: take(&mut p, "VendorId")?,
        device_id: take(&mut p, "DeviceId")?,
        driver: take(&mut p, "Driver")?,
        iommu_group: take(&mut p, "IommuGroup")?,
        numa_node: take(&mut p, "NumaNode")?,
        sharing_modes: take(&mut p, "SharingModes")?,
        types: take(&mut p, "Types")?,
        devices: devices.iter().map(|d| d.to_string()).collect(),
        total_vfs: take(&mut p, "TotalVfs")?,
        num_vfs: take(&mut p, "NumVfs")?,
        vfs: take(&mut p, "Vfs")?,
        heterogeneous_mode: take(&mut p, "HeterogeneousMode")?,
        mig_current,
        mig_pending,
        gpu_instances: instances.into_iter().map(GpuInstance::from).collect(),
        scheduler: model::dict_to_json(&scheduler),
    })
}

fn device_details(mut p: Props) -> Result<DeviceDetails> {
    let gpu_path: OwnedObjectPath = take(&mut p, "ParentGpu")?;
    let gpu = gpu_path
        .as_str()
        .rsplit('/')
        .next()
        .and_then(paths::unescape_segment)
        .unwrap_or_default();
    Ok(DeviceDetails {
        uuid: take(&mut p, "Uuid")?,
        kind: take(&mut p, "Kind")?,
        parent: take(&mut p, "Parent")?,
        gpu,
        address: take(&mut p, "Address")?,
        functions: take(&mut p, "Functions")?,
        type_id: take(&mut p, "TypeId")?,
        type_name: take(&mut p, "TypeName")?,
        owner: take(&mut p, "Owner")?,
        iommu_group: take(&mut p, "IommuGroup")?,
        attributes: take(&mut p, "Attributes")?,
        active: take(&mut p, "Active")?,
        persistent: take(&mut p, "Persistent")?,
        autostart: take(&mut p, "Autostart")?,
        created: take(&mut p, "Created")?,
    })
}
