//! The man page: clap_mangen's sections, then every command with its arguments, the exit
//! status and what to read next.

use clap::{Arg, Command};

/// Text for roff: backslashes and hyphens escaped, a leading `.` or `'` made literal.
fn esc(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

/// An argument as the synopsis shows it.
fn arg_synopsis(a: &Arg) -> String {
    let value = a
        .get_value_names()
        .and_then(|v| v.first())
        .map(|v| v.to_string())
        .unwrap_or_else(|| a.get_id().as_str().to_uppercase());
    match a.get_long() {
        Some(long) if a.get_action().takes_values() => {
            format!("[\\fB\\-\\-{}\\fR \\fI{}\\fR]", esc(long), esc(&value))
        }
        Some(long) => format!("[\\fB\\-\\-{}\\fR]", esc(long)),
        None if a.is_required_set() => format!("\\fI{}\\fR", esc(&value)),
        None => format!("[\\fI{}\\fR]", esc(&value)),
    }
}

/// The arguments of a command of its own (not the global ones, not help).
fn own_args(cmd: &Command) -> Vec<&Arg> {
    cmd.get_arguments()
        .filter(|a| !a.is_global_set() && !a.is_hide_set())
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .collect()
}

fn commands(out: &mut String, prefix: &str, cmd: &Command) {
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        let name = format!("{prefix} {}", sub.get_name());
        let args = own_args(sub);
        out.push_str(".TP\n");
        let mut synopsis = format!("\\fB{}\\fR", esc(name.trim()));
        for a in args.iter().filter(|a| a.get_long().is_none()) {
            synopsis.push(' ');
            synopsis.push_str(&arg_synopsis(a));
        }
        for a in args.iter().filter(|a| a.get_long().is_some()) {
            synopsis.push(' ');
            synopsis.push_str(&arg_synopsis(a));
        }
        out.push_str(&synopsis);
        out.push('\n');
        if let Some(about) = sub.get_about() {
            out.push_str(&esc(&about.to_string()));
            out.push('\n');
        }
        let described: Vec<&&Arg> = args.iter().filter(|a| a.get_help().is_some()).collect();
        if !described.is_empty() {
            out.push_str(".RS\n");
            for a in described {
                out.push_str(".TP\n");
                out.push_str(arg_synopsis(a).trim_matches(['[', ']']));
                out.push('\n');
                if let Some(help) = a.get_help() {
                    out.push_str(&esc(&help.to_string()));
                    out.push('\n');
                }
            }
            out.push_str(".RE\n");
        }
        if sub.has_subcommands() {
            commands(out, &name, sub);
        }
    }
}

/// The OUTPUT section, a paragraph an entry.
const OUTPUT: &[&str] = &[
    "Tables for a human by default; with --json one JSON document a command (lists as arrays, \
     keys in snake_case, sizes in bytes, power in mW, times as local ISO 8601 with the offset, \
     2026-12-03T08:43:36+01:00, null when unknown), and for watch one JSON object a line.",
    "Times are local: TZ, else /etc/localtime (TZ=UTC vgpuctl device UUID shows UTC). Tables \
     show them as 2026-12-03 08:43:36 CET, - when unknown (a device another tool made).",
    "metrics shows each figure with its unit: power in W, temperature in degrees Celsius, \
     utilization in %, memory in KiB, MiB or GiB.",
    "PARENT (parent in device and --json) is the device an mdev or vGPU sits on: a GPU, or one \
     of its SR-IOV VFs; GPU is the physical GPU.",
    "Every command that changes something confirms it in one line (created mdev UUID (TYPE) \
     on PARENT, removed device UUID, started, stopped, modified, attached, detached, VFs \
     enabled, MIG on, made GPU instance ID, scheduler set), unless --quiet: then create prints \
     only the UUID, mig create only the id, and the others nothing. With --json, each prints \
     its JSON document, --quiet or not.",
    "Booleans are flags: --autostart or --no-autostart (create, modify), --persistent or \
     --no-persistent (modify), --arr or --no-arr (scheduler set). The old form with a value \
     (--autostart false, --persistent true, --arr false) still works.",
];

/// The exit codes as a roff list.
const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "Success."),
    (
        "1",
        "The host failed or cannot do it: Failed, NotSupported, Unsafe, Libvirt, LibvirtUnavailable and any other error.",
    ),
    (
        "2",
        "Usage: a wrong command line, or vgpud answered InvalidArgument.",
    ),
    ("3", "Not found: no such device, GPU, type or layout."),
    (
        "4",
        "Conflict: NoCapacity, Exists, Busy, NeedsReset; apply with a step refused or failed.",
    ),
    (
        "5",
        "Access denied: AccessDenied, InteractiveAuthorizationRequired.",
    ),
    (
        "6",
        "vgpud cannot be reached: no bus, or nobody owns org.vgpud1.",
    ),
];

/// The whole page.
pub fn render(cmd: Command) -> std::io::Result<Vec<u8>> {
    let mut cmd = cmd;
    cmd.build();
    let man = clap_mangen::Man::new(cmd.clone());
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    man.render_options_section(&mut page)?;
    let mut text = String::from(".SH COMMANDS\n");
    commands(&mut text, "vgpuctl", &cmd);
    text.push_str(".SH OUTPUT\n");
    for paragraph in OUTPUT {
        text.push_str(".PP\n");
        text.push_str(&esc(paragraph));
        text.push('\n');
    }
    text.push_str(".SH \"EXIT STATUS\"\n");
    for (code, what) in EXIT_STATUS {
        text.push_str(&format!(".TP\n\\fB{code}\\fR\n{}\n", esc(what)));
    }
    text.push_str(".PP\n");
    text.push_str(&esc(
        "Errors are printed on stderr as vgpuctl: <D-Bus error name>: <message>, and where \
         there is something to try, a second line that says it (vgpuctl types lists the types, \
         for a type no GPU offers).",
    ));
    text.push('\n');
    text.push_str(".SH \"SEE ALSO\"\n\\fBbusctl\\fR(1); the D\\-Bus API is described in /usr/share/doc/vgpud/docs/api.md.\n");
    page.extend_from_slice(text.as_bytes());
    man.render_version_section(&mut page)?;
    Ok(page)
}
