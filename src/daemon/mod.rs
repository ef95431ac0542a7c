//! The daemon's start and run loop: open the host (replaying what a crash left), restore the
//! persistent devices in boot order, export the objects, take the bus name, tell systemd we
//! are ready, and serve (watching the host) until SIGTERM or SIGINT.

pub mod uevents;
mod watch;
pub mod watchdog;

use std::path::PathBuf;
use std::sync::Arc;

use crate::dbus;
use crate::engine::{Engine, EngineError};
use crate::host::Host;

/// Which bus to serve on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bus {
    /// The system bus (honours `DBUS_SYSTEM_BUS_ADDRESS`).
    System,
    /// The session bus.
    Session,
    /// A bus at this address (`unix:path=/run/…`).
    Address(String),
}

/// How the daemon was asked to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Root every host path is built from.
    pub root: PathBuf,
    /// Apply the kernel's side effects in vgpud (simulated host).
    pub simulate: bool,
    /// The bus to serve on.
    pub bus: Bus,
    /// Do not listen to uevents: look at the whole host every `poll_interval` instead.
    pub no_uevents: bool,
    /// How often the journal is checkpointed, and, when no uevent socket can be opened, how
    /// often vgpud looks at the whole host instead.
    pub poll_interval: std::time::Duration,
    /// The least time between two full looks at the host made because uevents were lost.
    pub full_look_interval: std::time::Duration,
    /// How often NVML is read for MIG-capable GPUs (GPU instances made by `nvidia-smi` send
    /// no uevent).
    pub nvml_interval: std::time::Duration,
    /// How long the restore at start waits for the parents of persistent devices.
    pub restore_timeout: std::time::Duration,
    /// How often leases are checked against their domains.
    pub reclaim_interval: std::time::Duration,
    /// How long hand-outs must pause before the pools are refilled.
    pub refill_settle: std::time::Duration,
    /// The libvirt connection URI (`qemu:///system`).
    pub libvirt_uri: String,
    /// NVIDIA's `sriov-manage` (taken below `root`).
    pub sriov_manage: PathBuf,
    /// Placement defaults.
    pub placement: crate::engine::Placement,
    /// NVIDIA's `nvidia-smi` (taken below `root`).
    pub nvidia_smi: PathBuf,
    /// The NVML library: `None` for the default (`libnvidia-ml.so.1`, or on a simulated host
    /// the workspace's fake library next to the vgpud executable); a path `none` disables
    /// NVML.
    pub nvml_library: Option<PathBuf>,
    /// A layout to apply after the restore at start.
    pub apply_layout: Option<String>,
    /// Serve Prometheus metrics on this (loopback) address.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Write Prometheus metrics to this node_exporter textfile.
    pub metrics_textfile: Option<PathBuf>,
    /// How often the textfile is written.
    pub metrics_interval: std::time::Duration,
}

/// The NVIDIA control plane the configuration asks for; [`Unavailable`] with the reason
/// when NVML cannot be used (vgpud serves without it).
///
/// [`Unavailable`]: crate::gpu_control::Unavailable
pub fn open_control(config: &Config) -> Arc<dyn crate::gpu_control::GpuControl> {
    use crate::gpu_control::{nvml::NvmlControl, Unavailable};
    let library = match &config.nvml_library {
        Some(p) if p.as_os_str() == "none" => {
            return Arc::new(Unavailable::new("NVML is disabled (nvml_library = \"none\")"))
        }
        Some(p) => Some(p.clone()),
        None if config.simulate => match fake_library() {
            Some(p) => Some(p),
            None => {
                return Arc::new(Unavailable::new(
                    "simulated host without the fake libnvidia-ml (build it with cargo build --workspace; it is looked for next to vgpud)",
                ))
            }
        },
        None => None,
    };
    match NvmlControl::open(library.as_deref()) {
        Ok(c) => {
            tracing::info!(library = ?library, "NVML loaded");
            Arc::new(c)
        }
        Err(reason) => {
            tracing::info!(%reason, "serving without NVML: MIG, the vGPU scheduler and telemetry are unavailable");
            Arc::new(Unavailable::new(reason))
        }
    }
}

/// The workspace's fake libnvidia-ml (`libnvidia_ml.so`) next to the running executable, or
/// one directory up (test binaries live in `deps/`).
fn fake_library() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.to_path_buf(), dir.parent()?.to_path_buf()]
        .into_iter()
        .map(|d| d.join("libnvidia_ml.so"))
        .find(|p| p.is_file())
}

/// Why the daemon could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Scanning the host failed.
    #[error("scanning the host at {root}: {source}")]
    Scan {
        /// The host root.
        root: PathBuf,
        /// The engine error.
        source: EngineError,
    },
    /// The bus could not be reached or the name could not be taken.
    #[error("{context}: {source}")]
    Bus {
        /// What vgpud was doing.
        context: String,
        /// The bus error.
        source: zbus::Error,
    },
    /// The root has no `sys` directory: nothing to manage there.
    #[error("{0} has no sys directory; give --root the root of a host or of a simulated tree (vgpud sim-host)")]
    NoSysfs(PathBuf),
    /// The simulated kernel could not finish an interrupted operation.
    #[error("recovering the simulated kernel state under {root}: {source}")]
    Simulation {
        /// The host root.
        root: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// Signal handling could not be set up.
    #[error("setting up signal handling: {0}")]
    Signals(std::io::Error),
    /// The bus closed vgpud's connection while it served.
    #[error("{bus} closed vgpud's connection: exiting so that systemd starts vgpud again")]
    BusLost {
        /// Which bus.
        bus: String,
    },
}

/// The exit status of a vgpud that lost its bus ([`DaemonError::BusLost`]): `EX_TEMPFAIL`
/// of sysexits.h, apart from the 1 of every other failure. systemd's `Restart=on-failure`
/// restarts on it.
pub const EXIT_BUS_LOST: u8 = 75;

impl DaemonError {
    /// The process's exit status for this error.
    pub fn exit_status(&self) -> u8 {
        match self {
            DaemonError::BusLost { .. } => EXIT_BUS_LOST,
            _ => 1,
        }
    }
}

impl std::fmt::Display for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bus::System => f.write_str("the system bus"),
            Bus::Session => f.write_str("the session bus"),
            Bus::Address(a) => write!(f, "the bus at {a}"),
        }
    }
}

/// A duration in milliseconds to one decimal, for the log (`58.9`, not `58.994558000000005`).
fn millis(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

fn bus_err(context: &str) -> impl FnOnce(zbus::Error) -> DaemonError + '_ {
    move |source| DaemonError::Bus {
        context: context.to_string(),
        source,
    }
}

/// Runs the daemon until SIGTERM or SIGINT.
pub async fn run(config: Config) -> Result<(), DaemonError> {
    let host = if config.simulate {
        Host::simulated(&config.root)
    } else {
        Host::new(&config.root)
    };
    // Handlers first: a SIGTERM that arrives right after READY must stop vgpud cleanly.
    let termination = Termination::install()?;
    if !host.sys("").is_dir() {
        return Err(DaemonError::NoSysfs(config.root.clone()));
    }
    let started = std::time::Instant::now();
    host.recover_simulation()
        .map_err(|source| DaemonError::Simulation {
            root: config.root.clone(),
            source,
        })?;
    let engine = {
        let host = host.clone();
        let root = config.root.clone();
        let sriov_manage = config.sriov_manage.clone();
        let placement = config.placement;
        let nvidia_smi = config.nvidia_smi.clone();
        let config = config.clone();
        tokio::task::spawn_blocking(move || {
            let control = open_control(&config);
            Engine::new(host).map(|e| {
                e.with_sriov_manage(sriov_manage)
                    .with_nvidia_smi(nvidia_smi)
                    .with_placement(placement)
                    .with_control(control)
            })
        })
        .await
        .map_err(|e| DaemonError::Scan {
            root: root.clone(),
            source: EngineError::InvalidArgument(format!("scan task failed: {e}")),
        })?
        .map_err(|source| DaemonError::Scan { root, source })?
    };
    let engine = Arc::new(engine);
    tracing::info!(
        root = %config.root.display(),
        simulated = config.simulate,
        gpus = engine.list_gpus().len(),
        devices = engine.list_devices().len(),
        elapsed_ms = millis(started.elapsed()),
        "host opened"
    );
    let report = {
        let engine = engine.clone();
        let timeout = config.restore_timeout;
        tokio::task::spawn_blocking(move || engine.restore(timeout))
            .await
            .unwrap_or_default()
    };
    tracing::info!(
        started = report.started.len(),
        failed = report.failed.len(),
        missing_parents = ?report.missing_parents,
        elapsed_ms = millis(started.elapsed()),
        "persistent devices restored"
    );
    if let Some(name) = config.apply_layout.clone() {
        let engine = engine.clone();
        tokio::task::spawn_blocking(move || apply_boot_layout(&engine, &name))
            .await
            .unwrap_or_default();
    }

    // Spares handed out are made again in the background ([`crate::layout::pools`]), and a
    // create with no room may empty a GPU of spares ([`crate::layout::reshape`]).
    let libvirt = Arc::new(crate::libvirt::VirtConnection::new(&config.libvirt_uri));
    let reshaper = crate::layout::reshape::PoolReshaper::install(&engine, Some(libvirt.clone()));
    if let Err(e) =
        crate::layout::pools::spawn_refill(engine.clone(), reshaper, config.refill_settle)
    {
        tracing::error!(error = %e, "could not start the pool refill thread: pools are not refilled");
    }

    let builder = match &config.bus {
        Bus::System => zbus::connection::Builder::system(),
        Bus::Session => zbus::connection::Builder::session(),
        Bus::Address(a) => zbus::connection::Builder::address(a.as_str()),
    };
    let conn = builder
        .build()
        .await
        .map_err(bus_err("connecting to the bus"))?;
    dbus::serve(&conn, engine.clone(), libvirt.clone())
        .await
        .map_err(bus_err("exporting objects"))?;
    // Without ALLOW_REPLACEMENT: another connection cannot take the name from a running
    // vgpud (and leave it serving no one); a second vgpud fails to start instead.
    conn.request_name_with_flags(
        dbus::BUS_NAME,
        zbus::fdo::RequestNameFlags::REPLACE_EXISTING | zbus::fdo::RequestNameFlags::DO_NOT_QUEUE,
    )
    .await
    .map_err(bus_err("taking the name org.vgpud1"))?;
    tracing::info!(
        name = dbus::BUS_NAME,
        elapsed_ms = millis(started.elapsed()),
        "ready"
    );
    notify(&[sd_notify::NotifyState::Ready]);
    // The look at start was made by Engine::new; uevents tell what changes from here on.
    crate::metrics::counters().full_look("start");
    let listener = if config.no_uevents {
        Err(std::io::Error::other("--no-uevents"))
    } else {
        uevents::open(engine.host())
    };
    let listening = match listener {
        Ok(listener) => {
            tracing::info!(socket = %listener.what, full_look_interval_s = config.full_look_interval.as_secs(), "listening to uevents");
            Some(tokio::spawn(uevents::run(
                engine.clone(),
                listener,
                config.full_look_interval,
            )))
        }
        Err(e) => {
            tracing::warn!(error = %e, interval_ms = millis(config.poll_interval), "cannot listen to uevents: looking at the whole host periodically instead");
            None
        }
    };
    follow_tree_writes(engine.host());
    let watcher = tokio::spawn(watch::run(
        engine.clone(),
        config.poll_interval,
        listening.is_none(),
    ));
    let nvml = tokio::spawn(watch::nvml_timer(engine.clone(), config.nvml_interval));
    // systemd arms the watchdog once start-up is complete (READY=1).
    let pinger = watchdog::ping_interval(sd_notify::watchdog_enabled()).map(|interval| {
        tracing::info!(interval_ms = millis(interval), "systemd watchdog enabled");
        tokio::spawn(watchdog::run(engine.clone(), interval))
    });
    let audit = crate::audit::spawn(&engine);
    let metrics = start_metrics(&config, &engine).await;
    let demand = tokio::spawn(flush_demand(engine.clone()));
    let reclaim = tokio::spawn(reclaim_leases(
        engine.clone(),
        libvirt,
        config.reclaim_interval,
    ));

    // dbus-daemon drops a peer that sends a message over its limit, and a stopped bus drops
    // everyone: a vgpud without its connection serves no one, so it stops (non-zero).
    let lost = tokio::select! {
        () = termination.wait() => false,
        () = conn.closed() => true,
    };
    if lost {
        tracing::error!(bus = %config.bus, "the bus closed vgpud's connection (dbus-daemon disconnects a peer that sends a message over its size limit, or the bus stopped)");
    }
    watcher.abort();
    nvml.abort();
    if let Some(listening) = listening {
        listening.abort();
    }
    if let Some(pinger) = pinger {
        pinger.abort();
    }
    audit.abort();
    demand.abort();
    reclaim.abort();
    for task in metrics {
        task.abort();
    }
    notify(&[sd_notify::NotifyState::Stopping]);
    tracing::info!("stopping");
    // The files the journal wrote are made durable, so the next start applies nothing again.
    if let Err(e) = crate::persist::journal::of(engine.host()).checkpoint_if_dirty() {
        tracing::warn!(error = %e, "could not checkpoint the journal");
    }
    if let Err(e) = engine.demand().flush() {
        tracing::warn!(error = %e, "could not write the demand record");
    }
    if lost {
        return Err(DaemonError::BusLost {
            bus: config.bus.to_string(),
        });
    }
    Ok(())
}

/// Writes the demand record out every [`crate::demand::FLUSH_S`] seconds while it changes
/// (a flush with nothing new writes nothing); runs until its task is dropped.
async fn flush_demand(engine: Arc<Engine>) {
    let period = std::time::Duration::from_secs(crate::demand::FLUSH_S);
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    loop {
        ticker.tick().await;
        let e = engine.clone();
        match tokio::task::spawn_blocking(move || e.demand().flush()).await {
            Ok(Err(e)) => tracing::warn!(error = %e, "could not write the demand record"),
            Err(e) => tracing::error!(error = %e, "the demand record task failed"),
            Ok(Ok(_)) => {}
        }
    }
}

/// Checks the devices' leases every `interval` and reclaims those that ran out
/// ([`crate::libvirt::reclaim`]); runs until its task is dropped.
async fn reclaim_leases(
    engine: Arc<Engine>,
    libvirt: Arc<crate::libvirt::VirtConnection>,
    interval: std::time::Duration,
) {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if !engine.has_leases() {
            continue;
        }
        let (e, l) = (engine.clone(), libvirt.clone());
        let now = crate::persist::now_unix();
        let started = std::time::Instant::now();
        match tokio::task::spawn_blocking(move || {
            crate::libvirt::reclaim::reclaim_expired(&e, l.as_ref(), now)
        })
        .await
        {
            Ok(done) => {
                // The look's own time: a reclaim comes up to one interval and this after
                // its lease ran out.
                let look_ms = started.elapsed().as_secs_f64() * 1000.0;
                for (uuid, reason) in done.devices {
                    tracing::info!(%uuid, look_ms = format!("{look_ms:.1}"), "reclaimed a device: {reason}");
                }
            }
            Err(e) => tracing::error!(error = %e, "the lease task failed"),
        }
    }
}

fn notify(states: &[sd_notify::NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "could not notify systemd");
    }
}

/// SIGTERM and SIGINT, caught from start-up on.
struct Termination {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Termination {
    fn install() -> Result<Self, DaemonError> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Termination {
            term: signal(SignalKind::terminate()).map_err(DaemonError::Signals)?,
            int: signal(SignalKind::interrupt()).map_err(DaemonError::Signals)?,
        })
    }

    async fn wait(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// Applies the layout named in the configuration after the restore; every step's outcome is
/// logged, and a layout that cannot be used is reported, never fatal.
fn apply_boot_layout(engine: &Engine, name: &str) {
    let outcomes = match crate::layout::pools::apply_named(engine, name, "ApplyLayout") {
        Ok(o) => {
            // Pools are filled from it from now on.
            if let Err(e) = crate::layout::pools::activate(engine, name) {
                tracing::warn!(layout = name, error = %e, "could not record the active layout");
            }
            o
        }
        Err(e) => {
            tracing::error!(
                layout = name,
                "the layout to apply at start cannot be used: {e}"
            );
            return;
        }
    };
    let mut not_ok = 0;
    for o in &outcomes {
        let ok = matches!(o.status, crate::layout::Status::Done);
        not_ok += usize::from(!ok);
        tracing::info!(
            layout = name,
            status = o.status.name(),
            gpu = %o.gpu,
            action = %o.action,
            subject = %o.subject,
            detail = %o.detail,
            "layout step"
        );
    }
    tracing::info!(
        layout = name,
        steps = outcomes.len(),
        not_done = not_ok,
        "layout applied at start"
    );
}

/// Starts the metrics exporters the configuration asks for; a listener that cannot bind is
/// reported, not fatal.
async fn start_metrics(config: &Config, engine: &Arc<Engine>) -> Vec<tokio::task::JoinHandle<()>> {
    use crate::metrics::export;
    if config.metrics_listen.is_none() && config.metrics_textfile.is_none() {
        return Vec::new();
    }
    let mut tasks = vec![crate::metrics::spawn_event_counter(engine)];
    let renderer = export::Renderer::new(engine.clone());
    if let Some(addr) = config.metrics_listen {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => {
                let bound = listener
                    .local_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_default();
                tracing::info!(address = %bound, "serving metrics at http://{bound}/metrics");
                tasks.push(tokio::spawn(export::serve(listener, renderer.clone())));
            }
            Err(e) => tracing::error!(address = %addr, "cannot serve metrics: {e}"),
        }
    }
    if let Some(path) = config.metrics_textfile.clone() {
        tracing::info!(path = %path.display(), "writing metrics for node_exporter");
        tasks.push(tokio::spawn(export::write_textfile(
            path,
            config.metrics_interval,
            renderer,
        )));
    }
    tasks
}

/// On a simulated host, has the simulated kernel apply the writes other processes make into
/// the tree (a shell's `echo UUID > create`, `mdevctl start`), logging each: the uevents they
/// bring tell vgpud of the change, as on a real host.
fn follow_tree_writes(host: &Host) {
    let report = |w: crate::host::TreeWrite| {
        let path = w.path.display().to_string();
        let value: String = w.value.trim_end().chars().take(64).collect();
        match &w.result {
            Ok(()) => {
                tracing::info!(%path, %value, "the simulated kernel applied a write another process made into the tree")
            }
            Err(e) => {
                tracing::warn!(%path, %value, error = %e, "the simulated kernel refused a write another process made into the tree (its writer got no error: vgpud sim-host --poke gives the errno)")
            }
        }
    };
    match host.follow_tree_writes(Box::new(report)) {
        Ok(true) => {
            tracing::info!("applying the writes other processes make into the simulated tree")
        }
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch the simulated tree: writes other processes make into it are not applied (vgpud sim-host --poke still is)")
        }
    }
}
