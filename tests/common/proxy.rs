//! The proxies of `org.vgpud1` are the client crate's (`vgpud_client`, written from the
//! documented contract, not from the server's code), so the tests check what clients rely
//! on. What stays here is test-only: helpers that panic instead of returning errors, and
//! the exact D-Bus error name and message of a failed call as it came off the wire.

// Not every test binary uses every proxy.
#[allow(unused_imports)]
pub use vgpud_client::proxy::{
    DeviceProxy, GpuProxy, LayoutsProxy, ManagerProxy, MigProfileRow, NvidiaProxy, Opts,
};

/// A Device proxy that never caches, so every read asks the daemon.
pub async fn device_proxy(conn: &zbus::Connection, uuid: &str) -> DeviceProxy<'static> {
    vgpud_client::device_proxy(conn, uuid)
        .await
        .expect("device proxy")
}

/// A GPU's proxy that reads properties afresh on every get.
pub async fn gpu_proxy(conn: &zbus::Connection, address: &str) -> GpuProxy<'static> {
    vgpud_client::gpu_proxy(conn, address)
        .await
        .expect("gpu proxy")
}

/// Boolean options.
pub fn bool_opts<'a>(pairs: &[(&'a str, bool)]) -> Opts<'a> {
    vgpud_client::bool_opts(pairs)
}

/// String options for a call.
pub fn opts<'a>(pairs: &[(&'a str, &'a str)]) -> Opts<'a> {
    vgpud_client::str_opts(pairs)
}

/// The D-Bus error name of a failed call, exactly as sent (not through
/// `vgpud_client::Error`, which folds `org.freedesktop.DBus.Error.InvalidArgs` into
/// `org.vgpud1.Error.InvalidArgument`: the tests check which one the daemon sends).
pub fn error_name(e: &zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(name, _, _) => name.to_string(),
        other => format!("not a method error: {other}"),
    }
}

/// The D-Bus error message of a failed call.
pub fn error_message(e: &zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(_, Some(msg), _) => msg.clone(),
        other => other.to_string(),
    }
}

/// The room `ListTypes` gives for the type whose name ends with `type_name` on GPU `gpu`;
/// panics when the GPU lists no such type.
#[allow(dead_code)]
pub async fn listed_room(m: &ManagerProxy<'_>, gpu: &str, type_name: &str) -> u32 {
    m.list_types()
        .await
        .expect("ListTypes")
        .into_iter()
        .find(|t| t.0 == gpu && t.2.ends_with(type_name))
        .map(|t| t.5)
        .unwrap_or_else(|| panic!("{gpu} lists no {type_name}"))
}
