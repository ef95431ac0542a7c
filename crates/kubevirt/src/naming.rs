//! Resource names, the environment variables virt-launcher reads, and on-demand device IDs.

/// Longest device ID the device plugin API allows (`Device.ID`: "Max length of this field is
/// 63 characters", deviceplugin/v1beta1/api.proto).
pub const MAX_ID_LEN: usize = 63;

/// The prefix of the variable naming a resource's mdev UUIDs: KubeVirt's
/// `MDEV_RESOURCE_PREFIX` (pkg/virt-launcher/virtwrap/manager.go,
/// pkg/virt-launcher/virtwrap/device/hostdevice/generic/addresspool.go).
pub const MDEV_PREFIX: &str = "MDEV_PCI_RESOURCE";
/// The prefix of the variable naming a resource's PCI addresses: KubeVirt's
/// `PCI_RESOURCE_PREFIX` (same files).
pub const PCI_PREFIX: &str = "PCI_RESOURCE";

/// The resource name of a vgpud type name: `prefix` and the name with spaces as `_`
/// (`GRID RTX6000-4Q` → `nvidia.com/GRID_RTX6000-4Q`), as KubeVirt's examples name vGPUs.
pub fn resource_name(prefix: &str, type_name: &str) -> String {
    format!("{prefix}{}", type_name.replace(' ', "_"))
}

/// The variable virt-launcher reads for a resource, as KubeVirt's `ResourceNameToEnvVar`
/// (kubevirt/kubevirt pkg/util/util.go) makes it:
///
/// ```go
/// func ResourceNameToEnvVar(prefix string, resourceName string) string {
///     varName := strings.ToUpper(resourceName)
///     varName = strings.Replace(varName, "/", "_", -1)
///     varName = strings.Replace(varName, ".", "_", -1)
///     return fmt.Sprintf("%s_%s", prefix, varName)
/// }
/// ```
///
/// Go's `strings.ToUpper` maps Unicode; resource names are ASCII (Kubernetes' qualified
/// names), and this does the same for them.
pub fn env_var(prefix: &str, resource: &str) -> String {
    format!(
        "{prefix}_{}",
        resource.to_uppercase().replace(['/', '.'], "_")
    )
}

/// The value virt-launcher splits: addresses joined with `,` (KubeVirt's
/// `hostdevice.AddressPool.load` trims one trailing `,` and splits on `,`,
/// pkg/virt-launcher/virtwrap/device/hostdevice/addresspool.go).
pub fn env_value<'a>(addresses: impl IntoIterator<Item = &'a str>) -> String {
    addresses.into_iter().collect::<Vec<_>>().join(",")
}

/// The namespace of the UUIDs of devices made on demand (uuid v5 of `<resource>/<n>`); itself
/// uuid5(URL, "https://github.com/vgpud/kubevirt").
pub const UUID_NAMESPACE: uuid::Uuid = uuid::uuid!("b68f1073-fe0a-51a5-8b6a-0aa4eb3cf56d");

/// The UUID of on-demand device `n` of `resource`: the same on every start, so a device made
/// before a restart keeps its ID.
pub fn on_demand_uuid(resource: &str, n: u32) -> String {
    uuid::Uuid::new_v5(&UUID_NAMESPACE, format!("{resource}/{n}").as_bytes()).to_string()
}

/// The device ID of on-demand slot `n` of a type: `<type id>-<n>` (`nvidia-259-3`).
pub fn on_demand_id(type_id: &str, n: u32) -> String {
    format!("{type_id}-{n}")
}

/// The slot of an on-demand device ID of `type_id`, if it is one below `max`.
pub fn on_demand_slot(type_id: &str, id: &str, max: u32) -> Option<u32> {
    let n: u32 = id.strip_prefix(type_id)?.strip_prefix('-')?.parse().ok()?;
    // "nvidia-259-03" parses as 3 but is not the ID of slot 3.
    (n < max && on_demand_id(type_id, n) == id).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_kubevirt() {
        assert_eq!(
            resource_name("nvidia.com/", "GRID RTX6000-4Q"),
            "nvidia.com/GRID_RTX6000-4Q"
        );
        // KubeVirt's own example: nvidia.com/GRID_T4-1Q is MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_T4-1Q.
        assert_eq!(
            env_var(MDEV_PREFIX, "nvidia.com/GRID_T4-1Q"),
            "MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_T4-1Q"
        );
        assert_eq!(
            env_var(PCI_PREFIX, "nvidia.com/GA102GL_A10"),
            "PCI_RESOURCE_NVIDIA_COM_GA102GL_A10"
        );
        assert_eq!(env_value(["a", "b"]), "a,b");
    }

    #[test]
    fn slots_round_trip() {
        assert_eq!(on_demand_slot("nvidia-259", "nvidia-259-3", 64), Some(3));
        assert_eq!(on_demand_slot("nvidia-259", "nvidia-259-03", 64), None);
        assert_eq!(on_demand_slot("nvidia-259", "nvidia-259-64", 64), None);
        assert_eq!(on_demand_slot("nvidia-259", "nvidia-2590-1", 64), None);
        assert_ne!(on_demand_uuid("r", 1), on_demand_uuid("r", 2));
        assert_eq!(on_demand_uuid("r", 1), on_demand_uuid("r", 1));
    }
}
