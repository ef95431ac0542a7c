//! Which PCI function draws the host's console, decided from what the kernel says rather than
//! from "it has a framebuffer": amdgpu, nvidia-drm with `fbdev=1`, bochs-drm and the other DRM
//! drivers register a framebuffer (`sys/class/graphics/fb<N>`) on every GPU they drive, and
//! only one of them (at most) shows the console.
//!
//! What the kernel tells (6.1; drivers/tty/vt/vt.c, drivers/video/fbdev/core/fbcon.c,
//! drivers/pci/vgaarb.c), all read through the [`Host`]:
//!
//! - `sys/class/vtconsole/vtcon<N>/{name,bind}`: the console drivers and whether each is
//!   bound, e.g. `(S) dummy device` 0, `(M) frame buffer device` 1 (fbcon), `(S) VGA+` (vgacon).
//! - `sys/class/tty/tty0/active`: the foreground console, `tty1`.
//! - `proc/cmdline`: `fbcon=map:<digits>` (console *i* goes to framebuffer digit *i* modulo the
//!   number of digits) and `fbcon=vc:<first>-<last>` (the consoles fbcon takes).
//! - `sys/class/graphics/fb<N>/device`: the device a framebuffer belongs to: a PCI function
//!   for a DRM driver's fbdev emulation, a platform device (`efi-framebuffer.0`,
//!   `vesa-framebuffer.0`, `simple-framebuffer.0`) for the firmware's framebuffer.
//! - `sys/bus/pci/devices/*/boot_vga`: the VGA arbiter's default device, the one the firmware
//!   displayed on (on EFI the one whose BAR holds the firmware's framebuffer).
//!
//! The rule, in order:
//!
//! 1. fbcon is bound and takes the foreground console: the framebuffer it draws it on is the
//!    one `fbcon=map:` names when that one is registered (else the lowest registered one the
//!    map names, where fbcon took over). Without `fbcon=map:` it is the boot VGA device's
//!    framebuffer when there is one: `CONFIG_FRAMEBUFFER_CONSOLE_DETECT_PRIMARY` (set in
//!    Debian's, Ubuntu's and Fedora's kernels) maps every console to the primary display
//!    device's framebuffer when it registers (`fbcon: bochs-drmdrmfb (fb0) is primary
//!    device`); else the lowest registered framebuffer (the boot map is all fb0, the first one
//!    registered). That framebuffer's device is the console if it is a PCI function
//!    ([`ConsoleReason::FbconFramebuffer`]); a firmware framebuffer is the boot display's
//!    memory, so then the boot VGA device is ([`ConsoleReason::FirmwareFramebuffer`]).
//! 2. Else vgacon (`VGA+`) is bound: the boot VGA device shows the text console
//!    ([`ConsoleReason::BootVga`]).
//! 3. Else the kernel lists no console driver at all (no `sys/class/vtconsole`, e.g. a
//!    kernel without `CONFIG_VT`, or a tree that does not tell): the boot VGA device is taken
//!    to be the console, the cautious answer.
//! 4. Else (only the dummy console is bound) nothing draws a console.
//!
//! Not seen in sysfs, so not followed: a mapping changed at run time (`con2fbmap`, the
//! `FBIOPUT_CON2FBMAP` ioctl) and fbcon's remapping after a framebuffer went away and came
//! back. The decision is the pure [`decide`] over [`ConsoleFacts`], which [`read_facts`] reads.

use std::fmt;

use super::sriov::pci_dir;
use crate::host::{Host, HostResult};

/// `MAX_NR_CONSOLES`.
const MAX_NR_CONSOLES: u32 = 63;
/// `FB_MAX`.
const FB_MAX: u32 = 32;

/// A console driver as `sys/class/vtconsole/vtcon<N>` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VtConsole {
    /// `vtcon1`.
    pub id: String,
    /// `(M) frame buffer device`.
    pub name: String,
    /// `bind` reads 1.
    pub bound: bool,
}

impl VtConsole {
    /// fbcon (`frame buffer device`).
    pub fn is_fbcon(&self) -> bool {
        self.name.contains("frame buffer device")
    }

    /// vgacon (`VGA+`).
    pub fn is_vgacon(&self) -> bool {
        self.name.contains("VGA+")
    }
}

/// What a framebuffer's `device` link points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FbDevice {
    /// A PCI function (`0000:00:02.0`): a DRM driver's fbdev emulation, or an fbdev driver.
    Pci(String),
    /// Another device (`efi-framebuffer.0`): the firmware's framebuffer.
    Other(String),
    /// No `device` link (a virtual framebuffer).
    None,
}

/// A registered framebuffer, `sys/class/graphics/fb<index>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framebuffer {
    /// `N` of `fbN`.
    pub index: u32,
    /// `name`: the driver's id, `bochs-drmdrmfb`, `EFI VGA`.
    pub name: String,
    /// What its `device` link points at.
    pub device: FbDevice,
}

/// fbcon's options from the kernel command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FbconOptions {
    /// `fbcon=map:<digits>`: the framebuffer of each console, repeated.
    pub map: Option<Vec<u32>>,
    /// `fbcon=vc:<n1>-<n2>`: the first console fbcon takes, 0-based (0 by default).
    pub first_vc: u32,
    /// The last console fbcon takes, 0-based (62 by default).
    pub last_vc: u32,
}

impl FbconOptions {
    /// The framebuffer the boot map gives console `vc` (0-based), `None` without a map.
    fn mapped(&self, vc: u32) -> Option<u32> {
        self.map
            .as_ref()
            .filter(|m| !m.is_empty())
            .map(|m| m[vc as usize % m.len()])
    }

    /// Parses the `fbcon=` options of a kernel command line as `fb_console_setup` does; later
    /// options override earlier ones.
    pub fn from_cmdline(cmdline: &str) -> FbconOptions {
        let mut o = FbconOptions {
            map: None,
            first_vc: 0,
            last_vc: MAX_NR_CONSOLES - 1,
        };
        for arg in cmdline.split_whitespace() {
            let Some(value) = arg.strip_prefix("fbcon=") else {
                continue;
            };
            for opt in value.split(',') {
                if let Some(digits) = opt.strip_prefix("map:") {
                    // The kernel takes each character minus '0'; only digits make sense.
                    let map: Option<Vec<u32>> = digits
                        .chars()
                        .map(|c| c.to_digit(10).map(|d| d % FB_MAX))
                        .collect();
                    if let Some(map) = map.filter(|m| !m.is_empty()) {
                        o.map = Some(map);
                    }
                } else if let Some(range) = opt.strip_prefix("vc:") {
                    let (first, rest) = leading_number(range);
                    if let Some(n) = first {
                        o.first_vc = n.wrapping_sub(1);
                    }
                    if o.first_vc >= MAX_NR_CONSOLES {
                        o.first_vc = 0;
                    }
                    if let Some(last) = rest.strip_prefix('-') {
                        if let (Some(n), _) = leading_number(last) {
                            o.last_vc = n.wrapping_sub(1);
                        } else {
                            o.last_vc = u32::MAX;
                        }
                    }
                    if o.last_vc < o.first_vc || o.last_vc >= MAX_NR_CONSOLES {
                        o.last_vc = MAX_NR_CONSOLES - 1;
                    }
                }
            }
        }
        o
    }
}

/// `simple_strtoul(s, &end, 10)`: the leading decimal number and the rest.
fn leading_number(s: &str) -> (Option<u32>, &str) {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    (s[..end].parse().ok(), &s[end..])
}

/// Everything the decision needs, as read from the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleFacts {
    /// The console drivers; `None` when `sys/class/vtconsole` lists none.
    pub vtconsoles: Option<Vec<VtConsole>>,
    /// The foreground console's number, 1 for `tty1` (`sys/class/tty/tty0/active`).
    pub foreground: u32,
    /// fbcon's options on the kernel command line (`proc/cmdline`).
    pub fbcon: FbconOptions,
    /// The registered framebuffers, by index.
    pub framebuffers: Vec<Framebuffer>,
    /// The function whose `boot_vga` reads 1.
    pub boot_vga: Option<String>,
}

/// How fbcon came to draw on a framebuffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FbconChoice {
    /// `fbcon=map:` on the kernel command line.
    Map(String),
    /// The boot VGA device's framebuffer (`CONFIG_FRAMEBUFFER_CONSOLE_DETECT_PRIMARY`).
    Primary,
    /// The first framebuffer (fbcon's default map).
    First,
}

/// Why a function is the console.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsoleReason {
    /// fbcon draws the foreground console on `fb<fb>`, whose device is the function.
    FbconFramebuffer {
        /// The foreground console, 1 for `tty1`.
        tty: u32,
        /// The framebuffer's index.
        fb: u32,
        /// The framebuffer's `name`.
        name: String,
        /// How fbcon came to draw there.
        choice: FbconChoice,
    },
    /// fbcon draws the foreground console on the firmware's framebuffer `fb<fb>` (device
    /// `device`), which shows the boot VGA device's display.
    FirmwareFramebuffer {
        /// The foreground console, 1 for `tty1`.
        tty: u32,
        /// The framebuffer's index.
        fb: u32,
        /// The framebuffer's `name` (`EFI VGA`).
        name: String,
        /// Its device (`efi-framebuffer.0`).
        device: String,
    },
    /// No framebuffer console: the boot VGA device is the console, as the VGA text console
    /// (`vgacon`) shows it, or because the kernel lists no console driver.
    BootVga {
        /// vgacon is bound (else the kernel lists no console driver).
        vgacon: bool,
    },
}

impl fmt::Display for ConsoleReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConsoleReason::FbconFramebuffer {
                tty,
                fb,
                name,
                choice,
            } => {
                write!(f, "fbcon draws tty{tty} on fb{fb} ({name}), which is on it")?;
                match choice {
                    FbconChoice::Map(map) => write!(
                        f,
                        "; fbcon=map:{map} on the kernel command line puts tty{tty} there"
                    ),
                    FbconChoice::Primary => write!(
                        f,
                        "; it is the boot VGA device's framebuffer, which fbcon takes as its primary display"
                    ),
                    FbconChoice::First => write!(f, "; it is fbcon's first framebuffer"),
                }
            }
            ConsoleReason::FirmwareFramebuffer {
                tty,
                fb,
                name,
                device,
            } => write!(
                f,
                "fbcon draws tty{tty} on fb{fb} ({name}), the firmware's framebuffer ({device}), which shows the display of the boot VGA device, this one"
            ),
            ConsoleReason::BootVga { vgacon: true } => write!(
                f,
                "there is no framebuffer console and the VGA text console (vgacon) is on the boot VGA device, this one"
            ),
            ConsoleReason::BootVga { vgacon: false } => write!(
                f,
                "the kernel lists no console driver (sys/class/vtconsole), so the boot VGA device, this one, is taken to draw it"
            ),
        }
    }
}

/// The function that draws the host's console and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Console {
    /// The PCI function's address.
    pub function: String,
    /// Why it is the console.
    pub reason: ConsoleReason,
}

/// Reads what [`decide`] needs from the host.
pub fn read_facts(host: &Host) -> HostResult<ConsoleFacts> {
    let vt_dir = host.sys("class/vtconsole");
    let mut vts = Vec::new();
    for id in host.list_dir(&vt_dir)? {
        if !id.starts_with("vtcon") {
            continue;
        }
        let dir = vt_dir.join(&id);
        let name = host.read_attr_opt(&dir.join("name"))?.unwrap_or_default();
        let bound = host
            .read_attr_opt(&dir.join("bind"))?
            .is_some_and(|b| b.trim() == "1");
        vts.push(VtConsole {
            id,
            name: name.trim().to_string(),
            bound,
        });
    }
    let foreground = host
        .read_attr_opt(&host.sys("class/tty/tty0/active"))?
        .and_then(|a| a.trim().strip_prefix("tty")?.parse().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(1);
    let cmdline = host
        .read_attr_opt(&host.root().join("proc/cmdline"))?
        .unwrap_or_default();
    let gdir = host.sys("class/graphics");
    let mut framebuffers = Vec::new();
    for entry in host.list_dir(&gdir)? {
        let Some(index) = entry.strip_prefix("fb").and_then(|n| n.parse().ok()) else {
            continue;
        };
        let dir = gdir.join(&entry);
        let name = host.read_attr_opt(&dir.join("name"))?.unwrap_or_default();
        // The link may be written `../../../0000:01:00.0` or `../..`: resolve it.
        let device = match host.resolve(&dir.join("device")) {
            Ok(dev) => {
                let base = dev
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if host.link_name(&dev.join("subsystem"))?.as_deref() == Some("pci") {
                    FbDevice::Pci(base)
                } else {
                    FbDevice::Other(base)
                }
            }
            Err(e) if e.is_not_found() => FbDevice::None,
            Err(e) => return Err(e),
        };
        framebuffers.push(Framebuffer {
            index,
            name: name.trim().to_string(),
            device,
        });
    }
    framebuffers.sort_by_key(|f| f.index);
    let mut boot_vga = None;
    for address in host.list_dir(&host.sys("bus/pci/devices"))? {
        let flag = host.read_attr_opt(&pci_dir(host, &address).join("boot_vga"))?;
        if flag.is_some_and(|f| f.trim() == "1") {
            boot_vga = Some(address);
            break;
        }
    }
    Ok(ConsoleFacts {
        vtconsoles: (!vts.is_empty()).then_some(vts),
        foreground,
        fbcon: FbconOptions::from_cmdline(&cmdline),
        framebuffers,
        boot_vga,
    })
}

/// The framebuffer fbcon draws console `vc` (0-based) on, with how it got there, when fbcon
/// is bound and takes that console; `None` otherwise.
pub fn fbcon_framebuffer(facts: &ConsoleFacts, vc: u32) -> Option<(&Framebuffer, FbconChoice)> {
    let bound = facts
        .vtconsoles
        .as_ref()?
        .iter()
        .any(|v| v.is_fbcon() && v.bound);
    let o = &facts.fbcon;
    if !bound || vc < o.first_vc || vc > o.last_vc {
        return None;
    }
    let find = |i: u32| facts.framebuffers.iter().find(|f| f.index == i);
    if let Some(map) = &o.map {
        let text: String = map.iter().map(|d| d.to_string()).collect();
        let wanted = o.mapped(vc).and_then(find);
        // A console whose framebuffer is not registered stays where fbcon took over: the
        // first registered framebuffer the map names.
        let took_over = || facts.framebuffers.iter().find(|f| map.contains(&f.index));
        return wanted
            .or_else(took_over)
            .or_else(|| facts.framebuffers.first())
            .map(|f| (f, FbconChoice::Map(text)));
    }
    let primary = facts.framebuffers.iter().find(|f| match &f.device {
        FbDevice::Pci(a) => Some(a) == facts.boot_vga.as_ref(),
        _ => false,
    });
    match primary {
        Some(f) => Some((f, FbconChoice::Primary)),
        None => facts.framebuffers.first().map(|f| (f, FbconChoice::First)),
    }
}

/// The function that draws the host's console, and why; `None` when none does (see the
/// module doc for the rule).
pub fn decide(facts: &ConsoleFacts) -> Option<Console> {
    // tty0 means "the current console"; facts read from the host never say 0, but facts
    // built by a caller may: it is tty1's.
    let tty = facts.foreground.max(1);
    let boot_vga = || facts.boot_vga.clone();
    let Some(vts) = &facts.vtconsoles else {
        return boot_vga().map(|function| Console {
            function,
            reason: ConsoleReason::BootVga { vgacon: false },
        });
    };
    if let Some((fb, choice)) = fbcon_framebuffer(facts, tty - 1) {
        return match &fb.device {
            FbDevice::Pci(function) => Some(Console {
                function: function.clone(),
                reason: ConsoleReason::FbconFramebuffer {
                    tty,
                    fb: fb.index,
                    name: fb.name.clone(),
                    choice,
                },
            }),
            FbDevice::Other(device) => boot_vga().map(|function| Console {
                function,
                reason: ConsoleReason::FirmwareFramebuffer {
                    tty,
                    fb: fb.index,
                    name: fb.name.clone(),
                    device: device.clone(),
                },
            }),
            FbDevice::None => None,
        };
    }
    if vts.iter().any(|v| v.is_vgacon() && v.bound) {
        return boot_vga().map(|function| Console {
            function,
            reason: ConsoleReason::BootVga { vgacon: true },
        });
    }
    None
}

/// The function that draws the host's console, read from the host and decided by [`decide`].
pub fn console(host: &Host) -> HostResult<Option<Console>> {
    Ok(decide(&read_facts(host)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vt(id: &str, name: &str, bound: bool) -> VtConsole {
        VtConsole {
            id: id.into(),
            name: name.into(),
            bound,
        }
    }

    fn fb(index: u32, name: &str, device: FbDevice) -> Framebuffer {
        Framebuffer {
            index,
            name: name.into(),
            device,
        }
    }

    fn pci(a: &str) -> FbDevice {
        FbDevice::Pci(a.into())
    }

    /// fbcon bound over the dummy console, tty1 in front, no command line options.
    fn fbcon_host(framebuffers: Vec<Framebuffer>, boot_vga: Option<&str>) -> ConsoleFacts {
        ConsoleFacts {
            vtconsoles: Some(vec![
                vt("vtcon0", "(S) dummy device", false),
                vt("vtcon1", "(M) frame buffer device", true),
            ]),
            foreground: 1,
            fbcon: FbconOptions::from_cmdline(""),
            framebuffers,
            boot_vga: boot_vga.map(str::to_string),
        }
    }

    #[test]
    fn fbcon_takes_the_consoles_of_its_range_its_ends_included() {
        let mut facts = fbcon_host(vec![fb(0, "bochs-drmdrmfb", pci("0000:00:03.0"))], None);
        facts.fbcon = FbconOptions::from_cmdline("fbcon=vc:2-4");
        let taken = |vc| fbcon_framebuffer(&facts, vc).is_some();
        assert_eq!(
            (0..6).map(taken).collect::<Vec<_>>(),
            [false, true, true, true, false, false]
        );
    }

    #[test]
    fn fbcon_on_the_boot_vga_devices_framebuffer_names_that_function() {
        // The qemu VM: two bochs-drm adapters, the boot VGA one registered first.
        let facts = fbcon_host(
            vec![
                fb(0, "bochs-drmdrmfb", pci("0000:00:03.0")),
                fb(1, "bochs-drmdrmfb", pci("0000:01:00.0")),
            ],
            Some("0000:00:03.0"),
        );
        let c = decide(&facts).expect("a console");
        assert_eq!(c.function, "0000:00:03.0");
        assert_eq!(
            c.reason,
            ConsoleReason::FbconFramebuffer {
                tty: 1,
                fb: 0,
                name: "bochs-drmdrmfb".into(),
                choice: FbconChoice::Primary
            }
        );
        assert!(
            c.reason
                .to_string()
                .starts_with("fbcon draws tty1 on fb0 (bochs-drmdrmfb), which is on it"),
            "{}",
            c.reason
        );
    }

    #[test]
    fn foreground_zero_is_tty1_not_an_underflow() {
        // Found by the fuzz target: facts built by a caller with tty0 made `tty - 1` wrap.
        let mut facts = fbcon_host(
            vec![fb(0, "bochs-drmdrmfb", pci("0000:00:03.0"))],
            Some("0000:00:03.0"),
        );
        facts.foreground = 0;
        let c = decide(&facts).expect("a console");
        assert_eq!(c.function, "0000:00:03.0");
        assert!(matches!(
            c.reason,
            ConsoleReason::FbconFramebuffer { tty: 1, .. }
        ));
    }

    #[test]
    fn the_primary_display_wins_over_fb0() {
        // nvidia-drm registered a framebuffer on each GPU in bus order; the boot VGA device's
        // is fb1, and fbcon remapped every console to it.
        let facts = fbcon_host(
            vec![
                fb(0, "nvidia-drmdrmfb", pci("0000:21:00.0")),
                fb(1, "nvidia-drmdrmfb", pci("0000:2d:00.0")),
                fb(2, "nvidia-drmdrmfb", pci("0000:33:00.0")),
            ],
            Some("0000:2d:00.0"),
        );
        assert_eq!(decide(&facts).expect("console").function, "0000:2d:00.0");
    }

    #[test]
    fn without_a_primary_fbcon_draws_on_its_first_framebuffer() {
        let facts = fbcon_host(
            vec![
                fb(0, "amdgpudrmfb", pci("0000:41:00.0")),
                fb(1, "amdgpudrmfb", pci("0000:c1:00.0")),
            ],
            None,
        );
        let c = decide(&facts).expect("console");
        assert_eq!(c.function, "0000:41:00.0");
        assert!(matches!(
            c.reason,
            ConsoleReason::FbconFramebuffer {
                fb: 0,
                choice: FbconChoice::First,
                ..
            }
        ));
    }

    #[test]
    fn fbcon_map_on_the_command_line_and_the_foreground_console_decide() {
        let fbs = vec![
            fb(0, "amdgpudrmfb", pci("0000:41:00.0")),
            fb(1, "amdgpudrmfb", pci("0000:c1:00.0")),
        ];
        let mut facts = fbcon_host(fbs, Some("0000:41:00.0"));
        facts.fbcon = FbconOptions::from_cmdline("BOOT_IMAGE=/vmlinuz ro fbcon=map:1 quiet");
        let c = decide(&facts).expect("console");
        assert_eq!(c.function, "0000:c1:00.0", "map:1 beats the primary");
        assert!(c.reason.to_string().contains("fbcon=map:1"), "{}", c.reason);
        // map:01: tty1 on fb0, tty2 on fb1, tty3 on fb0 ...
        facts.fbcon = FbconOptions::from_cmdline("fbcon=font:VGA8x16,map:01");
        assert_eq!(decide(&facts).expect("tty1").function, "0000:41:00.0");
        facts.foreground = 2;
        assert_eq!(decide(&facts).expect("tty2").function, "0000:c1:00.0");
        facts.foreground = 3;
        assert_eq!(decide(&facts).expect("tty3").function, "0000:41:00.0");
        // A mapped framebuffer that is not registered: the console stays where fbcon took
        // over, the first registered framebuffer the map names.
        facts.foreground = 1;
        facts.fbcon = FbconOptions::from_cmdline("fbcon=map:21");
        assert_eq!(
            decide(&facts).expect("fb2 missing").function,
            "0000:c1:00.0"
        );
    }

    #[test]
    fn a_firmware_framebuffer_makes_the_boot_vga_device_the_console() {
        let facts = fbcon_host(
            vec![fb(
                0,
                "EFI VGA",
                FbDevice::Other("efi-framebuffer.0".into()),
            )],
            Some("0000:65:00.0"),
        );
        let c = decide(&facts).expect("console");
        assert_eq!(c.function, "0000:65:00.0");
        assert!(matches!(
            c.reason,
            ConsoleReason::FirmwareFramebuffer { fb: 0, .. }
        ));
        assert!(c.reason.to_string().contains("efi-framebuffer.0"));
    }

    #[test]
    fn vgacon_makes_the_boot_vga_device_the_console() {
        let mut facts = fbcon_host(
            vec![fb(0, "nvidia-drmdrmfb", pci("0000:21:00.0"))],
            Some("0000:2d:00.0"),
        );
        facts.vtconsoles = Some(vec![vt("vtcon0", "(S) VGA+", true)]);
        let c = decide(&facts).expect("console");
        assert_eq!(c.function, "0000:2d:00.0");
        assert_eq!(c.reason, ConsoleReason::BootVga { vgacon: true });
        assert!(c.reason.to_string().contains("vgacon"));
        // fbcon registered but unbound (vgacon took the consoles back): still vgacon.
        facts.vtconsoles = Some(vec![
            vt("vtcon0", "(S) VGA+", true),
            vt("vtcon1", "(M) frame buffer device", false),
        ]);
        assert_eq!(decide(&facts).expect("console").function, "0000:2d:00.0");
        // fbcon takes only tty2 and up (fbcon=vc:2-6): tty1 is vgacon's.
        facts.vtconsoles = Some(vec![
            vt("vtcon0", "(S) VGA+", true),
            vt("vtcon1", "(M) frame buffer device", true),
        ]);
        facts.fbcon = FbconOptions::from_cmdline("fbcon=vc:2-6");
        assert_eq!(facts.fbcon.first_vc, 1);
        assert_eq!(facts.fbcon.last_vc, 5);
        assert_eq!(
            decide(&facts).expect("console").reason,
            ConsoleReason::BootVga { vgacon: true }
        );
        facts.foreground = 2;
        assert_eq!(decide(&facts).expect("console").function, "0000:21:00.0");
    }

    #[test]
    fn only_the_dummy_console_draws_nothing() {
        let mut facts = fbcon_host(
            vec![fb(1, "bochs-drmdrmfb", pci("0000:01:00.0"))],
            Some("0000:00:03.0"),
        );
        // fbcon unbound itself when the boot VGA device's framebuffer went away.
        facts.vtconsoles = Some(vec![
            vt("vtcon0", "(S) dummy device", true),
            vt("vtcon1", "(M) frame buffer device", false),
        ]);
        assert_eq!(decide(&facts), None);
    }

    #[test]
    fn without_console_drivers_the_boot_vga_device_is_assumed() {
        let mut facts = fbcon_host(vec![], Some("0000:2d:00.0"));
        facts.vtconsoles = None;
        assert_eq!(
            decide(&facts),
            Some(Console {
                function: "0000:2d:00.0".into(),
                reason: ConsoleReason::BootVga { vgacon: false }
            })
        );
        facts.boot_vga = None;
        assert_eq!(decide(&facts), None);
    }

    #[test]
    fn fbcon_options_parse_like_the_kernel() {
        let o = FbconOptions::from_cmdline("fbcon=map:0123 fbcon=vc:3");
        assert_eq!(o.map, Some(vec![0, 1, 2, 3]));
        assert_eq!((o.first_vc, o.last_vc), (2, 62));
        let o = FbconOptions::from_cmdline("fbcon=vc:5-2,map:x1");
        assert_eq!(o.map, None, "not digits: ignored");
        assert_eq!((o.first_vc, o.last_vc), (4, 62), "last below first");
        let o = FbconOptions::from_cmdline("fbcon=vc:0-99");
        assert_eq!((o.first_vc, o.last_vc), (0, 62));
        assert_eq!(o.mapped(3), None);
        let o = FbconOptions::from_cmdline("quiet fbcon=nodefer");
        assert_eq!((o.first_vc, o.last_vc), (0, 62), "the kernel's defaults");
        let o = FbconOptions::from_cmdline("fbcon=vc:3-3");
        assert_eq!((o.first_vc, o.last_vc), (2, 2), "one console");
    }

    #[test]
    fn the_facts_are_read_from_the_host() {
        let dir = tempfile::tempdir().expect("tempdir");
        vgpud_sim::write_profile("passthrough", dir.path()).expect("profile");
        let host = Host::new(dir.path());
        let facts = read_facts(&host).expect("read");
        assert_eq!(facts.foreground, 1);
        assert_eq!(facts.boot_vga.as_deref(), Some("0000:2d:00.0"));
        assert_eq!(
            facts.framebuffers,
            vec![
                fb(0, "nvidia-drmdrmfb", pci("0000:21:00.0")),
                fb(1, "nvidia-drmdrmfb", pci("0000:2d:00.0")),
                fb(2, "nvidia-drmdrmfb", pci("0000:33:00.0")),
            ]
        );
        assert_eq!(
            facts.vtconsoles,
            Some(vec![
                vt("vtcon0", "(S) dummy device", false),
                vt("vtcon1", "(M) frame buffer device", true),
            ])
        );
        let c = console(&host).expect("read").expect("console");
        assert_eq!(c.function, "0000:2d:00.0");
        assert!(matches!(
            c.reason,
            ConsoleReason::FbconFramebuffer {
                fb: 1,
                choice: FbconChoice::Primary,
                ..
            }
        ));

        // The foreground console is tty0's `active` (tty0 itself is not one: tty1 then).
        let active = host.sys("class/tty/tty0/active");
        std::fs::write(&active, "tty3\n").expect("write");
        assert_eq!(read_facts(&host).expect("read").foreground, 3);
        std::fs::write(&active, "tty0\n").expect("write");
        assert_eq!(read_facts(&host).expect("read").foreground, 1);
        // A framebuffer without a device link has none; a link that cannot be resolved for
        // another reason (a loop) is an error, not "no device".
        let link = host.sys("class/graphics/fb2/device");
        std::fs::remove_file(&link).expect("remove the link");
        let facts = read_facts(&host).expect("read");
        assert_eq!(
            facts.framebuffers[2],
            fb(2, "nvidia-drmdrmfb", FbDevice::None)
        );
        std::os::unix::fs::symlink("device", &link).expect("a link to itself");
        assert!(read_facts(&host).is_err(), "a link loop is an error");
    }
}
