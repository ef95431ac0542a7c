//! `vgpud`: the daemon, and `vgpud sim-host` to write simulated hosts.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use vgpud::daemon::{self, Bus, Config};

/// Turns the GPUs of a KVM host into shareable devices for libvirt guests, served on D-Bus as
/// org.vgpud1.
#[derive(Debug, Parser)]
#[command(name = "vgpud", version)]
struct Cli {
    /// Root every host path (sys, etc, run, var/lib, dev) is built from.
    #[arg(long, default_value = "/", global = true)]
    root: PathBuf,
    /// Apply the kernel's and drivers' side effects of sysfs writes in vgpud itself, so that a
    /// tree laid out like sysfs under --root behaves like a real host.
    #[arg(long)]
    simulate: bool,
    /// Serve on the bus at this address instead of the system bus.
    #[arg(long, value_name = "ADDR", conflicts_with = "session")]
    bus_address: Option<String>,
    /// Serve on the session bus instead of the system bus.
    #[arg(long)]
    session: bool,
    /// How often vgpud checkpoints its journal, and, when it cannot listen to the kernel's
    /// uevents, how often it looks at the whole host instead, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    poll_interval_ms: u64,
    /// How often the leases of devices are checked against their domains, in seconds
    /// (with no leased device, libvirt is never asked).
    #[arg(long, value_name = "S", default_value_t = 30)]
    reclaim_interval_s: u64,
    /// How long hand-outs of spares must pause before the pools are refilled in the
    /// background, in milliseconds (a storm's hand-outs come first).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    refill_settle_ms: u64,
    /// The least time between two full looks at the host made because uevents were lost
    /// (the uevent socket overran), in seconds.
    #[arg(long, value_name = "S", default_value_t = 60)]
    full_look_interval_s: u64,
    /// How often NVML is read for MIG-capable GPUs, to see GPU instances made by other
    /// tools (nvidia-smi), in seconds.
    #[arg(long, value_name = "S", default_value_t = 30)]
    nvml_interval_s: u64,
    /// Do not listen to the kernel's uevents: look at the whole host every
    /// --poll-interval-ms instead.
    #[arg(long)]
    no_uevents: bool,
    /// How long the restore at start waits for the parents of persistent devices, in
    /// seconds.
    #[arg(long, value_name = "S", default_value_t = 30)]
    restore_timeout_s: u64,
    /// The libvirt connection URI for attach and detach; vgpud serves without libvirt and
    /// connects when first needed [default: from etc/vgpud/vgpud.toml, else qemu:///system]
    #[arg(long, value_name = "URI")]
    libvirt_uri: Option<String>,
    /// NVIDIA's sriov-manage, which enables the VFs of NVIDIA GPUs (taken below --root)
    /// [default: from etc/vgpud/vgpud.toml, else /usr/lib/nvidia/sriov-manage]
    #[arg(long, value_name = "PATH")]
    sriov_manage: Option<std::path::PathBuf>,
    /// nvidia-smi, which switches a GPU's heterogeneous vGPU mode (taken below --root)
    /// [default: from etc/vgpud/vgpud.toml, else /usr/bin/nvidia-smi]
    #[arg(long, value_name = "PATH")]
    nvidia_smi: Option<std::path::PathBuf>,
    /// The NVML library for MIG, the vGPU scheduler and telemetry; "none" runs without
    /// [default: from etc/vgpud/vgpud.toml, else libnvidia-ml.so.1; on a simulated host the
    /// workspace's fake library next to vgpud]
    #[arg(long, value_name = "PATH")]
    nvml_library: Option<std::path::PathBuf>,
    /// A layout (etc/vgpud/layouts/NAME.toml) to apply after the restore at start
    /// [default: from etc/vgpud/vgpud.toml, else none]
    #[arg(long, value_name = "NAME")]
    apply_layout: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics (a loopback address only)
    /// [default: from etc/vgpud/vgpud.toml, else off]
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Write Prometheus metrics to this node_exporter textfile
    /// [default: from etc/vgpud/vgpud.toml, else off]
    #[arg(long, value_name = "PATH")]
    metrics_textfile: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a simulated host (a tree laid out like real sysfs) under --root.
    SimHost {
        /// Profile to write; may be given several times. See --list.
        #[arg(long = "profile", value_name = "NAME")]
        profiles: Vec<String>,
        /// List the profiles and exit.
        #[arg(long)]
        list: bool,
        /// Write VALUE to PATH (below --root) through the simulated kernel, as `echo VALUE >
        /// PATH` does on a real host: with the kernel's side effects, its errno, and its
        /// uevent to a vgpud listening on this tree. A plain write into the tree is a file
        /// changed, which no kernel sees.
        #[arg(long, num_args = 2, value_names = ["PATH", "VALUE"], conflicts_with_all = ["profiles", "list"])]
        poke: Vec<String>,
    },
    /// The libvirt hook (installed in /etc/libvirt/hooks/qemu.d/): creates a domain's vGPUs on
    /// `prepare begin` and removes the transient ones on `release end`, through vgpud on the
    /// system bus. Domain XML on stdin.
    LibvirtHook {
        /// DOMAIN OPERATION SUB-OPERATION EXTRA, as libvirt passes them.
        #[arg(num_args = 0.., allow_hyphen_values = true, trailing_var_arg = true)]
        args: Vec<String>,
    },
    /// Read-only check of the NVML library on this host: prints GPUs, MIG mode, profiles,
    /// placements, instances, vGPU types, the scheduler and telemetry, with the return code
    /// of every call that failed. Changes nothing (no mode, clock or reset).
    NvmlProbe {
        /// Also compare each GPU's MIG profiles with the simulator's table for that GPU.
        #[arg(long)]
        compare: bool,
        /// The NVML library to load [default: libnvidia-ml.so.1]
        #[arg(long = "nvml-library", value_name = "PATH")]
        library: Option<std::path::PathBuf>,
    },
}

/// Logs to the journal when systemd started vgpud with its output there (JOURNAL_STREAM),
/// as structured entries (the audit log's fields can be queried); to stderr otherwise.
fn init_logging() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_env("VGPUD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        match tracing_journald::layer() {
            Ok(journald) => {
                tracing_subscriber::registry()
                    .with(filter)
                    .with(journald.with_field_prefix(None))
                    .init();
                return;
            }
            Err(e) => eprintln!("vgpud: cannot log to the journal ({e}); logging to stderr"),
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::SimHost {
            profiles,
            list,
            poke,
        }) => match poke.as_slice() {
            [path, value] => sim_poke(&cli.root, path, value),
            _ => sim_host(&cli.root, &profiles, list),
        },
        Some(Command::NvmlProbe { compare, library }) => {
            let library = library.as_deref().or(cli.nvml_library.as_deref());
            let mut out = std::io::stdout().lock();
            let result = if compare {
                vgpud::gpu_control::probe::compare_with_simulator(library, &mut out)
            } else {
                vgpud::gpu_control::probe::run(library, &mut out)
            };
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("vgpud nvml-probe: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Some(Command::LibvirtHook { args }) => {
            match vgpud::hook::run(&args, std::io::stdin().lock()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("vgpud libvirt-hook: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        None => {
            init_logging();
            let bus = match (cli.bus_address, cli.session) {
                (Some(a), _) => Bus::Address(a),
                (None, true) => Bus::Session,
                (None, false) => Bus::System,
            };
            let file = match vgpud::config::FileConfig::load(&cli.root) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("vgpud: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let config = Config {
                root: cli.root,
                simulate: cli.simulate,
                bus,
                poll_interval: std::time::Duration::from_millis(cli.poll_interval_ms.max(10)),
                full_look_interval: std::time::Duration::from_secs(cli.full_look_interval_s),
                nvml_interval: std::time::Duration::from_secs(cli.nvml_interval_s.max(1)),
                no_uevents: cli.no_uevents,
                restore_timeout: std::time::Duration::from_secs(cli.restore_timeout_s),
                reclaim_interval: std::time::Duration::from_secs(
                    cli.reclaim_interval_s.clamp(1, 3600),
                ),
                refill_settle: std::time::Duration::from_millis(
                    cli.refill_settle_ms.clamp(1, 3_600_000),
                ),
                libvirt_uri: cli
                    .libvirt_uri
                    .or(file.libvirt.uri)
                    .unwrap_or_else(|| "qemu:///system".to_string()),
                sriov_manage: cli
                    .sriov_manage
                    .or(file.sriov.sriov_manage)
                    .unwrap_or_else(|| format!("/{}", vgpud::engine::DEFAULT_SRIOV_MANAGE).into()),
                nvidia_smi: cli
                    .nvidia_smi
                    .or(file.nvidia.nvidia_smi)
                    .unwrap_or_else(|| format!("/{}", vgpud::engine::DEFAULT_NVIDIA_SMI).into()),
                placement: vgpud::engine::Placement {
                    policy: file.placement.policy.unwrap_or_default(),
                    numa_node: file.placement.numa_node,
                },
                nvml_library: cli.nvml_library.or(file.nvidia.nvml_library),
                apply_layout: cli.apply_layout.or(file.layouts.apply_at_boot),
                metrics_listen: cli.metrics_listen.or(file.metrics.listen),
                metrics_textfile: cli.metrics_textfile.or(file.metrics.textfile),
                metrics_interval: std::time::Duration::from_secs(
                    file.metrics
                        .textfile_interval_s
                        .unwrap_or(15)
                        .clamp(1, 3600),
                ),
            };
            if let Some(addr) = config.metrics_listen {
                if !vgpud::metrics::export::is_local(&addr) {
                    eprintln!(
                        "vgpud: the metrics listener must be on a loopback address (127.0.0.1, [::1]), not {addr}: put a proxy with authentication in front to serve it further"
                    );
                    return ExitCode::FAILURE;
                }
            }
            if let Some(name) = &config.apply_layout {
                if let Err(e) = vgpud::layout::file::check_name(name) {
                    eprintln!("vgpud: --apply-layout or [layouts] apply_at_boot: {e}");
                    return ExitCode::FAILURE;
                }
            }
            // The fake libnvidia-ml of a simulated host reads the host's state under the root
            // (set here, before any thread exists).
            if cli.simulate && std::env::var_os("VGPUD_FAKE_NVML_ROOT").is_none() {
                std::env::set_var("VGPUD_FAKE_NVML_ROOT", &config.root);
            }
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("vgpud: cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let code = match runtime.block_on(daemon::run(config)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e}");
                    ExitCode::from(e.exit_status())
                }
            };
            // A blocking task stuck in the kernel (a sysfs read of a wedged driver) must not
            // keep a stopped vgpud alive: wait for the others a little, then exit.
            runtime.shutdown_timeout(std::time::Duration::from_secs(2));
            code
        }
    }
}

/// `vgpud sim-host --poke PATH VALUE`: one write through the simulated kernel.
fn sim_poke(root: &std::path::Path, path: &str, value: &str) -> ExitCode {
    let rel = path.trim_start_matches('/');
    if !rel.starts_with("sys/") || rel.split('/').any(|c| c == "..") {
        eprintln!("vgpud sim-host: --poke takes a path below sys/ of the simulated tree");
        return ExitCode::from(2);
    }
    match vgpud::host::Host::simulated(root).write_attr(&root.join(rel), value) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vgpud sim-host: {e}");
            ExitCode::FAILURE
        }
    }
}

fn sim_host(root: &std::path::Path, profiles: &[String], list: bool) -> ExitCode {
    if list || profiles.is_empty() {
        for (name, about) in vgpud_sim::profiles() {
            println!("{name:<14} {about}");
        }
        return if list {
            ExitCode::SUCCESS
        } else {
            eprintln!("vgpud sim-host: give at least one --profile");
            ExitCode::from(2)
        };
    }
    if root == std::path::Path::new("/") {
        eprintln!("vgpud sim-host: refusing to write a simulated host over /; give --root DIR");
        return ExitCode::from(2);
    }
    for name in profiles {
        if let Err(e) = vgpud_sim::write_profile(name, root) {
            eprintln!("vgpud sim-host: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
