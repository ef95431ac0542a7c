//! What vgpud knows about hardware that sysfs does not say: marketing names of PCI devices and
//! the NVIDIA vGPU type tables of hardware.md §5 (plus the Intel GVT-g type table of §5.7).
//!
//! Everything here is data: tables of boards and their type ids, from which the per-type
//! figures (framebuffer, instances, heads, resolution, frame-rate limit) are derived by the
//! per-series pattern of hardware.md §1.3.

use std::sync::OnceLock;

/// PCI vendor id of NVIDIA.
pub const VENDOR_NVIDIA: u16 = 0x10de;
/// PCI vendor id of Intel.
pub const VENDOR_INTEL: u16 = 0x8086;
/// PCI vendor id of AMD.
pub const VENDOR_AMD: u16 = 0x1002;

/// PCI ids vgpud knows a name for. Only ids confirmed against pci.ids-style sources are listed;
/// boards sharing an id are named together (0x1e30 is both Quadro RTX 6000 and RTX 8000).
const PCI_MODELS: &[(u16, u16, &str)] = &[
    // NVIDIA
    (VENDOR_NVIDIA, 0x13f2, "Tesla M60"),
    (VENDOR_NVIDIA, 0x1b38, "Tesla P40"),
    (VENDOR_NVIDIA, 0x1db4, "Tesla V100 PCIe 16GB"),
    (VENDOR_NVIDIA, 0x1db6, "Tesla V100 PCIe 32GB"),
    (VENDOR_NVIDIA, 0x1e30, "Quadro RTX 6000/8000"),
    (VENDOR_NVIDIA, 0x1eb8, "Tesla T4"),
    (VENDOR_NVIDIA, 0x20b5, "A100 PCIe 80GB"),
    (VENDOR_NVIDIA, 0x20f1, "A100 PCIe 40GB"),
    (VENDOR_NVIDIA, 0x2230, "RTX A6000"),
    (VENDOR_NVIDIA, 0x2235, "A40"),
    (VENDOR_NVIDIA, 0x2236, "A10"),
    (VENDOR_NVIDIA, 0x25b6, "A16 / A2"),
    (VENDOR_NVIDIA, 0x26b5, "L40"),
    (VENDOR_NVIDIA, 0x26b9, "L40S"),
    (VENDOR_NVIDIA, 0x27b8, "L4"),
    (VENDOR_NVIDIA, 0x2330, "H100 SXM5 80GB"),
    (VENDOR_NVIDIA, 0x2331, "H100 PCIe"),
    // [I] assumed device id of the H200 SXM (hardware.md gives none).
    (VENDOR_NVIDIA, 0x2335, "H200 SXM 141GB"),
    (VENDOR_NVIDIA, 0x24b0, "RTX A4000"),
    (
        VENDOR_NVIDIA,
        0x228b,
        "GA104 High Definition Audio Controller",
    ),
    (
        VENDOR_NVIDIA,
        0x10f7,
        "TU102 High Definition Audio Controller",
    ),
    // Intel integrated graphics (GVT-g capable generations)
    (VENDOR_INTEL, 0x1912, "HD Graphics 530"),
    (VENDOR_INTEL, 0x5912, "HD Graphics 630"),
    (VENDOR_INTEL, 0x3e91, "UHD Graphics 630"),
    (VENDOR_INTEL, 0x3e92, "UHD Graphics 630"),
    (VENDOR_INTEL, 0x3e9b, "UHD Graphics 630 (Mobile)"),
    (VENDOR_INTEL, 0x4680, "UHD Graphics 770"),
    // AMD
    (VENDOR_AMD, 0x74a1, "Instinct MI300X"),
    (VENDOR_AMD, 0x74b5, "Instinct MI300X VF"),
    // Intel network controllers of the simulated hosts
    (
        VENDOR_INTEL,
        0x10fb,
        "82599ES 10-Gigabit SFI/SFP+ Network Connection",
    ),
    (VENDOR_INTEL, 0x10d3, "82574L Gigabit Network Connection"),
    // PCIe switches of the simulated hosts
    (
        0x10b5,
        0x8747,
        "PEX 8747 48-Lane, 5-Port PCI Express Gen 3 Switch",
    ),
    (0x1b21, 0x1182, "ASM1182e 2-Port PCIe x1 Gen2 Packet Switch"),
];

/// Boards told apart only by their PCI subsystem id: (vendor, device, subsystem vendor,
/// subsystem device, name). pci.ids lists 0x1e30 with subsystem 10de:12ba as Quadro RTX 6000
/// and 10de:129e as Quadro RTX 8000.
const PCI_SUBSYSTEM_MODELS: &[(u16, u16, u16, u16, &str)] = &[
    (
        VENDOR_NVIDIA,
        0x1e30,
        VENDOR_NVIDIA,
        0x12ba,
        "Quadro RTX 6000",
    ),
    (
        VENDOR_NVIDIA,
        0x1e30,
        VENDOR_NVIDIA,
        0x129e,
        "Quadro RTX 8000",
    ),
];

/// The marketing name of a PCI device, if vgpud knows it.
pub fn pci_model_name(vendor: u16, device: u16) -> Option<&'static str> {
    PCI_MODELS
        .iter()
        .find(|(v, d, _)| *v == vendor && *d == device)
        .map(|(_, _, name)| *name)
}

/// The marketing name of a PCI device, told apart by its subsystem id where boards share a
/// device id (0x1e30: Quadro RTX 6000 or 8000); otherwise as [`pci_model_name`].
pub fn pci_model_name_with_subsystem(
    vendor: u16,
    device: u16,
    subsystem_vendor: u16,
    subsystem_device: u16,
) -> Option<&'static str> {
    PCI_SUBSYSTEM_MODELS
        .iter()
        .find(|(v, d, sv, sd, _)| {
            (*v, *d, *sv, *sd) == (vendor, device, subsystem_vendor, subsystem_device)
        })
        .map(|(_, _, _, _, name)| *name)
        .or_else(|| pci_model_name(vendor, device))
}

/// An NVIDIA vGPU type as the driver describes it: time-sliced, or MIG-backed (backed by one
/// GPU instance of a profile, [`NvidiaTypeInfo::mig_profile`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvidiaTypeInfo {
    /// The numeric type id (`nvidia-<id>` as an mdev type, or the vendor-VFIO id).
    pub id: u32,
    /// The `name` attribute: `GRID RTX6000-4Q`, `NVIDIA A40-2Q`.
    pub name: &'static str,
    /// Framebuffer in MiB.
    pub framebuffer_mib: u64,
    /// Maximum instances per physical GPU (equal-size mode).
    pub max_instances: u32,
    /// Display heads.
    pub heads: u32,
    /// Maximum resolution (width, height).
    pub max_resolution: (u32, u32),
    /// Frame-rate limit in frames per second.
    pub frl: u32,
    /// For a MIG-backed type, the GPU-instance profile that backs it, as `nvidia-smi mig
    /// -lgip` names it without `MIG ` (`1g.18gb`, `1g.18gb+me`); `None` for a time-sliced type.
    pub mig_profile: Option<&'static str>,
}

impl NvidiaTypeInfo {
    /// The type's `description` attribute as the NVIDIA driver prints it, with its newline.
    pub fn description(&self) -> String {
        format!(
            "num_heads={}, frl_config={}, framebuffer={}M, max_resolution={}x{}, max_instance={}\n",
            self.heads,
            self.frl,
            self.framebuffer_mib,
            self.max_resolution.0,
            self.max_resolution.1,
            self.max_instances
        )
    }

    /// The series letter: `Q`, `B`, `A` or `C` (MIG-backed types are `C`).
    pub fn series(&self) -> char {
        if let Some(m) = split_mig(self.name) {
            return m.series;
        }
        split_profile(self.name).map_or('?', |(_, s)| s)
    }

    /// Whether the type is MIG-backed: a vGPU of it takes a whole GPU instance of
    /// [`NvidiaTypeInfo::mig_profile`] (hardware.md §3.1).
    pub fn is_mig_backed(&self) -> bool {
        self.mig_profile.is_some()
    }
}

/// The parts of a MIG-backed type name `<board>-<G>-<GB>C[ME|NOME|MEALL|GFX]`
/// (hardware.md §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MigName<'a> {
    board: &'a str,
    /// Compute slices of the backing GPU instance.
    slices: u32,
    /// Framebuffer in GB as the name says it.
    gb: u64,
    series: char,
    /// What follows the series letter: empty, `ME`, `NOME`, `MEALL` or `GFX`.
    suffix: &'a str,
}

/// Splits `NVIDIA H200X-1-18CME` into board `H200X`, 1 slice, 18 GB, `C`, `ME`; `None` for a
/// time-sliced name (`A100D-4C`, `RTX6000-Ada-1Q`).
fn split_mig(name: &str) -> Option<MigName<'_>> {
    let short = strip_vendor(name);
    let (rest, profile) = short.rsplit_once('-')?;
    let (board, slices) = rest.rsplit_once('-')?;
    if board.is_empty() || slices.is_empty() || !slices.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = profile.bytes().take_while(u8::is_ascii_digit).count();
    let (gb, tail) = profile.split_at(digits);
    let mut chars = tail.chars();
    let series = chars.next()?;
    let suffix = chars.as_str();
    if !matches!(series, 'A' | 'B' | 'C' | 'Q')
        || !matches!(suffix, "" | "ME" | "NOME" | "MEALL" | "GFX")
    {
        return None;
    }
    Some(MigName {
        board,
        slices: slices.parse().ok()?,
        gb: gb.parse().ok()?,
        series,
        suffix,
    })
}

/// The board part of a type name without its vendor word: `H200X` for `NVIDIA H200X-1-18C`,
/// `RTX6000` for `GRID RTX6000-4Q`.
fn board_of(name: &str) -> Option<&str> {
    if let Some(m) = split_mig(name) {
        return Some(m.board);
    }
    strip_vendor(name).rsplit_once('-').map(|(b, _)| b)
}

/// A board's type list: the board's framebuffer in GiB, the highest instance count the driver
/// allows on one GPU, the C-series maximum resolution, (id, name) of each time-sliced type,
/// the documented maxima the size rule does not give ((id, max)), and its MIG-backed types.
struct Board {
    fb_gib: u64,
    cap: u32,
    c_resolution: (u32, u32),
    types: &'static [(u32, &'static str)],
    max_overrides: &'static [(u32, u32)],
    mig: &'static [MigType],
}

/// A MIG-backed type of a board (hardware.md §3.3): its id and name, the most vGPUs of it one
/// GPU holds (the GPU instances of its profile that fit), and its GPU-instance profile.
struct MigType {
    id: u32,
    name: &'static str,
    max: u32,
    profile: &'static str,
}

const fn mig(id: u32, name: &'static str, max: u32, profile: &'static str) -> MigType {
    MigType {
        id,
        name,
        max,
        profile,
    }
}

/// C-series maximum resolution as vgpuConfig.xml of driver 510 gives it (newer drivers
/// print 4096x2400; hardware.md §1.3 says this is driver-version dependent).
const C_RES: (u32, u32) = (4096, 2160);

/// Boards and their type ids: RTX6000, RTX8000 and T4 from the driver-510 type list (NVIDIA
/// caps RTX8000-1Q at 32 instances, which the 32-instance cap gives); A10, A16, A40 from
/// the same list (hardware.md §5.1/5.2); L40S from a real VF dump (§5.3; no C-series ids known);
/// A100D from §5.4 with its MIG-backed types from §3.3; H100 (PCIe 80GB), H100XM (SXM5 80GB)
/// and H200X (SXM 141GB) from §5.5 and §3.3.
///
/// **Assumed type ids [I]**, to be checked with the nvml-probe on a real GPU
/// (`nvmlVgpuTypeGetName` over the ids `nvmlDeviceGetSupportedVgpus` returns):
/// - H200X: only 1414 (H200X-1-18C) and 1428 (H200X-141C) are documented [V KVGP]. The 13 ids
///   between them are assumed to be the other MIG-backed types without `ME` (1415–1419, by GI
///   size) then the time-sliced ones (1420–1427, by size), which fills 1414–1428 exactly;
///   H200X-1-18CME is assumed to be 1429 (A100D-1-10CME, 707, also comes after its board's
///   other types).
/// - H100 (PCIe): 1300–1314, H100XM (SXM5): 1320–1334, in the same order as H200X (MIG-backed
///   by GI size, time-sliced by size, the `ME` type last); none is documented.
/// - A100D-1-20C: 1336 (hardware.md §3.3 gives no id).
///
/// The range 1300–1336 holds only assumed ids; no documented id of another board is in it.
const BOARDS: &[Board] = &[
    Board {
        fb_gib: 24,
        cap: 24,
        c_resolution: C_RES,
        types: &[
            (256, "GRID RTX6000-1Q"),
            (257, "GRID RTX6000-2Q"),
            (258, "GRID RTX6000-3Q"),
            (259, "GRID RTX6000-4Q"),
            (260, "GRID RTX6000-6Q"),
            (261, "GRID RTX6000-8Q"),
            (262, "GRID RTX6000-12Q"),
            (263, "GRID RTX6000-24Q"),
            (343, "GRID RTX6000-4C"),
            (344, "GRID RTX6000-6C"),
            (345, "GRID RTX6000-8C"),
            (346, "GRID RTX6000-12C"),
            (347, "GRID RTX6000-24C"),
            (435, "GRID RTX6000-1B"),
            (436, "GRID RTX6000-2B"),
            (437, "GRID RTX6000-1A"),
            (438, "GRID RTX6000-2A"),
            (439, "GRID RTX6000-3A"),
            (440, "GRID RTX6000-4A"),
            (441, "GRID RTX6000-6A"),
            (442, "GRID RTX6000-8A"),
            (443, "GRID RTX6000-12A"),
            (444, "GRID RTX6000-24A"),
        ],
        max_overrides: &[],
        mig: &[],
    },
    Board {
        fb_gib: 48,
        cap: 32,
        c_resolution: C_RES,
        types: &[
            (264, "GRID RTX8000-1Q"),
            (265, "GRID RTX8000-2Q"),
            (266, "GRID RTX8000-3Q"),
            (267, "GRID RTX8000-4Q"),
            (268, "GRID RTX8000-6Q"),
            (269, "GRID RTX8000-8Q"),
            (270, "GRID RTX8000-12Q"),
            (271, "GRID RTX8000-16Q"),
            (272, "GRID RTX8000-24Q"),
            (273, "GRID RTX8000-48Q"),
            (348, "GRID RTX8000-4C"),
            (349, "GRID RTX8000-6C"),
            (350, "GRID RTX8000-8C"),
            (351, "GRID RTX8000-12C"),
            (352, "GRID RTX8000-16C"),
            (353, "GRID RTX8000-24C"),
            (354, "GRID RTX8000-48C"),
            (445, "GRID RTX8000-1B"),
            (446, "GRID RTX8000-2B"),
            (447, "GRID RTX8000-1A"),
            (448, "GRID RTX8000-2A"),
            (449, "GRID RTX8000-3A"),
            (450, "GRID RTX8000-4A"),
            (451, "GRID RTX8000-6A"),
            (452, "GRID RTX8000-8A"),
            (453, "GRID RTX8000-12A"),
            (454, "GRID RTX8000-16A"),
            (455, "GRID RTX8000-24A"),
            (456, "GRID RTX8000-48A"),
        ],
        max_overrides: &[],
        mig: &[],
    },
    Board {
        fb_gib: 16,
        cap: 16,
        c_resolution: C_RES,
        types: &[
            (222, "GRID T4-1B"),
            (223, "GRID T4-2B"),
            (225, "GRID T4-1A"),
            (226, "GRID T4-2A"),
            (227, "GRID T4-4A"),
            (228, "GRID T4-8A"),
            (229, "GRID T4-16A"),
            (230, "GRID T4-1Q"),
            (231, "GRID T4-2Q"),
            (232, "GRID T4-4Q"),
            (233, "GRID T4-8Q"),
            (234, "GRID T4-16Q"),
            (319, "GRID T4-4C"),
            (320, "GRID T4-8C"),
            (321, "GRID T4-16C"),
        ],
        max_overrides: &[],
        mig: &[],
    },
    Board {
        fb_gib: 24,
        cap: 24,
        c_resolution: C_RES,
        types: &[
            (588, "NVIDIA A10-1B"),
            (589, "NVIDIA A10-2B"),
            (590, "NVIDIA A10-1Q"),
            (591, "NVIDIA A10-2Q"),
            (592, "NVIDIA A10-3Q"),
            (593, "NVIDIA A10-4Q"),
            (594, "NVIDIA A10-6Q"),
            (595, "NVIDIA A10-8Q"),
            (596, "NVIDIA A10-12Q"),
            (597, "NVIDIA A10-24Q"),
            (598, "NVIDIA A10-1A"),
            (599, "NVIDIA A10-2A"),
            (600, "NVIDIA A10-3A"),
            (601, "NVIDIA A10-4A"),
            (602, "NVIDIA A10-6A"),
            (603, "NVIDIA A10-8A"),
            (604, "NVIDIA A10-12A"),
            (605, "NVIDIA A10-24A"),
            (610, "NVIDIA A10-4C"),
            (611, "NVIDIA A10-6C"),
            (612, "NVIDIA A10-8C"),
            (613, "NVIDIA A10-12C"),
            (614, "NVIDIA A10-24C"),
        ],
        max_overrides: &[],
        mig: &[],
    },
    Board {
        fb_gib: 16,
        cap: 16,
        c_resolution: C_RES,
        types: &[
            (709, "NVIDIA A16-1B"),
            (710, "NVIDIA A16-2B"),
            (711, "NVIDIA A16-1Q"),
            (712, "NVIDIA A16-2Q"),
            (713, "NVIDIA A16-4Q"),
            (714, "NVIDIA A16-8Q"),
            (715, "NVIDIA A16-16Q"),
            (716, "NVIDIA A16-1A"),
            (717, "NVIDIA A16-2A"),
            (718, "NVIDIA A16-4A"),
            (719, "NVIDIA A16-8A"),
            (720, "NVIDIA A16-16A"),
            (721, "NVIDIA A16-4C"),
            (722, "NVIDIA A16-8C"),
            (723, "NVIDIA A16-16C"),
        ],
        max_overrides: &[],
        mig: &[],
    },
    Board {
        fb_gib: 48,
        cap: 32,
        c_resolution: C_RES,
        types: &[
            (555, "NVIDIA A40-1B"),
            (556, "NVIDIA A40-2B"),
            (557, "NVIDIA A40-1Q"),
            (558, "NVIDIA A40-2Q"),
            (559, "NVIDIA A40-3Q"),
            (560, "NVIDIA A40-4Q"),
            (561, "NVIDIA A40-6Q"),
            (562, "NVIDIA A40-8Q"),
            (563, "NVIDIA A40-12Q"),
            (564, "NVIDIA A40-16Q"),
            (565, "NVIDIA A40-24Q"),
            (566, "NVIDIA A40-48Q"),
            (567, "NVIDIA A40-1A"),
            (568, "NVIDIA A40-2A"),
            (569, "NVIDIA A40-3A"),
            (570, "NVIDIA A40-4A"),
            (571, "NVIDIA A40-6A"),
            (572, "NVIDIA A40-8A"),
            (573, "NVIDIA A40-12A"),
            (574, "NVIDIA A40-16A"),
            (575, "NVIDIA A40-24A"),
            (576, "NVIDIA A40-48A"),
            (581, "NVIDIA A40-4C"),
            (582, "NVIDIA A40-6C"),
            (583, "NVIDIA A40-8C"),
            (584, "NVIDIA A40-12C"),
            (585, "NVIDIA A40-16C"),
            (586, "NVIDIA A40-24C"),
            (587, "NVIDIA A40-48C"),
        ],
        max_overrides: &[],
        mig: &[],
    },
    Board {
        fb_gib: 48,
        cap: 32,
        c_resolution: C_RES,
        types: &[
            (1145, "NVIDIA L40S-1B"),
            (1146, "NVIDIA L40S-2B"),
            (1147, "NVIDIA L40S-1Q"),
            (1148, "NVIDIA L40S-2Q"),
            (1149, "NVIDIA L40S-3Q"),
            (1150, "NVIDIA L40S-4Q"),
            (1151, "NVIDIA L40S-6Q"),
            (1152, "NVIDIA L40S-8Q"),
            (1153, "NVIDIA L40S-12Q"),
            (1154, "NVIDIA L40S-16Q"),
            (1155, "NVIDIA L40S-24Q"),
            (1156, "NVIDIA L40S-48Q"),
            (1157, "NVIDIA L40S-1A"),
            (1158, "NVIDIA L40S-2A"),
            (1159, "NVIDIA L40S-3A"),
            (1160, "NVIDIA L40S-4A"),
            (1161, "NVIDIA L40S-6A"),
            (1162, "NVIDIA L40S-8A"),
            (1163, "NVIDIA L40S-12A"),
            (1164, "NVIDIA L40S-16A"),
            (1165, "NVIDIA L40S-24A"),
            (1166, "NVIDIA L40S-48A"),
            (2164, "NVIDIA L40S-3B"),
        ],
        max_overrides: &[],
        mig: &[],
    },
    Board {
        fb_gib: 80,
        cap: 32,
        c_resolution: (3840, 2400),
        types: &[
            (692, "NVIDIA A100D-4C"),
            (693, "NVIDIA A100D-8C"),
            (694, "NVIDIA A100D-10C"),
            (695, "NVIDIA A100D-16C"),
            (696, "NVIDIA A100D-20C"),
            (697, "NVIDIA A100D-40C"),
            (698, "NVIDIA A100D-80C"),
        ],
        max_overrides: &[],
        mig: &[
            mig(699, "NVIDIA A100D-1-10C", 7, "1g.10gb"),
            mig(700, "NVIDIA A100D-2-20C", 3, "2g.20gb"),
            mig(701, "NVIDIA A100D-3-40C", 2, "3g.40gb"),
            mig(702, "NVIDIA A100D-4-40C", 1, "4g.40gb"),
            mig(703, "NVIDIA A100D-7-80C", 1, "7g.80gb"),
            mig(707, "NVIDIA A100D-1-10CME", 1, "1g.10gb+me"),
            // [I] assumed id (see above).
            mig(1336, "NVIDIA A100D-1-20C", 4, "1g.20gb"),
        ],
    },
    // H100 PCIe 80GB (§5.5, §3.3). [I] every id assumed (see above).
    Board {
        fb_gib: 80,
        cap: 32,
        c_resolution: (3840, 2400),
        types: &[
            (1306, "NVIDIA H100-4C"),
            (1307, "NVIDIA H100-5C"),
            (1308, "NVIDIA H100-8C"),
            (1309, "NVIDIA H100-10C"),
            (1310, "NVIDIA H100-16C"),
            (1311, "NVIDIA H100-20C"),
            (1312, "NVIDIA H100-40C"),
            (1313, "NVIDIA H100-80C"),
        ],
        max_overrides: &[],
        mig: &[
            mig(1300, "NVIDIA H100-1-10C", 7, "1g.10gb"),
            mig(1301, "NVIDIA H100-1-20C", 4, "1g.20gb"),
            mig(1302, "NVIDIA H100-2-20C", 3, "2g.20gb"),
            mig(1303, "NVIDIA H100-3-40C", 2, "3g.40gb"),
            mig(1304, "NVIDIA H100-4-40C", 1, "4g.40gb"),
            mig(1305, "NVIDIA H100-7-80C", 1, "7g.80gb"),
            mig(1314, "NVIDIA H100-1-10CME", 1, "1g.10gb+me"),
        ],
    },
    // H100 SXM5 80GB: the H100 PCIe tables with prefix H100XM- (§3.3). [I] ids assumed.
    Board {
        fb_gib: 80,
        cap: 32,
        c_resolution: (3840, 2400),
        types: &[
            (1326, "NVIDIA H100XM-4C"),
            (1327, "NVIDIA H100XM-5C"),
            (1328, "NVIDIA H100XM-8C"),
            (1329, "NVIDIA H100XM-10C"),
            (1330, "NVIDIA H100XM-16C"),
            (1331, "NVIDIA H100XM-20C"),
            (1332, "NVIDIA H100XM-40C"),
            (1333, "NVIDIA H100XM-80C"),
        ],
        max_overrides: &[],
        mig: &[
            mig(1320, "NVIDIA H100XM-1-10C", 7, "1g.10gb"),
            mig(1321, "NVIDIA H100XM-1-20C", 4, "1g.20gb"),
            mig(1322, "NVIDIA H100XM-2-20C", 3, "2g.20gb"),
            mig(1323, "NVIDIA H100XM-3-40C", 2, "3g.40gb"),
            mig(1324, "NVIDIA H100XM-4-40C", 1, "4g.40gb"),
            mig(1325, "NVIDIA H100XM-7-80C", 1, "7g.80gb"),
            mig(1334, "NVIDIA H100XM-1-10CME", 1, "1g.10gb+me"),
        ],
    },
    // H200 SXM 141GB (§5.5, §3.3). 1414 and 1428 documented; [I] the others assumed.
    Board {
        fb_gib: 141,
        cap: 32,
        c_resolution: (3840, 2400),
        types: &[
            (1420, "NVIDIA H200X-4C"),
            (1421, "NVIDIA H200X-7C"),
            (1422, "NVIDIA H200X-8C"),
            (1423, "NVIDIA H200X-14C"),
            (1424, "NVIDIA H200X-17C"),
            (1425, "NVIDIA H200X-28C"),
            (1426, "NVIDIA H200X-35C"),
            (1427, "NVIDIA H200X-70C"),
            (1428, "NVIDIA H200X-141C"),
        ],
        // §5.5: H200X-8C 16 (the size rule gives 141 / 8 = 17).
        max_overrides: &[(1422, 16)],
        mig: &[
            mig(1414, "NVIDIA H200X-1-18C", 7, "1g.18gb"),
            mig(1415, "NVIDIA H200X-1-35C", 4, "1g.35gb"),
            mig(1416, "NVIDIA H200X-2-35C", 3, "2g.35gb"),
            mig(1417, "NVIDIA H200X-3-71C", 2, "3g.71gb"),
            mig(1418, "NVIDIA H200X-4-71C", 1, "4g.71gb"),
            mig(1419, "NVIDIA H200X-7-141C", 1, "7g.141gb"),
            mig(1429, "NVIDIA H200X-1-18CME", 1, "1g.18gb+me"),
        ],
    },
];

/// Splits `GRID RTX6000-12Q` into (12, 'Q').
fn split_profile(name: &str) -> Option<(u64, char)> {
    let profile = name.rsplit('-').next()?;
    let series = profile.chars().last()?;
    let size = profile[..profile.len() - series.len_utf8()].parse().ok()?;
    Some((size, series))
}

/// Derives a type's figures from its board and profile by the per-series pattern of
/// hardware.md §1.3: Q 4 heads 60 fps (1Q 5120x2880, larger 7680x4320); B 4 heads 45 fps
/// 5120x2880; A 1 head 60 fps 1280x1024; C 1 head 60 fps.
fn derive(board: &Board, id: u32, name: &'static str) -> Option<NvidiaTypeInfo> {
    let (gib, series) = split_profile(name)?;
    if gib == 0 {
        return None;
    }
    let (heads, frl, res) = match series {
        'Q' if gib == 1 => (4, 60, (5120, 2880)),
        'Q' => (4, 60, (7680, 4320)),
        'B' => (4, 45, (5120, 2880)),
        'A' => (1, 60, (1280, 1024)),
        'C' => (1, 60, board.c_resolution),
        _ => return None,
    };
    let max = board
        .max_overrides
        .iter()
        .find(|(i, _)| *i == id)
        .map(|(_, m)| *m)
        .unwrap_or_else(|| {
            u32::try_from(board.fb_gib / gib)
                .unwrap_or(u32::MAX)
                .min(board.cap)
        });
    Some(NvidiaTypeInfo {
        id,
        name,
        framebuffer_mib: gib * 1024,
        max_instances: max,
        heads,
        max_resolution: res,
        frl,
        mig_profile: None,
    })
}

/// A MIG-backed type's figures: the framebuffer its name says (GB as GiB, as §3.3's
/// A100D-1-10C = 10240 MiB), one head at the C-series resolution, 60 fps.
fn derive_mig(board: &Board, t: &MigType) -> Option<NvidiaTypeInfo> {
    let parts = split_mig(t.name)?;
    Some(NvidiaTypeInfo {
        id: t.id,
        name: t.name,
        framebuffer_mib: parts.gb * 1024,
        max_instances: t.max,
        heads: 1,
        max_resolution: board.c_resolution,
        frl: 60,
        mig_profile: Some(t.profile),
    })
}

/// Every NVIDIA type vgpud knows, board by board.
pub fn nvidia_types() -> &'static [NvidiaTypeInfo] {
    static TYPES: OnceLock<Vec<NvidiaTypeInfo>> = OnceLock::new();
    TYPES.get_or_init(|| {
        let mut all = Vec::new();
        for board in BOARDS {
            for (id, name) in board.types {
                if let Some(info) = derive(board, *id, name) {
                    all.push(info);
                }
            }
            all.extend(board.mig.iter().filter_map(|t| derive_mig(board, t)));
        }
        all
    })
}

/// The framebuffer of a board in GiB (`L40S` → 48), if vgpud knows the board.
pub fn nvidia_board_framebuffer_gib(board: &str) -> Option<u64> {
    nvidia_board_types(board)
        .iter()
        .map(|t| t.framebuffer_mib / 1024)
        .max()
}

/// In NVIDIA's heterogeneous (mixed-size) mode, where a vGPU of `type_gib` may sit on a board
/// of `board_gib`: (placement size, number of placements). The board is cut into `2^k`
/// placements (k = 4, 3, … 0, the most that still hold the type) of `board_gib / 2^k` GiB
/// (whole GiB); placement ids are multiples of the size, and vGPUs' placements do not
/// overlap. This reproduces every mixed-size maximum hardware.md §5 gives (48 GB boards: 4C 8,
/// 6C 8, 8C 4, 12C 4, 16C 2, 24C 2; 80 GB: 4C 16, 8C 8, 16C 4; 94 GB: 4C 16, 6C 8, 15C 4;
/// 16 GB: 4C 4, 8C 2) and the L4-6Q example (size 6, ids 0 6 12 18); for Q, B and A types the
/// same rule is assumed [I].
pub fn nvidia_placement(board_gib: u64, type_gib: u64) -> Option<(u64, u64)> {
    (0..=4u32)
        .rev()
        .map(|k| (board_gib >> k, 1u64 << k))
        .find(|(size, _)| *size >= type_gib && *size > 0)
}

/// In heterogeneous mode, the placement ids a vGPU of `type_gib` could take on a board of
/// `board_gib` whose vGPUs sit at `taken` (placement id, type GiB), lowest first: those whose
/// placement overlaps none of theirs.
pub fn nvidia_free_placements(board_gib: u64, type_gib: u64, taken: &[(u64, u64)]) -> Vec<u64> {
    let Some((size, slots)) = nvidia_placement(board_gib, type_gib) else {
        return Vec::new();
    };
    let spans: Vec<(u64, u64)> = taken
        .iter()
        .filter_map(|(at, gib)| Some((*at, nvidia_placement(board_gib, *gib)?.0)))
        .collect();
    (0..slots)
        .map(|i| i * size)
        .filter(|id| {
            spans
                .iter()
                .all(|(at, len)| id + size <= *at || at + len <= *id)
        })
        .collect()
}

/// The types of one board, time-sliced and MIG-backed, by the name prefix without the vendor
/// word (`RTX6000`, `T4`, `A40`, `H200X`), or by the board's PCI model name as
/// [`pci_model_name`] gives it (`H100 PCIe` → the `H100` types, `A100 PCIe 80GB` → `A100D`).
pub fn nvidia_board_types(board: &str) -> Vec<&'static NvidiaTypeInfo> {
    let of = |board: &str| -> Vec<&'static NvidiaTypeInfo> {
        nvidia_types()
            .iter()
            .filter(|t| board_of(t.name) == Some(board))
            .collect()
    };
    let types = of(board);
    if !types.is_empty() {
        return types;
    }
    nvidia_board_of_model(board).map(of).unwrap_or_default()
}

/// The vGPU board of an NVIDIA PCI model name (`H200 SXM 141GB` → `H200X`), for boards one
/// PCI id (with any subsystem) or one PCI id and subsystem names.
pub fn nvidia_board_of_model(model: &str) -> Option<&'static str> {
    let by_sub = PCI_SUBSYSTEM_MODELS
        .iter()
        .find(|(v, _, _, _, name)| *v == VENDOR_NVIDIA && *name == model)
        .map(|(_, d, _, sd, _)| (*d, Some(*sd)));
    let by_id = || {
        PCI_MODELS
            .iter()
            .find(|(v, _, name)| *v == VENDOR_NVIDIA && *name == model)
            .map(|(_, d, _)| (*d, None))
    };
    let (device, sub) = by_sub.or_else(by_id)?;
    NVIDIA_BOARDS
        .iter()
        .find(|(d, s, _, _)| *d == device && (s.is_none() || *s == sub))
        .map(|(_, _, board, _)| *board)
}

fn strip_vendor(name: &str) -> &str {
    name.strip_prefix("GRID ")
        .or_else(|| name.strip_prefix("NVIDIA "))
        .unwrap_or(name)
}

/// An NVIDIA type by its `name` attribute (`GRID RTX6000-4Q`), or by the name without the
/// vendor word (`RTX6000-4Q`); case-insensitive.
pub fn nvidia_type_by_name(name: &str) -> Option<&'static NvidiaTypeInfo> {
    let name = name.trim();
    nvidia_types()
        .iter()
        .find(|t| t.name.eq_ignore_ascii_case(name))
        .or_else(|| {
            let short = strip_vendor(name);
            nvidia_types()
                .iter()
                .find(|t| strip_vendor(t.name).eq_ignore_ascii_case(short))
        })
}

/// An NVIDIA type by its numeric id (`259` for `nvidia-259`).
pub fn nvidia_type_by_id(id: u32) -> Option<&'static NvidiaTypeInfo> {
    nvidia_types().iter().find(|t| t.id == id)
}

/// How the NVIDIA host driver shares a board on the hosts vgpud targets (hardware.md §1.3, §2):
/// what the driver's probe registers when it binds a function of the board.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvidiaScheme {
    /// Legacy mdev (Maxwell … Turing): the physical function is the mdev parent.
    Mdev,
    /// SR-IOV with mdev (Ampere on pre-vGPU-17 hosts): each VF bound to `nvidia` is an mdev
    /// parent holding one vGPU at most; the PF registers nothing.
    MdevOnVf,
    /// SR-IOV with NVIDIA's vendor-specific VFIO framework (Ada and newer, vGPU 17+ on kernel
    /// 6.8+): each VF bound to `nvidia` gets `nvidia/{creatable_vgpu_types,current_vgpu_type,
    /// vgpu_params}` and a vfio device; the PF registers nothing.
    VendorVfio,
}

/// NVIDIA boards by PCI id: (device, subsystem device or `None` for any, board name as in the
/// type names, scheme). Ampere boards are assumed to run the mdev-on-VF scheme and Ada and
/// Hopper the vendor-VFIO one: the split hardware.md §2 describes for a host that has both (the
/// scheme is really chosen by the driver branch and kernel, per host). 0x2335 (H200 SXM) is an
/// assumed device id [I].
const NVIDIA_BOARDS: &[(u16, Option<u16>, &str, NvidiaScheme)] = &[
    (0x1e30, Some(0x12ba), "RTX6000", NvidiaScheme::Mdev),
    (0x1e30, Some(0x129e), "RTX8000", NvidiaScheme::Mdev),
    (0x1eb8, None, "T4", NvidiaScheme::Mdev),
    (0x2236, None, "A10", NvidiaScheme::MdevOnVf),
    (0x25b6, None, "A16", NvidiaScheme::MdevOnVf),
    (0x2235, None, "A40", NvidiaScheme::MdevOnVf),
    (0x20b5, None, "A100D", NvidiaScheme::MdevOnVf),
    (0x26b9, None, "L40S", NvidiaScheme::VendorVfio),
    (0x2331, None, "H100", NvidiaScheme::VendorVfio),
    (0x2330, None, "H100XM", NvidiaScheme::VendorVfio),
    (0x2335, None, "H200X", NvidiaScheme::VendorVfio),
];

/// The vGPU board (as in [`nvidia_board_types`]) and sharing scheme of an NVIDIA GPU with PCI
/// device id `device` and subsystem device id `subsystem_device`; `None` for a GPU without
/// vGPU support.
pub fn nvidia_board(device: u16, subsystem_device: u16) -> Option<(&'static str, NvidiaScheme)> {
    NVIDIA_BOARDS
        .iter()
        .find(|(d, sub, _, _)| *d == device && sub.is_none_or(|s| s == subsystem_device))
        .map(|(_, _, board, scheme)| (*board, *scheme))
}

/// An Intel GVT-g type (hardware.md §5.7; i915 `intel_vgpu_configs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GvtgTypeInfo {
    /// The `name` attribute without the generation: `8` for `GVTg_V5_8`.
    pub suffix: &'static str,
    /// Aperture (low graphics memory) in MiB.
    pub low_gm_mib: u64,
    /// Hidden (high graphics memory) in MiB.
    pub high_gm_mib: u64,
    /// Fence registers.
    pub fences: u32,
    /// Scheduling weight.
    pub weight: u32,
    /// Resolution (width, height).
    pub resolution: (u32, u32),
}

impl GvtgTypeInfo {
    /// The type's `description` attribute as kvmgt prints it.
    pub fn description(&self) -> String {
        format!(
            "low_gm_size: {}MB\nhigh_gm_size: {}MB\nfence: {}\nresolution: {}x{}\nweight: {}\n",
            self.low_gm_mib,
            self.high_gm_mib,
            self.fences,
            self.resolution.0,
            self.resolution.1,
            self.weight
        )
    }
}

/// The GVT-g types in the order i915 registers them.
pub const GVTG_TYPES: &[GvtgTypeInfo] = &[
    GvtgTypeInfo {
        suffix: "8",
        low_gm_mib: 64,
        high_gm_mib: 384,
        fences: 4,
        weight: 2,
        resolution: (1024, 768),
    },
    GvtgTypeInfo {
        suffix: "4",
        low_gm_mib: 128,
        high_gm_mib: 512,
        fences: 4,
        weight: 4,
        resolution: (1920, 1200),
    },
    GvtgTypeInfo {
        suffix: "2",
        low_gm_mib: 256,
        high_gm_mib: 1024,
        fences: 4,
        weight: 8,
        resolution: (1920, 1200),
    },
    GvtgTypeInfo {
        suffix: "1",
        low_gm_mib: 512,
        high_gm_mib: 2048,
        fences: 4,
        weight: 16,
        resolution: (1920, 1200),
    },
];

/// A GVT-g type by its name or type id (`GVTg_V5_4`, `i915-GVTg_V4_2`).
pub fn gvtg_type_by_name(name: &str) -> Option<&'static GvtgTypeInfo> {
    let name = name.trim();
    let name = name.strip_prefix("i915-").unwrap_or(name);
    let rest = name.strip_prefix("GVTg_V")?;
    let (_gen, suffix) = rest.split_once('_')?;
    GVTG_TYPES.iter().find(|t| t.suffix == suffix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_names_are_known_for_the_simulated_boards() {
        assert_eq!(pci_model_name(0x10de, 0x1eb8), Some("Tesla T4"));
        assert_eq!(pci_model_name(0x10de, 0x1e30), Some("Quadro RTX 6000/8000"));
        assert_eq!(pci_model_name(0x8086, 0x3e92), Some("UHD Graphics 630"));
        assert_eq!(pci_model_name(0x10de, 0xffff), None);
        assert_eq!(pci_model_name(0x8086, 0x1eb8), None);
        let by_sub = pci_model_name_with_subsystem;
        assert_eq!(
            by_sub(0x10de, 0x1e30, 0x10de, 0x129e),
            Some("Quadro RTX 8000")
        );
        assert_eq!(
            by_sub(0x10de, 0x1e30, 0x10de, 0x12ba),
            Some("Quadro RTX 6000")
        );
        assert_eq!(
            by_sub(0x10de, 0x1e30, 0x1028, 0x0000),
            Some("Quadro RTX 6000/8000")
        );
        assert_eq!(by_sub(0x10de, 0x1eb8, 0x10de, 0x12a2), Some("Tesla T4"));
        assert_eq!(by_sub(0x10de, 0xffff, 0x10de, 0x129e), None);
    }

    #[test]
    fn rtx8000_types_follow_the_510_list() {
        let types = nvidia_board_types("RTX8000");
        assert_eq!(types.len(), 29);
        let ids: Vec<u32> = types.iter().map(|t| t.id).collect();
        let expected: Vec<u32> = (264..=273).chain(348..=354).chain(445..=456).collect();
        assert_eq!(ids, expected);
        let max = |n: &str| {
            let t = nvidia_type_by_name(&format!("GRID RTX8000-{n}")).expect(n);
            t.max_instances
        };
        let q = [
            "1Q", "2Q", "3Q", "4Q", "6Q", "8Q", "12Q", "16Q", "24Q", "48Q",
        ];
        let per_size = [32, 24, 16, 12, 8, 6, 4, 3, 2, 1];
        for (p, m) in q.iter().zip(per_size) {
            assert_eq!(max(p), m, "{p}");
            assert_eq!(max(&p.replace('Q', "A")), m, "{p} as A");
        }
        assert_eq!((max("1B"), max("2B")), (32, 24));
        let c = ["4C", "6C", "8C", "12C", "16C", "24C", "48C"];
        for (p, m) in c.iter().zip([12, 8, 6, 4, 3, 2, 1]) {
            assert_eq!(max(p), m, "{p}");
        }
        let t = nvidia_type_by_id(264).expect("1Q");
        assert_eq!(t.name, "GRID RTX8000-1Q");
        assert_eq!(
            t.description(),
            "num_heads=4, frl_config=60, framebuffer=1024M, max_resolution=5120x2880, max_instance=32\n"
        );
        let t = nvidia_type_by_id(273).expect("48Q");
        assert_eq!(
            t.description(),
            "num_heads=4, frl_config=60, framebuffer=49152M, max_resolution=7680x4320, max_instance=1\n"
        );
        let b = nvidia_type_by_id(446).expect("2B");
        assert_eq!((b.heads, b.frl, b.max_resolution), (4, 45, (5120, 2880)));
        let a = nvidia_type_by_id(456).expect("48A");
        assert_eq!(
            (a.name, a.heads, a.frl, a.max_resolution),
            ("GRID RTX8000-48A", 1, 60, (1280, 1024))
        );
        let c = nvidia_type_by_id(348).expect("4C");
        assert_eq!(
            (c.name, c.heads, c.frl, c.max_resolution, c.framebuffer_mib),
            ("GRID RTX8000-4C", 1, 60, (4096, 2160), 4096)
        );
        // The T4 rows stay.
        assert_eq!(nvidia_board_types("T4").len(), 15);
    }

    #[test]
    fn rtx6000_types_match_a_real_dump() {
        let t = nvidia_type_by_name("GRID RTX6000-1Q").expect("1Q");
        assert_eq!(t.id, 256);
        assert_eq!(
            t.description(),
            "num_heads=4, frl_config=60, framebuffer=1024M, max_resolution=5120x2880, max_instance=24\n"
        );
        let t = nvidia_type_by_id(259).expect("259");
        assert_eq!(t.name, "GRID RTX6000-4Q");
        assert_eq!((t.framebuffer_mib, t.max_instances), (4096, 6));
        assert_eq!(t.max_resolution, (7680, 4320));
        let b = nvidia_type_by_name("rtx6000-2b").expect("2B");
        assert_eq!((b.id, b.heads, b.frl, b.max_instances), (436, 4, 45, 12));
        let a = nvidia_type_by_id(444).expect("24A");
        assert_eq!(
            (a.heads, a.max_resolution, a.max_instances),
            (1, (1280, 1024), 1)
        );
        let c = nvidia_type_by_id(347).expect("24C");
        assert_eq!(
            (c.series(), c.framebuffer_mib, c.max_instances),
            ('C', 24576, 1)
        );
        assert_eq!(nvidia_board_types("RTX6000").len(), 23);
    }

    #[test]
    fn ampere_counts_follow_the_tables() {
        // §5.2: A40-1B 32, 2B 24, 1Q 32, 48Q 1; §5.4 A100D-4C 20.
        let max = |n: &str| nvidia_type_by_name(n).map(|t| t.max_instances);
        assert_eq!(max("NVIDIA A40-1B"), Some(32));
        assert_eq!(max("NVIDIA A40-2B"), Some(24));
        assert_eq!(max("NVIDIA A40-1Q"), Some(32));
        assert_eq!(max("NVIDIA A40-48Q"), Some(1));
        assert_eq!(max("NVIDIA A16-1B"), Some(16));
        assert_eq!(max("NVIDIA A100D-4C"), Some(20));
        assert_eq!(max("NVIDIA A100D-10C"), Some(8));
        assert_eq!(max("NVIDIA L40S-3B"), Some(16));
        assert_eq!(max("GRID T4-16Q"), Some(1));
        assert_eq!(
            nvidia_type_by_id(558).map(|t| t.name),
            Some("NVIDIA A40-2Q")
        );
    }

    #[test]
    fn boards_have_a_scheme() {
        assert_eq!(
            nvidia_board(0x1e30, 0x12ba),
            Some(("RTX6000", NvidiaScheme::Mdev))
        );
        assert_eq!(
            nvidia_board(0x1e30, 0x129e),
            Some(("RTX8000", NvidiaScheme::Mdev))
        );
        assert_eq!(nvidia_board(0x1e30, 0x0000), None);
        assert_eq!(
            nvidia_board(0x2235, 0x145a),
            Some(("A40", NvidiaScheme::MdevOnVf))
        );
        assert_eq!(
            nvidia_board(0x26b9, 0x1851),
            Some(("L40S", NvidiaScheme::VendorVfio))
        );
        assert_eq!(nvidia_board(0x24b0, 0x14ad), None);
        for (_, _, board, _) in NVIDIA_BOARDS {
            assert!(!nvidia_board_types(board).is_empty(), "{board}");
        }
        assert_eq!(pci_model_name(0x10de, 0x24b0), Some("RTX A4000"));
        assert_eq!(pci_model_name(0x1002, 0x74b5), Some("Instinct MI300X VF"));
    }

    #[test]
    fn ids_are_unique() {
        let mut ids: Vec<u32> = nvidia_types().iter().map(|t| t.id).collect();
        let n = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n);
        assert!(n > 100);
    }

    #[test]
    fn hopper_boards_and_their_time_sliced_types() {
        assert_eq!(
            nvidia_board(0x2331, 0x1626),
            Some(("H100", NvidiaScheme::VendorVfio))
        );
        assert_eq!(
            nvidia_board(0x2330, 0x16c1),
            Some(("H100XM", NvidiaScheme::VendorVfio))
        );
        assert_eq!(
            nvidia_board(0x2335, 0x18be),
            Some(("H200X", NvidiaScheme::VendorVfio))
        );
        assert_eq!(
            nvidia_board(0x20b5, 0x1533),
            Some(("A100D", NvidiaScheme::MdevOnVf))
        );
        assert_eq!(pci_model_name(0x10de, 0x2335), Some("H200 SXM 141GB"));
        // §5.5: H100 PCIe 80GB, 1 head.
        let max = |n: &str| {
            let t = nvidia_type_by_name(n).expect(n);
            assert!(!t.is_mig_backed(), "{n}");
            assert_eq!((t.series(), t.heads), ('C', 1), "{n}");
            (t.framebuffer_mib, t.max_instances)
        };
        for (n, gib, m) in [
            ("4C", 4, 20),
            ("5C", 5, 16),
            ("8C", 8, 10),
            ("10C", 10, 8),
            ("16C", 16, 5),
            ("20C", 20, 4),
            ("40C", 40, 2),
            ("80C", 80, 1),
        ] {
            for board in ["H100", "H100XM"] {
                assert_eq!(max(&format!("NVIDIA {board}-{n}")), (gib * 1024, m), "{n}");
            }
        }
        // §5.5: H200: 4C 32, 7C 20, 8C 16, 14C 10, 17C 8, 28C 5, 35C 4, 70C 2, 141C 1.
        for (n, gib, m) in [
            ("4C", 4, 32),
            ("7C", 7, 20),
            ("8C", 8, 16),
            ("14C", 14, 10),
            ("17C", 17, 8),
            ("28C", 28, 5),
            ("35C", 35, 4),
            ("70C", 70, 2),
            ("141C", 141, 1),
        ] {
            assert_eq!(max(&format!("H200X-{n}")), (gib * 1024, m), "{n}");
        }
        assert_eq!(
            nvidia_type_by_id(1428).map(|t| t.name),
            Some("NVIDIA H200X-141C")
        );
        assert_eq!(nvidia_board_framebuffer_gib("H200X"), Some(141));
        assert_eq!(nvidia_board_framebuffer_gib("H100"), Some(80));
        assert_eq!(nvidia_board_types("H100").len(), 15);
        assert_eq!(nvidia_board_types("H100XM").len(), 15);
        assert_eq!(nvidia_board_types("H200X").len(), 16);
        assert_eq!(nvidia_board_types("A100D").len(), 14);
        // By the PCI model name too.
        assert_eq!(nvidia_board_of_model("H100 PCIe"), Some("H100"));
        assert_eq!(nvidia_board_of_model("A100 PCIe 80GB"), Some("A100D"));
        assert_eq!(nvidia_board_of_model("Quadro RTX 8000"), Some("RTX8000"));
        assert_eq!(nvidia_board_of_model("RTX A4000"), None);
        assert_eq!(nvidia_board_types("H200 SXM 141GB").len(), 16);
        assert_eq!(nvidia_board_framebuffer_gib("H100 SXM5 80GB"), Some(80));
        // Boards whose prefixes share a start stay apart.
        assert!(nvidia_board_types("H100")
            .iter()
            .all(|t| t.name.starts_with("NVIDIA H100-")));
    }

    #[test]
    fn mig_backed_types_name_their_gpu_instance_profile() {
        let mut seen = 0;
        for t in nvidia_types() {
            let parts = split_mig(t.name);
            assert_eq!(t.is_mig_backed(), parts.is_some(), "{}", t.name);
            let (Some(profile), Some(m)) = (t.mig_profile, parts) else {
                continue;
            };
            seen += 1;
            // `<board>-<G>-<GB>C[ME]` is backed by `<G>g.<GB>gb[+me]`.
            let me = if m.suffix == "ME" { "+me" } else { "" };
            assert_eq!(
                profile,
                format!("{}g.{}gb{me}", m.slices, m.gb),
                "{}",
                t.name
            );
            assert_eq!(t.framebuffer_mib, m.gb * 1024, "{}", t.name);
            assert_eq!((t.series(), t.heads, t.frl), ('C', 1, 60), "{}", t.name);
            assert!(t.max_instances >= 1 && t.max_instances <= 7, "{}", t.name);
        }
        assert_eq!(seen, 7 * 4);
        // §3.3's documented rows.
        let t = |id: u32| nvidia_type_by_id(id).expect("id");
        assert_eq!(
            (t(1414).name, t(1414).mig_profile, t(1414).max_instances),
            ("NVIDIA H200X-1-18C", Some("1g.18gb"), 7)
        );
        assert_eq!(
            (t(707).name, t(707).mig_profile, t(707).max_instances),
            ("NVIDIA A100D-1-10CME", Some("1g.10gb+me"), 1)
        );
        for (id, name, max, fb) in [
            (703, "NVIDIA A100D-7-80C", 1, 81920),
            (702, "NVIDIA A100D-4-40C", 1, 40960),
            (701, "NVIDIA A100D-3-40C", 2, 40960),
            (700, "NVIDIA A100D-2-20C", 3, 20480),
            (699, "NVIDIA A100D-1-10C", 7, 10240),
        ] {
            assert_eq!(
                (t(id).name, t(id).max_instances, t(id).framebuffer_mib),
                (name, max, fb)
            );
        }
        let h = nvidia_type_by_name("h100-1-10cme").expect("CME");
        assert_eq!((h.mig_profile, h.max_instances), (Some("1g.10gb+me"), 1));
        assert_eq!(
            nvidia_type_by_name("NVIDIA H200X-7-141C").and_then(|t| t.mig_profile),
            Some("7g.141gb")
        );
        // The H200X ids are contiguous around the documented ones.
        let mut ids: Vec<u32> = nvidia_board_types("H200X").iter().map(|t| t.id).collect();
        ids.sort_unstable();
        assert_eq!(ids, (1414..=1429).collect::<Vec<_>>());
        // Time-sliced names are not taken for MIG ones.
        assert_eq!(split_mig("GRID RTX6000-Ada-1Q"), None);
        assert_eq!(split_mig("NVIDIA A100D-4C"), None);
        assert_eq!(board_of("NVIDIA H200X-1-18CME"), Some("H200X"));
        assert_eq!(board_of("GRID RTX6000-4Q"), Some("RTX6000"));
    }

    #[test]
    fn gvtg_types_print_like_kvmgt() {
        let t = gvtg_type_by_name("i915-GVTg_V5_4").expect("V5_4");
        assert_eq!(
            t.description(),
            "low_gm_size: 128MB\nhigh_gm_size: 512MB\nfence: 4\nresolution: 1920x1200\nweight: 4\n"
        );
        assert_eq!(gvtg_type_by_name("GVTg_V5_8").map(|t| t.weight), Some(2));
        assert!(gvtg_type_by_name("GVTg_V5_3").is_none());
    }

    #[test]
    fn placement_sizes_give_the_documented_mixed_size_maxima() {
        let max = |board: u64, ty: u64| nvidia_placement(board, ty).expect("fits").1;
        for (ty, expected) in [(4, 8), (6, 8), (8, 4), (12, 4), (16, 2), (24, 2), (48, 1)] {
            assert_eq!(max(48, ty), expected, "48 GB board, {ty} GB type");
        }
        for (ty, expected) in [(4, 16), (8, 8), (10, 8), (16, 4), (20, 4), (40, 2), (80, 1)] {
            assert_eq!(max(80, ty), expected, "80 GB board, {ty} GB type");
        }
        for (ty, expected) in [(4, 16), (6, 8), (15, 4), (94, 1)] {
            assert_eq!(max(94, ty), expected, "94 GB board, {ty} GB type");
        }
        for (ty, expected) in [(4, 4), (8, 2), (16, 1)] {
            assert_eq!(max(16, ty), expected, "16 GB board, {ty} GB type");
        }
        assert_eq!(
            nvidia_placement(24, 6),
            Some((6, 4)),
            "L4-6Q: size 6, ids 0 6 12 18"
        );
        assert_eq!(nvidia_placement(48, 49), None);
        // An 8 GiB vGPU at 0 and a 4 GiB one at 12 on 48 GiB: 4 GiB placements left.
        assert_eq!(
            nvidia_free_placements(48, 4, &[(0, 8), (12, 4)]),
            vec![18, 24, 30, 36, 42]
        );
        assert_eq!(nvidia_board_framebuffer_gib("L40S"), Some(48));
    }
}
