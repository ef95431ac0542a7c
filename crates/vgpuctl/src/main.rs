//! `vgpuctl`: the operator's command line of vgpud, through the typed client
//! (`vgpud-client`). Tables by default, `--json` everywhere; exit codes by error class.

mod cli;
mod export;
mod man;
mod output;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use futures_util::StreamExt;
use serde::Serialize;
use vgpud_client::{
    BusChoice, Client, DeviceDetails, Error, ErrorClass, Event, GpuDetails, Options, Result,
};

use cli::{Cli, Command, GpusCommand, MigCommand, SchedulerCommand};
use output::{dash, key_values, list, on_off, size, yes_no, Table};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match &cli.command {
        Command::Completions { shell } => {
            let shell = match shell {
                cli::Shell::Bash => clap_complete::Shell::Bash,
                cli::Shell::Zsh => clap_complete::Shell::Zsh,
                cli::Shell::Fish => clap_complete::Shell::Fish,
            };
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "vgpuctl", &mut text);
            emit_bytes(&text);
            return ExitCode::SUCCESS;
        }
        Command::Man => {
            return match man::render(Cli::command()) {
                Ok(page) => {
                    emit_bytes(&page);
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("vgpuctl: cannot render the man page: {e}");
                    ExitCode::from(1)
                }
            };
        }
        _ => {}
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("vgpuctl: cannot start: {e}");
            return ExitCode::from(1);
        }
    };
    let bus = match (&cli.host, &cli.address, cli.session) {
        (Some(h), _, _) => BusChoice::Host(h.clone()),
        (None, Some(a), _) => BusChoice::Address(a.clone()),
        (None, None, true) => BusChoice::Session,
        (None, None, false) => BusChoice::System,
    };
    match runtime.block_on(run(cli, &bus)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            match unreachable(&e, &bus) {
                Some(text) => eprintln!("vgpuctl: {text}"),
                None => match hint(&e) {
                    Some(h) => eprintln!("vgpuctl: {}: {}\n  {h}", e.name(), e.message()),
                    None => eprintln!("vgpuctl: {}: {}", e.name(), e.message()),
                },
            }
            ExitCode::from(exit_code(e.class()))
        }
    }
}

/// The system bus's address when `DBUS_SYSTEM_BUS_ADDRESS` does not say another.
const SYSTEM_BUS: &str = "unix:path=/var/run/dbus/system_bus_socket";

/// The bus vgpuctl asked, in words, with its address.
fn bus_words(bus: &BusChoice) -> String {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    match bus {
        BusChoice::System => format!(
            "the system bus ({})",
            var("DBUS_SYSTEM_BUS_ADDRESS").unwrap_or_else(|| SYSTEM_BUS.into())
        ),
        BusChoice::Session => format!(
            "the session bus ({})",
            var("DBUS_SESSION_BUS_ADDRESS")
                .unwrap_or_else(|| "DBUS_SESSION_BUS_ADDRESS is not set".into())
        ),
        BusChoice::Address(a) => format!("the bus at {a}"),
        BusChoice::Host(h) => format!("the system bus of {h} (over ssh)"),
    }
}

/// What an unreachable vgpud means, in plain words with what to check: no bus there, or no
/// vgpud on it. `None` for any other error.
fn unreachable(e: &Error, bus: &BusChoice) -> Option<String> {
    let words = bus_words(bus);
    let other = match bus {
        BusChoice::System => "If vgpud serves another bus, name it: --session, or --address ADDRESS",
        BusChoice::Session => "Unless told otherwise, vgpud serves the system bus: leave out --session, or name its bus with --address ADDRESS",
        BusChoice::Address(_) => "Without --address, vgpuctl asks the system bus (with --session, the session bus)",
        BusChoice::Host(_) => "vgpuctl runs `ssh -xT -- HOST systemd-stdio-bridge`: HOST must let you in without a password prompt and have systemd",
    };
    match e {
        Error::NotRunning { name, .. }
            if name.ends_with(".ServiceUnknown") || name.ends_with(".NameHasNoOwner") =>
        {
            Some(format!(
                "vgpud is not running on {words}: nothing there owns org.vgpud1 ({name}).\n  \
                 Is vgpud started? See `systemctl status vgpud` (and `journalctl -u vgpud`).\n  \
                 Is it on another bus? {other}."
            ))
        }
        Error::Bus(z) => {
            let reason = z.to_string();
            // zbus says "failed to connect to `ADDRESS`: why"; the address is said already.
            let reason = reason
                .rsplit_once("`: ")
                .map_or(reason.as_str(), |(_, r)| r);
            let socket = socket_of(bus);
            let there = match &socket {
                Some(p) if !std::path::Path::new(p).exists() => {
                    format!("{p} does not exist, so no bus listens there")
                }
                Some(p) => format!("{p} exists, yet the bus did not let vgpuctl in"),
                None => "the address may be wrong".into(),
            };
            let dbus = if matches!(bus, BusChoice::System) {
                " (is D-Bus running? `systemctl status dbus`)"
            } else {
                ""
            };
            Some(format!(
                "cannot reach {words}: {reason}.\n  \
                 Is the bus there? {there}{dbus}.\n  \
                 Is vgpud running? See `systemctl status vgpud`.\n  \
                 Is it on another bus? {other}."
            ))
        }
        _ => None,
    }
}

/// What to try after an error, in a line: the command that lists what was not found, or
/// who may call vgpud. `None` when there is nothing to add.
fn hint(e: &Error) -> Option<&'static str> {
    match e {
        Error::NotFound(m) if m.contains("offer type") || m.contains("offers type") => {
            Some("`vgpuctl types` lists the types the GPUs offer.")
        }
        Error::NotFound(m) if m.starts_with("no device ") => {
            Some("`vgpuctl devices` lists the devices.")
        }
        Error::NotFound(m) if m.starts_with("no GPU ") => Some("`vgpuctl gpus` lists the GPUs."),
        Error::NotFound(m) if m.starts_with("no layout ") => {
            Some("`vgpuctl layouts` lists the layouts.")
        }
        _ if e.class() == ErrorClass::Denied => Some(
            "Run it as root, or as a member of the group vgpud (devices only; the host's \
             settings need root).",
        ),
        _ => None,
    }
}

/// The socket path of a `unix:path=` address.
fn socket_of(bus: &BusChoice) -> Option<String> {
    let address = match bus {
        BusChoice::System => std::env::var("DBUS_SYSTEM_BUS_ADDRESS")
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| SYSTEM_BUS.into()),
        BusChoice::Session => std::env::var("DBUS_SESSION_BUS_ADDRESS").ok()?,
        BusChoice::Address(a) => a.clone(),
        BusChoice::Host(_) => return None,
    };
    let rest = address.split(';').next()?.strip_prefix("unix:")?;
    rest.split(',')
        .find_map(|kv| kv.strip_prefix("path="))
        .map(str::to_string)
}

/// The exit code of a class of failure (`vgpuctl --help` lists them).
fn exit_code(class: ErrorClass) -> u8 {
    match class {
        ErrorClass::Host => 1,
        ErrorClass::Usage => 2,
        ErrorClass::NotFound => 3,
        ErrorClass::Conflict => 4,
        ErrorClass::Denied => 5,
        ErrorClass::Unreachable => 6,
    }
}

/// Writes to stdout; a closed pipe is not an error worth a message.
fn emit(text: &str) -> bool {
    emit_bytes(text.as_bytes())
}

fn emit_bytes(bytes: &[u8]) -> bool {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes).and_then(|()| out.flush()).is_ok()
}

/// A JSON document, pretty, with a final newline.
/// The compute node's name for Placement: the host `--host` names (without its user), else
/// this machine's name.
fn node_name(host: Option<&str>) -> String {
    match host {
        Some(h) => h.rsplit_once('@').map_or(h, |(_, name)| name).to_string(),
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "localhost".into()),
    }
}

/// `vgpuctl demand TYPE`: the demand of the last `hours`, a row per `step_min` minutes.
async fn demand(client: &Client, ty: &str, hours: u64, step_min: u64, j: bool) -> Result<String> {
    let to = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let options = Options::new()
        .u64("from", to.saturating_sub(hours.saturating_mul(3600)))
        .u64("to", to)
        .u32(
            "step",
            u32::try_from(step_min.saturating_mul(60)).unwrap_or(u32::MAX),
        );
    let rows = client.demand(ty, &options).await?;
    let names = ["requests", "warm", "cold", "refused", "released"];
    if j {
        let rows: Vec<serde_json::Value> = rows
            .iter()
            .map(|(at, r, w, c, f, l)| {
                let mut o = serde_json::Map::new();
                o.insert("time".into(), output::iso_time(*at).into());
                for (k, v) in names.iter().zip([r, w, c, f, l]) {
                    o.insert((*k).into(), (*v).into());
                }
                o.into()
            })
            .collect();
        return json(&rows);
    }
    let mut t = Table::new(&["TIME", "REQUESTS", "WARM", "COLD", "REFUSED", "RELEASED"]);
    for (at, r, w, c, f, l) in &rows {
        t.row(vec![
            output::local_time(*at),
            r.to_string(),
            w.to_string(),
            c.to_string(),
            f.to_string(),
            l.to_string(),
        ]);
    }
    Ok(t.render())
}

/// `vgpuctl demand --forecast TYPE`: the hours ahead, the last week's error and the refill's
/// lead time (once measured).
async fn forecast_of(client: &Client, ty: &str, hours: u64, j: bool) -> Result<String> {
    let options = Options::new().u32("hours", u32::try_from(hours).unwrap_or(u32::MAX));
    let (week, ahead, error) = client.forecast(ty, &options).await?;
    if j {
        let hour = |at: u64, f: f64| {
            let mut o = serde_json::Map::new();
            o.insert("time".into(), output::iso_time(at).into());
            o.insert("forecast".into(), f.into());
            o
        };
        let mut o = serde_json::Map::new();
        o.insert("type".into(), ty.into());
        o.insert(
            "ahead".into(),
            ahead
                .iter()
                .map(|(at, f)| hour(*at, *f).into())
                .collect::<Vec<serde_json::Value>>()
                .into(),
        );
        o.insert(
            "last_week".into(),
            week.iter()
                .map(|(at, f, a)| {
                    let mut h = hour(*at, *f);
                    h.insert("actual".into(), (*a).into());
                    h.into()
                })
                .collect::<Vec<serde_json::Value>>()
                .into(),
        );
        o.insert(
            "error".into(),
            serde_json::to_value(&error).unwrap_or_default(),
        );
        return json(&o);
    }
    let mut t = Table::new(&["HOUR", "FORECAST"]);
    for (at, f) in &ahead {
        t.row(vec![output::local_time(*at), format!("{f:.1}")]);
    }
    let figure = |k: &str| error.get(k).and_then(serde_json::Value::as_f64);
    let summary = match (figure("requests"), figure("mean_abs_error"), figure("relative_error")) {
        (Some(n), Some(mae), Some(rel)) => format!(
            "last week: {n:.0} requests; the forecast missed by {mae:.2} per hour on average ({:.0}% of the requests)\n",
            rel * 100.0
        ),
        _ => "last week: no requests to compare the forecast with\n".to_string(),
    };
    let lead = figure("refill_lead_s").map_or(String::new(), |s| {
        format!("forecast pools keep the spares for a refill's lead of {s:.1} s\n")
    });
    Ok(t.render() + &summary + &lead)
}

fn json<T: Serialize + ?Sized>(value: &T) -> Result<String> {
    serde_json::to_string_pretty(value)
        .map(|s| s + "\n")
        .map_err(|e| Error::Other {
            name: "org.vgpud1.vgpuctl.Error".into(),
            message: format!("cannot write JSON: {e}"),
        })
}

/// A GPU with its object path (`gpus --json`, `gpu --json`).
#[derive(Serialize)]
struct GpuEntry {
    #[serde(flatten)]
    details: GpuDetails,
    path: String,
}

/// A device with its object path (`devices --json`, `device --json`).
struct DeviceEntry {
    details: DeviceDetails,
    path: String,
}

/// A device as `--json` shows it: its properties in the client's order, `created` as a local
/// ISO 8601 time (`null` when another tool made it), then the object path.
#[derive(Serialize)]
struct DeviceJson<'a> {
    uuid: &'a str,
    kind: &'a str,
    parent: &'a str,
    gpu: &'a str,
    address: &'a str,
    functions: &'a [(String, String)],
    type_id: &'a str,
    type_name: &'a str,
    owner: &'a str,
    iommu_group: i32,
    attributes: &'a BTreeMap<String, String>,
    active: bool,
    persistent: bool,
    autostart: bool,
    created: Option<String>,
    path: &'a str,
}

impl Serialize for DeviceEntry {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let d = &self.details;
        DeviceJson {
            uuid: &d.uuid,
            kind: &d.kind,
            parent: &d.parent,
            gpu: &d.gpu,
            address: &d.address,
            functions: &d.functions,
            type_id: &d.type_id,
            type_name: &d.type_name,
            owner: &d.owner,
            iommu_group: d.iommu_group,
            attributes: &d.attributes,
            active: d.active,
            persistent: d.persistent,
            autostart: d.autostart,
            created: output::iso_time(d.created),
            path: &self.path,
        }
        .serialize(s)
    }
}

/// A missing object's property read (`UnknownObject`) as `NotFound`, naming what.
fn missing(e: Error, what: &str) -> Error {
    match e.name() {
        "org.freedesktop.DBus.Error.UnknownObject"
        | "org.freedesktop.DBus.Error.UnknownInterface" => {
            Error::NotFound(format!("no {what} on this host"))
        }
        _ => e,
    }
}

async fn gpu_entry(client: &Client, address: &str) -> Result<GpuEntry> {
    let details = client
        .gpu(address)
        .await
        .map_err(|e| missing(e, &format!("GPU {address}")))?;
    Ok(GpuEntry {
        details,
        path: vgpud_client::paths::gpu_path(address).to_string(),
    })
}

async fn device_entry(client: &Client, uuid: &str) -> Result<DeviceEntry> {
    let details = client
        .device(uuid)
        .await
        .map_err(|e| missing(e, &format!("device {uuid}")))?;
    Ok(DeviceEntry {
        details,
        path: vgpud_client::paths::device_path(uuid).to_string(),
    })
}

/// A simple JSON answer to a change: what was done, to what.
fn done(pairs: &[(&str, serde_json::Value)]) -> BTreeMap<String, serde_json::Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

async fn run(cli: Cli, bus: &BusChoice) -> Result<u8> {
    let client = Client::connect(bus).await?;
    let j = cli.json;
    let cli_host = cli.host.clone();
    let say = Say {
        json: j,
        quiet: cli.quiet,
    };
    let text = match cli.command {
        Command::Gpus { show: None } => gpus(&client, j).await?,
        Command::Gpus {
            show: Some(GpusCommand::Show { gpu }),
        }
        | Command::Gpu { gpu } => {
            let g = gpu_entry(&client, &gpu).await?;
            if j {
                json(&g)?
            } else {
                gpu_text(&g)
            }
        }
        Command::Types { available, gpu } => {
            let types: Vec<_> = client
                .list_types()
                .await?
                .into_iter()
                .filter(|t| !available || t.available > 0)
                .filter(|t| gpu.as_ref().is_none_or(|g| &t.gpu == g))
                .collect();
            if j {
                json(&types)?
            } else {
                let mut t = Table::new(&["GPU", "ID", "NAME", "FRAMEBUFFER", "MAX", "AVAILABLE"]);
                for ty in &types {
                    t.row(vec![
                        ty.gpu.clone(),
                        ty.id.clone(),
                        ty.name.clone(),
                        output::framebuffer(ty.framebuffer),
                        output::count(ty.max_instances),
                        ty.available.to_string(),
                    ]);
                }
                t.render()
            }
        }
        Command::TypeInfo { r#type, parent } => {
            let info = client
                .type_info(&r#type, &Options::new().str_opt("parent", parent))
                .await?;
            if j {
                json(&info)?
            } else {
                output::dict(&info)
            }
        }
        Command::Devices => devices(&client, j).await?,
        Command::Device { uuid } => {
            let d = device_entry(&client, &uuid).await?;
            if j {
                json(&d)?
            } else {
                device_text(&d)
            }
        }
        Command::Create(a) => {
            let mut o = Options::new()
                .str_opt("parent", a.parent)
                .str_opt("owner", a.owner)
                .str_opt("uuid", a.uuid)
                .str_opt("params", a.params)
                .str_opt("policy", a.policy.map(|p| p.as_str()))
                .u32_opt("numa_node", a.numa_node)
                .str_opt("pool", a.pool);
            if a.transient {
                o = o.bool("persistent", false);
            }
            if let Some(autostart) = cli::either(a.autostart.then_some(true), a.no_autostart) {
                o = o.bool("autostart", autostart);
            }
            if a.force {
                o = o.bool("force", true);
            }
            if a.exist_ok {
                o = o.bool("exist_ok", true);
            }
            if a.no_create_instance {
                o = o.bool("create_instance", false);
            }
            o = o.u32_opt("lease_s", a.lease);
            let (uuid, path) = client.create_device(&a.r#type, &o).await?;
            if j {
                json(&done(&[("uuid", uuid.into()), ("path", path.into())]))?
            } else if say.quiet {
                format!("{uuid}\n")
            } else {
                // What it became, where; the UUID alone if the device is already gone again.
                match client.device(&uuid).await {
                    Ok(d) => format!(
                        "created {} {uuid} ({}) on {}\n",
                        d.kind,
                        output::dash(&d.type_name),
                        output::dash(&d.parent)
                    ),
                    Err(_) => format!("created device {uuid}\n"),
                }
            }
        }
        Command::Remove { uuid } => {
            client.remove_device(&uuid, &Options::new()).await?;
            let line = format!("removed device {uuid}");
            say.changed(&line, &[("uuid", uuid.into()), ("removed", true.into())])?
        }
        Command::Start { uuid } => {
            client.start_device(&uuid, &Options::new()).await?;
            let line = format!("started device {uuid}");
            say.changed(&line, &[("uuid", uuid.into()), ("active", true.into())])?
        }
        Command::Stop { uuid } => {
            client.stop_device(&uuid, &Options::new()).await?;
            let line = format!("stopped device {uuid} (its definition stays)");
            say.changed(&line, &[("uuid", uuid.into()), ("active", false.into())])?
        }
        Command::Modify {
            uuid,
            persistent,
            no_persistent,
            autostart,
            no_autostart,
        } => {
            let persistent = cli::either(persistent, no_persistent);
            let autostart = cli::either(autostart, no_autostart);
            let o = Options::new()
                .bool_opt("persistent", persistent)
                .bool_opt("autostart", autostart);
            client.modify_device(&uuid, &o).await?;
            let mut now = Vec::new();
            let mut fields = vec![("uuid", serde_json::Value::from(uuid.clone()))];
            if let Some(p) = persistent {
                now.push(format!("persistent {}", yes_no(p)));
                fields.push(("persistent", p.into()));
            }
            if let Some(a) = autostart {
                now.push(format!("autostart {}", yes_no(a)));
                fields.push(("autostart", a.into()));
            }
            let line = if now.is_empty() {
                format!("device {uuid}: nothing asked to change")
            } else {
                format!("modified device {uuid}: {}", now.join(", "))
            };
            say.changed(&line, &fields)?
        }
        Command::Xml {
            uuid,
            display,
            ramfb,
            guest_bus,
        } => {
            let mut o = Options::new().u32_opt("guest_bus", guest_bus);
            if display {
                o = o.bool("display", true);
            }
            if ramfb {
                o = o.bool("ramfb", true);
            }
            let xml = if o.is_empty() {
                client.hostdev_xml(&uuid).await?
            } else {
                client.render_hostdev_xml(&uuid, &o).await?
            };
            if j {
                json(&done(&[("uuid", uuid.into()), ("xml", xml.into())]))?
            } else {
                with_newline(xml)
            }
        }
        Command::Domain(a) => {
            let mut o = Options::new()
                .str_opt("template", a.template)
                .str_opt("disk", a.disk)
                .str_opt("network", a.network)
                .str_opt("graphics", a.graphics)
                .str_opt("uuid", a.domain_uuid)
                .u32_opt("vcpus", a.vcpus);
            if let Some(m) = a.memory_mib {
                o = o.u64("memory_mib", m);
            }
            if a.uefi {
                o = o.bool("uefi", true);
            }
            if a.no_display {
                o = o.bool("display", false);
            }
            let uuids: Vec<&str> = a.uuids.iter().map(String::as_str).collect();
            let xml = client.render_domain(&a.name, &uuids, &o).await?;
            if j {
                json(&done(&[("name", a.name.into()), ("xml", xml.into())]))?
            } else {
                with_newline(xml)
            }
        }
        Command::Attach(a) => attachment(&client, say, a, true).await?,
        Command::Detach(a) => attachment(&client, say, a, false).await?,
        Command::Export { what } => {
            let tree = client.tree().await?;
            let types = client.list_types().await?;
            match what {
                cli::ExportCommand::Nova { types: wanted } => {
                    export::nova(&tree.gpus, &tree.devices, &types, &wanted)
                }
                cli::ExportCommand::Placement {
                    node,
                    types: wanted,
                } => {
                    let node = node.unwrap_or_else(|| node_name(cli_host.as_deref()));
                    json(&export::placement(
                        &node,
                        &tree.gpus,
                        &tree.devices,
                        &types,
                        &wanted,
                    ))?
                }
            }
        }
        Command::Demand {
            r#type,
            hours,
            step,
            forecast,
        } => {
            if forecast {
                forecast_of(&client, &r#type, hours, j).await?
            } else {
                demand(&client, &r#type, hours, step, j).await?
            }
        }
        Command::Capacity {
            r#type,
            parent,
            numa_node,
        } => {
            let o = Options::new()
                .str_opt("parent", parent)
                .u32_opt("numa_node", numa_node);
            let n = client.capacity(&r#type, &o).await?;
            if j {
                json(&done(&[("type", r#type.into()), ("capacity", n.into())]))?
            } else {
                format!("{n}\n")
            }
        }
        Command::Vfs {
            gpu,
            count,
            transient,
            force,
        } => {
            let mut options = persistence(transient);
            if force {
                options = options.bool("force", true);
            }
            let n = client.set_vf_count(&gpu, count, &options).await?;
            let line = if n == 0 {
                format!("{gpu}: VFs disabled")
            } else {
                format!("{gpu}: {n} VFs enabled")
            };
            say.changed(&line, &[("gpu", gpu.into()), ("num_vfs", n.into())])?
        }
        Command::Heterogeneous {
            gpu,
            mode,
            transient,
        } => {
            client
                .set_heterogeneous_mode(&gpu, mode.enabled(), &persistence(transient))
                .await?;
            let line = format!("{gpu}: heterogeneous mode {}", on_off(mode.enabled()));
            say.changed(
                &line,
                &[
                    ("gpu", gpu.into()),
                    ("heterogeneous_mode", mode.enabled().into()),
                ],
            )?
        }
        Command::Mig(m) => mig(&client, m, say).await?,
        Command::Scheduler(SchedulerCommand::Set(a)) => {
            let mut o = Options::new()
                .str_opt("policy", a.policy)
                .u32_opt("timeslice_ms", a.timeslice_ms)
                .bool_opt("arr", cli::either(a.arr, a.no_arr))
                .u32_opt("avg_factor", a.avg_factor)
                .u32_opt("frequency_hz", a.frequency_hz);
            if a.no_runtime {
                o = o.bool("runtime", false);
            }
            if a.transient {
                o = o.bool("persistent", false);
            }
            let result = client.set_scheduler(&a.gpu, &o).await?;
            if j {
                json(&result)?
            } else if say.quiet {
                String::new()
            } else {
                let when = match result.get("applied") {
                    Some(serde_json::Value::Bool(true)) => "set now",
                    _ => "set for the next driver load",
                };
                format!("{}: scheduler {when}\n{}", a.gpu, output::dict(&result))
            }
        }
        Command::Scheduler(SchedulerCommand::Show { gpu }) => {
            let g = gpu_entry(&client, &gpu).await?;
            if j {
                json(&g.details.scheduler)?
            } else {
                output::dict(&g.details.scheduler)
            }
        }
        Command::Metrics { target } => {
            let m = client.metrics(&target).await?;
            if j {
                json(&m)?
            } else {
                output::metrics(&m)
            }
        }
        Command::Layouts => {
            let layouts = client.list_layouts().await?;
            if j {
                json(&layouts)?
            } else {
                let mut t = Table::new(&["NAME", "DESCRIPTION"]);
                for l in &layouts {
                    t.row(vec![l.name.clone(), dash(&l.description)]);
                }
                t.render()
            }
        }
        Command::Apply { name, dry_run } => {
            let steps = client.apply_layout(&name, dry_run).await?;
            let text = if j {
                json(&steps)?
            } else if say.quiet && !dry_run {
                String::new()
            } else if steps.is_empty() {
                format!("nothing to do: the host is as layout {name} says\n")
            } else {
                let mut t = Table::new(&["STATUS", "GPU", "ACTION", "SUBJECT", "DETAIL"]);
                for s in &steps {
                    t.row(vec![
                        s.status.clone(),
                        dash(&s.gpu),
                        s.action.clone(),
                        dash(&s.subject),
                        dash(&s.detail),
                    ]);
                }
                t.render()
            };
            emit(&text);
            let refused = steps
                .iter()
                .any(|s| s.status == "refused" || s.status == "failed");
            return Ok(if refused { 4 } else { 0 });
        }
        Command::Diff { name } => {
            let diffs = client.diff_layout(&name).await?;
            if j {
                json(&diffs)?
            } else if diffs.is_empty() {
                format!("no difference: the host is as layout {name} says\n")
            } else {
                let mut t = Table::new(&["GPU", "ITEM", "WANTED", "ACTUAL"]);
                for d in &diffs {
                    t.row(vec![
                        dash(&d.gpu),
                        d.item.clone(),
                        dash(&d.wanted),
                        dash(&d.actual),
                    ]);
                }
                t.render()
            }
        }
        Command::Watch { count } => return watch(&client, count, j).await,
        Command::Completions { .. } | Command::Man => String::new(),
    };
    emit(&text);
    Ok(0)
}

fn with_newline(mut s: String) -> String {
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s
}

/// How to answer: JSON, and whether to confirm changes.
#[derive(Clone, Copy)]
struct Say {
    json: bool,
    quiet: bool,
}

impl Say {
    /// A change's answer: what changed with `--json`, else its confirmation `line` (nothing
    /// with `--quiet`).
    fn changed(self, line: &str, fields: &[(&str, serde_json::Value)]) -> Result<String> {
        if self.json {
            json(&done(fields))
        } else if self.quiet {
            Ok(String::new())
        } else {
            Ok(format!("{line}\n"))
        }
    }
}

/// `attach` (or, not `attach`, `detach`) and its confirmation.
async fn attachment(client: &Client, say: Say, a: cli::AttachArgs, attach: bool) -> Result<String> {
    let options = live_config(a.live, a.config);
    let (verb, to, key) = if attach {
        client.attach_device(&a.uuid, &a.domain, &options).await?;
        ("attached", "to", "attached_to")
    } else {
        client.detach_device(&a.uuid, &a.domain, &options).await?;
        ("detached", "from", "detached_from")
    };
    let line = format!(
        "{verb} device {} {to} domain {}{}",
        a.uuid,
        output::shown(&a.domain),
        live_config_words(a.live, a.config)
    );
    say.changed(&line, &[("uuid", a.uuid.into()), (key, a.domain.into())])
}

/// ` (live, config)` as attach and detach were asked, or nothing.
fn live_config_words(live: bool, config: bool) -> &'static str {
    match (live, config) {
        (true, true) => " (live and config)",
        (true, false) => " (live)",
        (false, true) => " (config)",
        (false, false) => "",
    }
}

fn persistence(transient: bool) -> Options {
    if transient {
        Options::new().bool("persistent", false)
    } else {
        Options::new()
    }
}

fn live_config(live: bool, config: bool) -> Options {
    let mut o = Options::new();
    if live {
        o = o.bool("live", true);
    }
    if config {
        o = o.bool("config", true);
    }
    o
}

/// Every GPU, read with the devices in one call (the whole tree).
async fn gpus(client: &Client, j: bool) -> Result<String> {
    let entries: Vec<GpuEntry> = client
        .tree()
        .await?
        .gpus
        .into_iter()
        .map(|details| GpuEntry {
            path: vgpud_client::paths::gpu_path(&details.address).to_string(),
            details,
        })
        .collect();
    if j {
        return json(&entries);
    }
    let mut t = Table::new(&[
        "ADDRESS", "MODEL", "DRIVER", "MODES", "VFS", "MIG", "DEVICES",
    ]);
    for e in &entries {
        let g = &e.details;
        t.row(vec![
            g.address.clone(),
            g.model.clone(),
            dash(&g.driver),
            dash(&g.sharing_modes.join(",")),
            if g.total_vfs == 0 {
                "-".into()
            } else {
                format!("{}/{}", g.num_vfs, g.total_vfs)
            },
            mig_text(g.mig_current, g.mig_pending),
            g.devices.len().to_string(),
        ]);
    }
    Ok(t.render())
}

fn mig_text(current: bool, pending: bool) -> String {
    if current == pending {
        on_off(current)
    } else {
        format!("{} ({} pending)", on_off(current), on_off(pending))
    }
}

fn gpu_text(e: &GpuEntry) -> String {
    let g = &e.details;
    let devices: Vec<String> = g
        .devices
        .iter()
        .map(|p| {
            p.rsplit('/')
                .next()
                .and_then(vgpud_client::paths::unescape_segment)
                .unwrap_or_else(|| p.clone())
        })
        .collect();
    let mut text = key_values(&[
        ("address", g.address.clone()),
        ("model", g.model.clone()),
        ("vendor_id", format!("0x{:04x}", g.vendor_id)),
        ("device_id", format!("0x{:04x}", g.device_id)),
        ("driver", dash(&g.driver)),
        ("iommu_group", signed(g.iommu_group)),
        ("numa_node", signed(g.numa_node)),
        ("sharing_modes", list(&g.sharing_modes)),
        ("types", list(&g.types)),
        ("devices", list(&devices)),
        ("vfs", format!("{}/{}", g.num_vfs, g.total_vfs)),
        ("vf_addresses", list(&g.vfs)),
        ("heterogeneous_mode", on_off(g.heterogeneous_mode)),
        ("mig", mig_text(g.mig_current, g.mig_pending)),
        ("gpu_instances", g.gpu_instances.len().to_string()),
        ("scheduler", output::inline(&g.scheduler)),
        ("path", e.path.clone()),
    ]);
    if !g.gpu_instances.is_empty() {
        text.push('\n');
        text.push_str(&instances_table(&g.gpu_instances));
    }
    text
}

fn instances_table(instances: &[vgpud_client::GpuInstance]) -> String {
    let mut t = Table::new(&["ID", "PROFILE", "PROFILE_ID", "PLACEMENT", "DEVICE"]);
    for i in instances {
        t.row(vec![
            i.id.to_string(),
            i.profile.clone(),
            i.profile_id.to_string(),
            format!("{}+{}", i.start, i.size),
            dash(&i.device),
        ]);
    }
    t.render()
}

/// -1 (none) as `-`.
fn signed(n: i32) -> String {
    if n < 0 {
        "-".into()
    } else {
        n.to_string()
    }
}

/// Every device, read with the GPUs in one call (the whole tree).
async fn devices(client: &Client, j: bool) -> Result<String> {
    let entries: Vec<DeviceEntry> = client
        .tree()
        .await?
        .devices
        .into_iter()
        .map(|details| DeviceEntry {
            path: vgpud_client::paths::device_path(&details.uuid).to_string(),
            details,
        })
        .collect();
    if j {
        return json(&entries);
    }
    let mut t = Table::new(&[
        "UUID",
        "KIND",
        "GPU",
        "PARENT",
        "TYPE",
        "OWNER",
        "ACTIVE",
        "PERSISTENT",
        "AUTOSTART",
    ]);
    for e in &entries {
        let d = &e.details;
        t.row(vec![
            d.uuid.clone(),
            d.kind.clone(),
            dash(&d.gpu),
            dash(&d.parent),
            dash(&d.type_name),
            dash(&d.owner),
            yes_no(d.active),
            yes_no(d.persistent),
            yes_no(d.autostart),
        ]);
    }
    Ok(t.render())
}

fn device_text(e: &DeviceEntry) -> String {
    let d = &e.details;
    let functions: Vec<String> = d
        .functions
        .iter()
        .map(|(f, driver)| format!("{f} ({driver})"))
        .collect();
    let attributes: Vec<String> = d
        .attributes
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    key_values(&[
        ("uuid", d.uuid.clone()),
        ("kind", d.kind.clone()),
        ("gpu", dash(&d.gpu)),
        ("parent", dash(&d.parent)),
        ("address", dash(&d.address)),
        ("functions", list(&functions)),
        ("type_id", dash(&d.type_id)),
        ("type_name", dash(&d.type_name)),
        ("owner", dash(&d.owner)),
        ("iommu_group", signed(d.iommu_group)),
        ("attributes", list(&attributes)),
        ("active", yes_no(d.active)),
        ("persistent", yes_no(d.persistent)),
        ("autostart", yes_no(d.autostart)),
        ("created", output::local_time(d.created)),
        ("path", e.path.clone()),
    ])
}

async fn mig(client: &Client, m: MigCommand, say: Say) -> Result<String> {
    let j = say.json;
    Ok(match m {
        MigCommand::Profiles { gpu } => {
            let profiles = client.mig_profiles(&gpu).await?;
            if j {
                json(&profiles)?
            } else {
                let mut t = Table::new(&[
                    "ID",
                    "NAME",
                    "SLICES",
                    "MEMORY",
                    "MAX",
                    "REMAINING",
                    "FREE PLACEMENTS",
                ]);
                for p in &profiles {
                    let free: Vec<String> = p
                        .free_placements
                        .iter()
                        .map(|pl| format!("{}+{}", pl.start, pl.size))
                        .collect();
                    t.row(vec![
                        p.id.to_string(),
                        p.name.clone(),
                        p.slices.to_string(),
                        size(p.memory),
                        p.max_instances.to_string(),
                        p.remaining.to_string(),
                        if free.is_empty() {
                            "-".into()
                        } else {
                            free.join(" ")
                        },
                    ]);
                }
                t.render()
            }
        }
        MigCommand::Mode {
            gpu,
            mode,
            transient,
        } => {
            let (current, pending) = client
                .set_mig_mode(&gpu, mode.enabled(), &persistence(transient))
                .await?;
            let line = format!("{gpu}: MIG {}", mig_text(current, pending));
            say.changed(
                &line,
                &[
                    ("gpu", gpu.into()),
                    ("mig_current", current.into()),
                    ("mig_pending", pending.into()),
                ],
            )?
        }
        MigCommand::Create {
            gpu,
            profile,
            placement,
            no_compute_instance,
            transient,
        } => {
            let mut o = persistence(transient).u32_opt("placement", placement);
            if no_compute_instance {
                o = o.bool("compute_instance", false);
            }
            let id = client.create_gpu_instance(&gpu, &profile, &o).await?;
            if j {
                json(&done(&[("gpu", gpu.into()), ("id", id.into())]))?
            } else if say.quiet {
                format!("{id}\n")
            } else {
                format!("{gpu}: made GPU instance {id} ({profile})\n")
            }
        }
        MigCommand::Destroy { gpu, id } => {
            client
                .destroy_gpu_instance(&gpu, id, &Options::new())
                .await?;
            let line = format!("{gpu}: destroyed GPU instance {id}");
            say.changed(
                &line,
                &[
                    ("gpu", gpu.into()),
                    ("id", id.into()),
                    ("destroyed", true.into()),
                ],
            )?
        }
        MigCommand::Instances { gpu } => {
            let g = gpu_entry(client, &gpu).await?;
            if j {
                json(&g.details.gpu_instances)?
            } else {
                instances_table(&g.details.gpu_instances)
            }
        }
    })
}

/// An event as a line for a human.
fn event_line(e: &Event) -> String {
    match e {
        Event::DeviceCreated { uuid, .. } => format!("device-created {uuid}"),
        Event::DeviceRemoved { uuid, .. } => format!("device-removed {uuid}"),
        Event::DeviceDrift { uuid, kind, detail } => {
            format!("device-drift {uuid} {kind} {detail}")
        }
        Event::DeviceReclaimed { uuid, reason } => format!("device-reclaimed {uuid} {reason}"),
        Event::GpuDrift { gpu, kind, detail } => format!("gpu-drift {gpu} {kind} {detail}"),
        Event::PropertiesChanged {
            path,
            interface,
            changed,
        } => {
            let mut line = format!("properties {path} {interface}");
            for (k, v) in changed {
                line.push_str(&format!(" {k}={v}"));
            }
            line
        }
    }
}

async fn watch(client: &Client, count: Option<u64>, j: bool) -> Result<u8> {
    use tokio::signal::unix::{signal, SignalKind};
    let signal_error = |e: std::io::Error| Error::Other {
        name: "org.vgpud1.vgpuctl.Error".into(),
        message: format!("cannot catch signals: {e}"),
    };
    let mut interrupt = signal(SignalKind::interrupt()).map_err(signal_error)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(signal_error)?;
    let mut events = client.events().await?;
    // The match rule is in place: say so (tests and scripts wait for this line).
    eprintln!("vgpuctl: watching org.vgpud1");
    let mut seen = 0u64;
    if count == Some(0) {
        return Ok(0);
    }
    loop {
        tokio::select! {
            event = events.next() => {
                let Some(event) = event else {
                    return Err(Error::NotRunning {
                        name: "org.freedesktop.DBus.Error.Disconnected".into(),
                        message: "the bus connection closed".into(),
                    });
                };
                let line = if j {
                    serde_json::to_string(&event).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
                } else {
                    event_line(&event)
                };
                if !emit(&format!("{line}\n")) {
                    return Ok(0);
                }
                seen += 1;
                if count.is_some_and(|c| seen >= c) {
                    return Ok(0);
                }
            }
            _ = interrupt.recv() => return Ok(0),
            _ = terminate.recv() => return Ok(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_class_has_its_documented_exit_code() {
        let code = |n: &str| exit_code(Error::from_answer(n, String::new()).class());
        assert_eq!(code("org.vgpud1.Error.Failed"), 1);
        assert_eq!(code("org.vgpud1.Error.NotSupported"), 1);
        assert_eq!(code("org.vgpud1.Error.Unsafe"), 1);
        assert_eq!(code("org.vgpud1.Error.Libvirt"), 1);
        assert_eq!(code("org.vgpud1.Error.InvalidArgument"), 2);
        assert_eq!(code("org.vgpud1.Error.NotFound"), 3);
        for conflict in ["NoCapacity", "Exists", "Busy", "NeedsReset"] {
            assert_eq!(code(&format!("org.vgpud1.Error.{conflict}")), 4);
        }
        assert_eq!(code("org.freedesktop.DBus.Error.AccessDenied"), 5);
        assert_eq!(
            code("org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"),
            5
        );
        assert_eq!(code("org.freedesktop.DBus.Error.ServiceUnknown"), 6);
    }

    #[test]
    fn errors_say_what_to_try() {
        let h = |e: Error| hint(&e);
        let types = Some("`vgpuctl types` lists the types the GPUs offer.");
        assert_eq!(
            h(Error::NotFound(
                "no GPU on this host offers type \"NOPE-1Q\"".into()
            )),
            types
        );
        assert_eq!(
            h(Error::NotFound(
                "GPU 0000:3b:00.0 does not offer type \"x\"".into()
            )),
            types
        );
        assert_eq!(
            h(Error::NotFound("no GPU 0000:99:00.0 on this host".into())),
            Some("`vgpuctl gpus` lists the GPUs.")
        );
        assert!(h(Error::from_answer(
            "org.freedesktop.DBus.Error.AccessDenied",
            "no".into()
        ))
        .is_some_and(|t| t.contains("group vgpud")));
        assert_eq!(h(Error::InvalidArgument("bad".into())), None);
    }

    #[test]
    fn a_missing_object_is_not_found() {
        let e = Error::from_answer("org.freedesktop.DBus.Error.UnknownObject", "x".into());
        assert_eq!(missing(e, "GPU 0000:01:00.0").class(), ErrorClass::NotFound);
    }
}
