//! One private bus, one simulated host and one vgpud on it, with a connection: what most
//! API tests start from.

use super::daemon::{Daemon, Policy, TestBus, TestHost};
use super::proxy::ManagerProxy;

/// A running vgpud on a simulated host, on its own bus.
pub struct Setup {
    /// The private bus.
    pub bus: TestBus,
    /// The simulated host.
    pub host: TestHost,
    /// The daemon.
    pub daemon: Daemon,
    /// A connection to the bus.
    pub conn: zbus::Connection,
}

impl Setup {
    /// Writes `profiles`, starts a bus open to everyone and vgpud on it.
    pub async fn new(profiles: &[&str]) -> Self {
        Self::with_args(profiles, &[]).await
    }

    /// Like [`Setup::new`], with extra vgpud arguments.
    pub async fn with_args(profiles: &[&str], args: &[&str]) -> Self {
        Self::with_env(profiles, &[], args).await
    }

    /// Like [`Setup::with_args`], with extra environment for vgpud.
    pub async fn with_env(profiles: &[&str], env: &[(&str, &str)], args: &[&str]) -> Self {
        let host = TestHost::new(profiles);
        let bus = TestBus::start(Policy::Open);
        let daemon = Daemon::start_with(&bus, &host, env, args).await;
        let conn = bus.connect().await;
        Setup {
            bus,
            host,
            daemon,
            conn,
        }
    }

    /// The manager's proxy.
    pub async fn manager(&self) -> ManagerProxy<'static> {
        ManagerProxy::new(&self.conn).await.expect("manager proxy")
    }

    /// Addresses of the GPUs driven by `driver`.
    pub async fn gpus_with_driver(&self, driver: &str) -> Vec<String> {
        let m = self.manager().await;
        m.list_gpus()
            .await
            .expect("ListGpus")
            .into_iter()
            .filter(|g| g.2 == driver)
            .map(|g| g.0)
            .collect()
    }

    /// Stops vgpud and starts it again on the same bus and host.
    pub async fn restart(&mut self) {
        if self.daemon.is_running() {
            self.daemon.stop();
        }
        self.daemon = Daemon::start(&self.bus, &self.host).await;
    }

    /// Stops vgpud (if it runs) and starts it again with `args` (a plain [`Setup::restart`]
    /// starts it with none).
    pub async fn restart_with_args(&mut self, args: &[&str]) {
        if self.daemon.is_running() {
            self.daemon.stop();
        }
        self.daemon = Daemon::start_with(&self.bus, &self.host, &[], args).await;
    }

    /// `busctl call` on the manager; the JSON reply's `data`, or the error text.
    pub fn busctl_manager(&self, method: &str, args: &[&str]) -> Result<serde_json::Value, String> {
        self.bus
            .busctl_call("/org/vgpud1", "org.vgpud1.Manager", method, args)
            .map(|v| v["data"].clone())
    }

    /// `busctl call … CreateDevice` with string options; the new device's UUID, or the error
    /// text.
    pub fn busctl_create(&self, ty: &str, options: &[(&str, &str)]) -> Result<String, String> {
        let mut args = vec![
            "sa{sv}".to_string(),
            ty.to_string(),
            options.len().to_string(),
        ];
        for (k, v) in options {
            args.extend([k.to_string(), "s".to_string(), v.to_string()]);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.busctl_manager("CreateDevice", &refs)
            .map(|d| d[0].as_str().expect("uuid").to_string())
    }
}

/// The UUIDs of the devices tagged `owner` (a layout pool's spares, for one), sorted.
pub async fn owned_by(c: &vgpud_client::Client, owner: &str) -> Vec<String> {
    let mut v: Vec<String> = c
        .list_devices()
        .await
        .expect("ListDevices")
        .into_iter()
        .filter(|d| d.owner == owner)
        .map(|d| d.uuid)
        .collect();
    v.sort();
    v
}
