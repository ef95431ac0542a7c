//! The command line, as clap parses it; completions and the man page are generated from it.

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

/// The heading of the options every command takes.
const GLOBAL: &str = "Global options";

/// The exit codes, for `--help` and the man page.
pub const EXIT_CODES: &str = "\
Exit status:
  0  success
  1  the host failed or cannot do it (Failed, NotSupported, Unsafe, Libvirt, LibvirtUnavailable, others)
  2  usage: a wrong command line, or vgpud says InvalidArgument
  3  not found: no such device, GPU, type or layout
  4  conflict: NoCapacity, Exists, Busy, NeedsReset; `apply` with a step refused or failed
  5  access denied (AccessDenied, InteractiveAuthorizationRequired)
  6  vgpud cannot be reached (no bus, or nobody owns org.vgpud1)

Errors are printed on stderr as `vgpuctl: <D-Bus error name>: <message>`, with a line of what
to try where there is one. Every change is confirmed in a line unless --quiet.";

/// The operator's command line of vgpud (org.vgpud1 on D-Bus): GPUs, vGPU types, devices,
/// MIG, the vGPU scheduler, layouts and events.
#[derive(Debug, Parser)]
#[command(name = "vgpuctl", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// Reach vgpud on the system bus (the default; DBUS_SYSTEM_BUS_ADDRESS is honoured).
    #[arg(long, global = true, conflicts_with_all = ["session", "address"], help_heading = GLOBAL)]
    pub system: bool,
    /// Reach vgpud on the session bus.
    #[arg(long, global = true, conflicts_with = "address", help_heading = GLOBAL)]
    pub session: bool,
    /// Reach vgpud on the bus at this address (`unix:path=/run/...`).
    #[arg(long, global = true, value_name = "ADDR", help_heading = GLOBAL)]
    pub address: Option<String>,
    /// Reach vgpud on the system bus of another host, over ssh (as `busctl -H`).
    #[arg(
        long,
        short = 'H',
        global = true,
        value_name = "[USER@]HOST",
        conflicts_with_all = ["session", "address", "system"],
        help_heading = GLOBAL
    )]
    pub host: Option<String>,
    /// Print JSON (one document; `watch`: one object a line) instead of tables.
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub json: bool,
    /// No confirmation line after a change; `create` prints only the UUID, `mig create` only
    /// the id.
    #[arg(long, short, global = true, help_heading = GLOBAL)]
    pub quiet: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `on` or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    /// Enable.
    On,
    /// Disable.
    Off,
}

impl OnOff {
    /// As a boolean.
    pub fn enabled(self) -> bool {
        self == OnOff::On
    }
}

/// A placement policy of `create`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Policy {
    /// Fill the busiest GPU that fits first.
    Pack,
    /// Spread over the GPUs.
    Spread,
    /// The GPU with the lowest measured utilization.
    LeastBusy,
}

impl Policy {
    /// The option's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Pack => "pack",
            Policy::Spread => "spread",
            Policy::LeastBusy => "least-busy",
        }
    }
}

/// A shell to complete in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    /// GNU bash.
    Bash,
    /// zsh.
    Zsh,
    /// fish.
    Fish,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the GPUs (`gpus show ADDR`: every property of one).
    Gpus {
        /// `show ADDR`.
        #[command(subcommand)]
        show: Option<GpusCommand>,
    },
    /// Every property of a GPU.
    Gpu {
        /// PCI address (`0000:41:00.0`).
        #[arg(value_name = "ADDRESS")]
        gpu: String,
    },
    /// List the device types the GPUs offer.
    Types {
        /// Only types with room for one more now.
        #[arg(long)]
        available: bool,
        /// Only the types of this GPU.
        #[arg(long, value_name = "ADDR")]
        gpu: Option<String>,
    },
    /// A type's details (GetTypeInfo).
    TypeInfo {
        /// Type id, name, or name without the vendor prefix.
        r#type: String,
        /// The GPU to ask about.
        #[arg(long, value_name = "ADDR")]
        parent: Option<String>,
    },
    /// List the devices.
    Devices,
    /// Every property of a device.
    Device {
        /// Its UUID.
        uuid: String,
    },
    /// Create a device of a type (`--quiet`: print only its UUID).
    Create(CreateArgs),
    /// Remove a device (stops it and deletes its definition).
    Remove {
        /// Its UUID.
        uuid: String,
    },
    /// Start a defined, inactive device.
    Start {
        /// Its UUID.
        uuid: String,
    },
    /// Stop an active device, keeping its definition.
    Stop {
        /// Its UUID.
        uuid: String,
    },
    /// Change whether a device is persistent or starts automatically.
    Modify {
        /// Its UUID.
        uuid: String,
        /// Keep a definition across reboots (`--persistent false`: the old spelling of
        /// --no-persistent).
        #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", action = ArgAction::Set)]
        persistent: Option<bool>,
        /// Keep no definition: gone after a reboot.
        #[arg(long, conflicts_with = "persistent")]
        no_persistent: bool,
        /// Start it whenever its GPU appears (`--autostart false`: the old spelling of
        /// --no-autostart).
        #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", action = ArgAction::Set)]
        autostart: Option<bool>,
        /// Do not start it when its GPU appears.
        #[arg(long, conflicts_with = "autostart")]
        no_autostart: bool,
    },
    /// Print a device's libvirt <hostdev> XML.
    Xml {
        /// Its UUID.
        uuid: String,
        /// An mdev drives the guest's display.
        #[arg(long)]
        display: bool,
        /// An mdev's display through ramfb (boot screen).
        #[arg(long)]
        ramfb: bool,
        /// The guest PCI bus of a PCI device.
        #[arg(long, value_name = "N")]
        guest_bus: Option<u32>,
    },
    /// Render a complete libvirt domain for devices.
    Domain(DomainArgs),
    /// Attach a device to a libvirt domain.
    Attach(AttachArgs),
    /// Detach a device from a libvirt domain.
    Detach(AttachArgs),
    /// How many more of a type the host can take now.
    Capacity {
        /// Type id, name, or `passthrough`.
        r#type: String,
        /// Only this GPU (or VF).
        #[arg(long, value_name = "ADDR")]
        parent: Option<String>,
        /// Only GPUs on this NUMA node.
        #[arg(long, value_name = "N")]
        numa_node: Option<u32>,
    },
    /// What vgpud made here, for OpenStack Nova (nova.conf) or Placement.
    Export {
        /// `nova` or `placement`.
        #[command(subcommand)]
        what: ExportCommand,
    },
    /// What was asked for of a type (GetDemand), or its forecast (GetForecast).
    Demand {
        /// Type id, name, or `passthrough`.
        r#type: String,
        /// How many hours back (with --forecast: ahead), at most 1344 (8 weeks).
        #[arg(long, value_name = "HOURS", default_value_t = 24)]
        hours: u64,
        /// The step of the rows, in minutes (a multiple of 5).
        #[arg(long, value_name = "MINUTES", default_value_t = 60)]
        step: u64,
        /// The forecast of the hours ahead, and how the last week's forecasts did.
        #[arg(long)]
        forecast: bool,
    },
    /// Enable N SR-IOV VFs on a GPU (0 disables them).
    Vfs {
        /// The GPU.
        gpu: String,
        /// How many.
        count: u32,
        /// Not again at boot.
        #[arg(long)]
        transient: bool,
        /// Let enabling the VFs wipe the GPU's MIG GPU instances (refused without it).
        #[arg(long)]
        force: bool,
    },
    /// NVIDIA's heterogeneous (mixed-size) vGPU mode of a GPU.
    Heterogeneous {
        /// The GPU.
        gpu: String,
        /// on or off.
        mode: OnOff,
        /// Not again at boot.
        #[arg(long)]
        transient: bool,
    },
    /// MIG: profiles, mode, GPU instances.
    #[command(subcommand)]
    Mig(MigCommand),
    /// The vGPU time-slice scheduler.
    #[command(subcommand)]
    Scheduler(SchedulerCommand),
    /// Telemetry of a GPU or a vGPU device (NVML).
    Metrics {
        /// A GPU's address or a device's UUID.
        target: String,
    },
    /// List the layouts (etc/vgpud/layouts).
    Layouts,
    /// Apply a layout; refused and failed steps exit 4.
    Apply {
        /// The layout's name.
        name: String,
        /// Only print the plan.
        #[arg(long)]
        dry_run: bool,
    },
    /// What differs between a layout and the host.
    Diff {
        /// The layout's name.
        name: String,
    },
    /// Print vgpud's events as they come, until interrupted.
    Watch {
        /// Exit after this many events.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
    /// Print a shell completion script.
    Completions {
        /// bash, zsh or fish.
        shell: Shell,
    },
    /// Print the man page (roff).
    Man,
}

/// `export`.
#[derive(Debug, Subcommand)]
pub enum ExportCommand {
    /// nova.conf's [devices] and [mdev_<type>] sections for the mdevs vgpud made here.
    Nova {
        /// Also serve this type on GPUs without devices (id, name or short name; repeatable).
        #[arg(long = "type", value_name = "TYPE")]
        types: Vec<String>,
    },
    /// The inventory as OpenStack Placement would hold it, as JSON: a provider per GPU.
    Placement {
        /// The compute node's name in Placement (default: the host's name).
        #[arg(long, value_name = "NAME")]
        node: Option<String>,
        /// Also serve this type on GPUs without devices (repeatable).
        #[arg(long = "type", value_name = "TYPE")]
        types: Vec<String>,
    },
}

/// `gpus show`.
#[derive(Debug, Subcommand)]
pub enum GpusCommand {
    /// Every property of a GPU.
    Show {
        /// PCI address.
        #[arg(value_name = "ADDRESS")]
        gpu: String,
    },
}

/// `create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Type id (`nvidia-259`), name (`GRID RTX6000-4Q`), name without vendor prefix
    /// (`RTX6000-4Q`), or `passthrough`.
    pub r#type: String,
    /// The GPU (or VF) to put it on.
    #[arg(long, value_name = "ADDR")]
    pub parent: Option<String>,
    /// A free tag, such as the libvirt domain's name.
    #[arg(long)]
    pub owner: Option<String>,
    /// The UUID to give it.
    #[arg(long)]
    pub uuid: Option<String>,
    /// No definition: gone after a reboot.
    #[arg(long)]
    pub transient: bool,
    /// Start it whenever its GPU appears (the default).
    #[arg(long, conflicts_with = "no_autostart")]
    pub autostart: bool,
    /// Do not start it when its GPU appears.
    #[arg(long)]
    pub no_autostart: bool,
    /// Where to put it without --parent.
    #[arg(long)]
    pub policy: Option<Policy>,
    /// Only GPUs on this NUMA node.
    #[arg(long, value_name = "N")]
    pub numa_node: Option<u32>,
    /// NVIDIA vGPU parameters (`frame_rate_limiter=0`).
    #[arg(long)]
    pub params: Option<String>,
    /// Passthrough: also take the console's GPU and the rest of its IOMMU group.
    #[arg(long)]
    pub force: bool,
    /// With --uuid: a device of that UUID and type is the answer.
    #[arg(long)]
    pub exist_ok: bool,
    /// MIG-backed types: do not make a GPU instance, use a free one.
    #[arg(long)]
    pub no_create_instance: bool,
    /// Reclaim the device once the domain named by --owner has not run for this long.
    #[arg(long, value_name = "SECONDS", requires = "owner")]
    pub lease: Option<u32>,
    /// Hand out a spare of this pool (a layout's owner tag) at once when it has one.
    #[arg(long, value_name = "TAG", conflicts_with = "uuid")]
    pub pool: Option<String>,
}

/// `domain`.
#[derive(Debug, Args)]
pub struct DomainArgs {
    /// The domain's name.
    pub name: String,
    /// The devices, the first drives the display.
    #[arg(required = true)]
    pub uuids: Vec<String>,
    /// The template (`vdi`, `minimal`, or etc/vgpud/templates/NAME.xml).
    #[arg(long)]
    pub template: Option<String>,
    /// Memory in MiB.
    #[arg(long, value_name = "MIB")]
    pub memory_mib: Option<u64>,
    /// vCPUs.
    #[arg(long, value_name = "N")]
    pub vcpus: Option<u32>,
    /// A disk image's absolute path.
    #[arg(long, value_name = "PATH")]
    pub disk: Option<String>,
    /// A libvirt network.
    #[arg(long)]
    pub network: Option<String>,
    /// UEFI firmware.
    #[arg(long)]
    pub uefi: bool,
    /// `vnc` or `spice`.
    #[arg(long)]
    pub graphics: Option<String>,
    /// The first vGPU does not drive the display.
    #[arg(long)]
    pub no_display: bool,
    /// The domain's UUID.
    #[arg(long, value_name = "UUID")]
    pub domain_uuid: Option<String>,
}

/// `attach` and `detach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The device's UUID.
    pub uuid: String,
    /// The libvirt domain.
    pub domain: String,
    /// The running domain.
    #[arg(long)]
    pub live: bool,
    /// The domain's persistent configuration.
    #[arg(long)]
    pub config: bool,
}

/// `mig`.
#[derive(Debug, Subcommand)]
pub enum MigCommand {
    /// A GPU's GPU-instance profiles.
    Profiles {
        /// The GPU.
        gpu: String,
    },
    /// MIG on or off.
    Mode {
        /// The GPU.
        gpu: String,
        /// on or off.
        mode: OnOff,
        /// Not recorded for the boot restore.
        #[arg(long)]
        transient: bool,
    },
    /// Make a GPU instance (`--quiet`: print only its id).
    Create {
        /// The GPU.
        gpu: String,
        /// Profile ID or name (`3g.71gb`).
        profile: String,
        /// The placement's start slice.
        #[arg(long, value_name = "N")]
        placement: Option<u32>,
        /// No compute instance spanning it.
        #[arg(long)]
        no_compute_instance: bool,
        /// Not made again at boot.
        #[arg(long)]
        transient: bool,
    },
    /// Destroy a GPU instance no device uses.
    Destroy {
        /// The GPU.
        gpu: String,
        /// The instance's id.
        id: u32,
    },
    /// A GPU's GPU instances.
    Instances {
        /// The GPU.
        gpu: String,
    },
}

/// `scheduler`.
#[derive(Debug, Subcommand)]
pub enum SchedulerCommand {
    /// Set the scheduler.
    Set(SchedulerArgs),
    /// A GPU's scheduler now.
    Show {
        /// The GPU.
        gpu: String,
    },
}

/// `scheduler set`.
#[derive(Debug, Args)]
pub struct SchedulerArgs {
    /// The GPU.
    pub gpu: String,
    /// `best-effort`, `equal-share` or `fixed-share`.
    #[arg(long)]
    pub policy: Option<String>,
    /// Time slice, 1-30 ms (without ARR).
    #[arg(long, value_name = "MS")]
    pub timeslice_ms: Option<u32>,
    /// Adaptive round robin on (`--arr false`: the old spelling of --no-arr).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", action = ArgAction::Set)]
    pub arr: Option<bool>,
    /// Adaptive round robin off.
    #[arg(long, conflicts_with = "arr")]
    pub no_arr: bool,
    /// ARR's averaging factor, 1-60.
    #[arg(long, value_name = "N")]
    pub avg_factor: Option<u32>,
    /// ARR's frequency, 63-960 Hz.
    #[arg(long, value_name = "HZ")]
    pub frequency_hz: Option<u32>,
    /// Only for the next driver load, not now.
    #[arg(long)]
    pub no_runtime: bool,
    /// Not for the next driver load.
    #[arg(long)]
    pub transient: bool,
}

/// A boolean given as `--NAME [BOOL]` or `--no-NAME`: `None` when neither is given.
pub fn either(yes: Option<bool>, no: bool) -> Option<bool> {
    if no {
        Some(false)
    } else {
        yes
    }
}
