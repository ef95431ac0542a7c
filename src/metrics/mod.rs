//! Prometheus metrics, opt-in (`[metrics]` in vgpud.toml): operations by method and error
//! name with their latency, the engine's queue during storms and the changes the core's
//! event stream reports are counted as they happen; devices by kind, type, GPU and state,
//! available capacity, and GPU and vGPU telemetry (where NVML gives it) are read from the
//! core and the host, again after the core's events and at most once a second. Served in
//! the Prometheus text format (0.0.4) on a localhost HTTP listener (`GET /metrics`) and/or
//! written to a node_exporter textfile.

pub mod cpu;
pub mod export;
pub mod safe_write;

use std::sync::atomic::AtomicU64;
use std::sync::OnceLock;

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::engine::{Engine, Event};

/// A label set.
type Labels = Vec<(&'static str, String)>;

fn latency_histogram() -> Histogram {
    // 0.5 ms .. ~16 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// What is counted as it happens, process-wide: calls, the engine queue, changes.
pub struct Counters {
    operations: Family<Labels, Counter>,
    latency: Family<Labels, Histogram, fn() -> Histogram>,
    waiting: Gauge,
    running: Gauge,
    changes: Family<Labels, Counter>,
    full_looks: Family<Labels, Counter>,
    uevents: Family<Labels, Counter>,
    pools: Family<Labels, Counter>,
    refill_lead: Histogram,
}

static COUNTERS: OnceLock<Counters> = OnceLock::new();

/// The process's counters (cheap to update whether or not metrics are exported).
pub fn counters() -> &'static Counters {
    COUNTERS.get_or_init(|| Counters {
        operations: Family::default(),
        latency: Family::new_with_constructor(latency_histogram),
        waiting: Gauge::default(),
        running: Gauge::default(),
        changes: Family::default(),
        full_looks: Family::default(),
        uevents: Family::default(),
        pools: Family::default(),
        refill_lead: latency_histogram(),
    })
}

/// Holds a place in the engine queue while it lives: waiting, then running.
pub struct QueuePlace(bool);

impl QueuePlace {
    /// A call starts waiting for an engine slot.
    pub fn wait() -> Self {
        counters().waiting.inc();
        QueuePlace(false)
    }
    /// It has its slot and runs.
    pub fn run(&mut self) {
        if !self.0 {
            counters().waiting.dec();
            counters().running.inc();
            self.0 = true;
        }
    }
}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        if self.0 {
            counters().running.dec();
        } else {
            counters().waiting.dec();
        }
    }
}

impl Counters {
    /// A finished call of `method`: its D-Bus error name (`None`: it succeeded) and how long
    /// it took.
    pub fn call(&self, method: &str, error: Option<&str>, seconds: f64) {
        let outcome = error.unwrap_or("ok").to_string();
        self.operations
            .get_or_create(&vec![("method", method.to_string()), ("error", outcome)])
            .inc();
        self.latency
            .get_or_create(&vec![("method", method.to_string())])
            .observe(seconds);
    }

    /// A full look at the host, and why (`start`, `overrun`, `no-listener`, `definitions`).
    pub fn full_look(&self, reason: &'static str) {
        self.full_looks
            .get_or_create(&vec![("reason", reason.to_string())])
            .inc();
    }

    /// A pool's work: `refill` (the active layout applied again), `reshape` (a GPU of
    /// spares emptied for a type with no room) or `return` (a released device kept).
    pub fn pool(&self, what: &'static str) {
        self.pools
            .get_or_create(&vec![("what", what.to_string())])
            .inc();
    }

    /// A refill that answered hand-outs ended, `seconds` after the first of them.
    pub fn refill_lead(&self, seconds: f64) {
        self.refill_lead.observe(seconds);
    }

    /// A kernel uevent applied.
    pub fn uevent(&self, subsystem: &str, action: &str) {
        // Only the kernel's names: a label never holds what a sender made up.
        let known = |s: &str, names: &[&str]| {
            if names.contains(&s) {
                s.to_string()
            } else {
                "other".to_string()
            }
        };
        self.uevents
            .get_or_create(&vec![
                (
                    "subsystem",
                    known(subsystem, &["mdev", "pci", "vfio", "vfio-dev"]),
                ),
                (
                    "action",
                    known(action, &["add", "remove", "change", "bind", "unbind"]),
                ),
            ])
            .inc();
    }

    fn change(&self, event: &Event) {
        let name = match event {
            Event::DeviceAdded { .. } => "device-added",
            Event::DeviceChanged { .. } => "device-changed",
            Event::DeviceRemoved { .. } => "device-removed",
            Event::Drift(_) => "device-drift",
            Event::DeviceReclaimed { .. } => "device-reclaimed",
            Event::GpuAdded { .. } => "gpu-added",
            Event::GpuChanged { .. } => "gpu-changed",
            Event::GpuModeChanged { .. } => "gpu-mode-changed",
            Event::GpuRemoved { .. } => "gpu-removed",
            Event::GpuDrift { .. } => "gpu-drift",
            Event::CapacityChanged { .. } => "capacity-changed",
        };
        self.changes
            .get_or_create(&vec![("event", name.to_string())])
            .inc();
    }
}

/// Counts the core's events (the one stream D-Bus signals and the audit log come from).
pub fn spawn_event_counter(engine: &Engine) -> tokio::task::JoinHandle<()> {
    crate::engine::events::spawn_consumer(engine.events(), |r| counters().change(&r.event))
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// What is counted as it happens (calls, the engine queue, changes), in the Prometheus text
/// format (0.0.4): in memory, cheap at every scrape.
pub fn render_counters() -> String {
    let c = counters();
    let mut r = Registry::with_prefix("vgpud");
    r.register(
        "operations",
        "Calls of the D-Bus API by method and outcome (ok, or the D-Bus error name)",
        c.operations.clone(),
    );
    r.register(
        "operation_duration_seconds",
        "Time from a call's arrival to its answer, by method",
        c.latency.clone(),
    );
    r.register(
        "engine_queue_waiting",
        "Calls waiting for one of the engine's slots (grows in a login storm)",
        c.waiting.clone(),
    );
    r.register(
        "engine_queue_running",
        "Calls running in the engine",
        c.running.clone(),
    );
    r.register(
        "changes",
        "Changes the core reported, by event (device-added, device-removed, device-drift, ...)",
        c.changes.clone(),
    );
    r.register(
        "full_looks",
        "Full looks at the host, by reason (start, overrun: a uevent was lost, no-listener, definitions: mdevctl's files changed)",
        c.full_looks.clone(),
    );
    r.register(
        "uevents",
        "Kernel uevents applied, by subsystem and action",
        c.uevents.clone(),
    );
    let cpu = |seconds: f64| {
        let c: Counter<f64, AtomicU64> = Counter::default();
        c.inc_by(seconds);
        c
    };
    for (name, help, part) in [
        ("simulated_kernel_cpu_seconds", "CPU time vgpud's process spent in the simulated kernel (a simulated host only: its side effects and uevents run in vgpud's process)", cpu::Part::SimulatedKernel),
        ("nvml_cpu_seconds", "CPU time vgpud's process spent in calls of the NVML library", cpu::Part::Nvml),
        ("kernel_write_cpu_seconds", "CPU time of vgpud's writes to sysfs on a real host: the kernel's own work in them (a create runs the mdev driver's callback in the writing thread)", cpu::Part::KernelWrites),
        ("persistence_cpu_seconds", "CPU time vgpud's process spent in its state's journal, intents, definitions and records", cpu::Part::Persistence),
        ("engine_call_cpu_seconds", "CPU time of the engine's work in calls from the bus, less the kernel's, NVML's and persistence's counted apart", cpu::Part::EngineCalls),
        ("uevent_cpu_seconds", "CPU time vgpud's process spent applying the kernel's uevents, less the parts counted apart", cpu::Part::Uevents),
    ] {
        r.register(name, help, cpu(cpu::seconds(part)));
    }
    r.register(
        "process_cpu_seconds",
        "CPU time of vgpud's whole process (all threads, user and system); less the parts above, the bus, the async runtime and publishing",
        cpu(cpu::process_seconds()),
    );
    r.register(
        "pool_work",
        "Elastic pools' work, by what (refill: the active layout applied again; reshape: a GPU of spares emptied for a type with no room, refused or forecast; return: a released device reset and kept as a spare)",
        c.pools.clone(),
    );
    r.register(
        "pool_refill_lead_seconds",
        "Time from a spare's hand-out to the end of the refill that replaced it (the wait for hand-outs to pause, and the refill): forecast pools keep the spares that cover this long a wait",
        c.refill_lead.clone(),
    );
    encode(&r)
}

/// What is read from the core and the host (devices, capacity, telemetry), in the Prometheus
/// text format (0.0.4), to follow [`render_counters`]. Reads the host (types, NVML): call it
/// off the async runtime.
pub fn render_host(engine: &Engine) -> String {
    let mut r = Registry::with_prefix("vgpud");
    let all_devices = engine.list_devices();
    let devices: Family<Labels, Gauge> = Family::default();
    for d in &all_devices {
        let gpu = engine.gpu_of_parent(&d.parent);
        let state = if d.active { "active" } else { "inactive" };
        devices
            .get_or_create(&vec![
                ("kind", d.kind.as_str().to_string()),
                ("type", d.type_name.clone()),
                ("gpu", gpu),
                ("state", state.to_string()),
            ])
            .inc();
    }
    r.register(
        "devices",
        "Devices by kind, type, GPU and state (active, or defined and inactive)",
        devices,
    );

    let available: Family<Labels, Gauge> = Family::default();
    let max: Family<Labels, Gauge> = Family::default();
    if let Ok(types) = engine.list_types() {
        for (gpu, t) in types {
            let labels = vec![("gpu", gpu), ("type", t.name.clone())];
            available
                .get_or_create(&labels)
                .set(i64::from(t.available_instances));
            if t.max_instances() > 0 {
                max.get_or_create(&labels).set(i64::from(t.max_instances()));
            }
        }
    }
    r.register(
        "available_instances",
        "Devices of a type a GPU can still take now",
        available,
    );
    r.register(
        "max_instances",
        "Most devices of a type a GPU takes, where the vendor says",
        max,
    );

    let mut gpus = Telemetry::default();
    for g in engine.list_gpus() {
        if g.nvidia.is_some() && g.is_physical() {
            if let Ok(figures) = engine.metrics(&g.address) {
                gpus.add(&figures, vec![("gpu", g.address.clone())]);
            }
        }
    }
    gpus.register(&mut r, "gpu", "A GPU's");
    let mut vgpus = Telemetry::default();
    for d in &all_devices {
        if d.active && d.kind == crate::model::DeviceKind::SriovVgpu {
            if let Ok(figures) = engine.metrics(&d.uuid) {
                let gpu = engine.gpu_of_parent(&d.parent);
                vgpus.add(&figures, vec![("uuid", d.uuid.clone()), ("gpu", gpu)]);
            }
        }
    }
    vgpus.register(&mut r, "vgpu", "A vGPU's");
    register_demand(&mut r, engine);
    encode(&r)
}

/// The demand record's last hour per type and what, and each type's forecast of the hour
/// under way with last week's error.
fn register_demand(r: &mut Registry, engine: &Engine) {
    use crate::demand::forecast;
    let now = crate::persist::now_unix();
    let last_hour: Family<Labels, Gauge> = Family::default();
    let next_hour: Family<Labels, FloatGauge> = Family::default();
    let error: Family<Labels, FloatGauge> = Family::default();
    engine.demand().with(|record| {
        for t in record.types() {
            let c = record.total(t, now.saturating_sub(3600), now + 1);
            for (what, n) in [
                ("requests", c.requests),
                ("warm", c.warm),
                ("cold", c.cold),
                ("refused", c.refused),
                ("released", c.released),
            ] {
                last_hour
                    .get_or_create(&vec![("type", t.to_string()), ("what", what.to_string())])
                    .set(i64::from(n));
            }
            let fitted = forecast::fit_type(record, t, now);
            let labels = vec![("type", t.to_string())];
            next_hour
                .get_or_create(&labels)
                .set(fitted.model.predict(now / 3600));
            if let Some(relative) = fitted.accuracy().relative {
                error.get_or_create(&labels).set(relative);
            }
        }
    });
    r.register(
        "demand_last_hour",
        "Devices of a type asked for, served warm or cold, refused and released in the last 60 minutes",
        last_hour,
    );
    r.register(
        "demand_forecast_hour",
        "Requests of a type the forecast expects in the hour under way",
        next_hour,
    );
    r.register(
        "demand_forecast_error_last_week",
        "The forecast's error over the last week: the sum of its hourly misses over the requests that came",
        error,
    );
}

fn encode(r: &Registry) -> String {
    let mut out = String::new();
    if let Err(e) = prometheus_text::encode(&mut out, r) {
        tracing::warn!("encoding the metrics: {e}");
    }
    out
}

/// NVML's figures of GPUs or vGPUs, a gauge family per figure.
#[derive(Default)]
struct Telemetry(std::collections::BTreeMap<String, Family<Labels, FloatGauge>>);

impl Telemetry {
    fn add(&mut self, figures: &crate::engine::telemetry::Metrics, labels: Labels) {
        for (key, f) in figures {
            if let Some((name, factor)) = telemetry_metric(key) {
                self.0
                    .entry(name)
                    .or_default()
                    .get_or_create(&labels)
                    .set(figure(*f) * factor);
            }
        }
    }

    fn register(self, r: &mut Registry, prefix: &str, whose: &str) {
        for (key, family) in self.0 {
            r.register(
                format!("{prefix}_{key}"),
                format!("{whose} {key}, as NVML reports it"),
                family,
            );
        }
    }
}

fn figure(f: crate::engine::telemetry::Figure) -> f64 {
    match f {
        crate::engine::telemetry::Figure::U32(n) => f64::from(n),
        crate::engine::telemetry::Figure::U64(n) => n as f64,
    }
}

/// A telemetry figure's metric name (with its unit, as Prometheus names them) and the
/// factor to that unit; `None` for what is no measurement (a type id, an instance id).
fn telemetry_metric(key: &str) -> Option<(String, f64)> {
    Some(match key {
        "temperature" => ("temperature_celsius".into(), 1.0),
        "power_mw" => ("power_watts".into(), 0.001),
        "ecc_corrected" | "ecc_uncorrected" => (format!("{key}_errors"), 1.0),
        "type_id" | "gpu_instance" => return None,
        k if k.ends_with("_utilization") => (format!("{k}_percent"), 1.0),
        k if k.starts_with("memory_") || k.starts_with("fb_") => (format!("{k}_bytes"), 1.0),
        k => (k.to_string(), 1.0),
    })
}
