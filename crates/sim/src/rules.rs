//! The vendor rules behind `available_instances`, derived from the tree every time: the devices
//! that exist (the parent's device directories and their `mdev_type` links, which name the same
//! devices as the `<type>/devices/` entries once an operation is complete) and the type and
//! parent attributes. An operation reads them once ([`Rules::read`]) and computes the values
//! before and after its change from that reading. The only thing kept between operations is
//! the text of static attribute files (`description`, a GVT-g parent's `resource`), by
//! [`fsx::read_static`], which gives it back only while the file is the very file it was read
//! from (device, inode, size, modification and change times) and was not changed recently.

use std::io;
use std::path::{Path, PathBuf};

use nix::errno::Errno;

use super::fsx;
use vgpud_catalog as catalog;

/// The mdev driver family that owns a parent, which decides its capacity rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Vendor {
    /// NVIDIA legacy time-sliced vGPU (parent driver `nvidia`, types `nvidia-N`).
    Nvidia,
    /// Intel GVT-g (parent driver `i915`, types `i915-GVTg_*`).
    Gvtg,
    /// The kernel's mtty sample (types `mtty-N`).
    Mtty,
    /// Anything else; the string is the type-id prefix, taken as the mdev driver name.
    Other(String),
}

impl Vendor {
    /// The vendor of a parent: its driver's name, else the prefix of its type ids (which the
    /// kernel builds from `dev_driver_string(parent)`; mtty's parent has no driver).
    pub(crate) fn of(parent: &Path) -> io::Result<Vendor> {
        match fsx::link_basename(&parent.join("driver")).as_deref() {
            Some("nvidia") => return Ok(Vendor::Nvidia),
            Some("i915") => return Ok(Vendor::Gvtg),
            _ => {}
        }
        let types = fsx::list(&parent.join("mdev_supported_types"))?;
        let prefix = types
            .first()
            .and_then(|t| t.rsplit_once('-'))
            .map_or("", |(p, _)| p);
        Ok(match prefix {
            "nvidia" => Vendor::Nvidia,
            "i915" => Vendor::Gvtg,
            "mtty" => Vendor::Mtty,
            p => Vendor::Other(p.to_string()),
        })
    }

    /// The mdev driver the device binds to (`sys/bus/mdev/drivers/<name>`).
    pub(crate) fn mdev_driver(&self) -> &str {
        match self {
            Vendor::Nvidia => "nvidia-vgpu-vfio",
            Vendor::Gvtg => "intel_vgpu_mdev",
            Vendor::Mtty => "mtty",
            Vendor::Other(p) => p,
        }
    }

    /// The errno of a create on a type with no capacity left. mtty's probe and GVT-g's
    /// resource allocation (`alloc_resource`) return `-ENOSPC`; the NVIDIA driver's value is
    /// not public, ENOSPC is assumed. For other drivers the simulator models the mdev core's
    /// parent-level counter (drivers without `get_available`), which refuses with `-EUSERS`.
    pub(crate) fn no_capacity(&self) -> Errno {
        match self {
            Vendor::Other(_) => Errno::EUSERS,
            _ => Errno::ENOSPC,
        }
    }
}

/// A type directory of a parent and how many devices of it exist.
#[derive(Debug)]
pub(crate) struct TypeState {
    pub(crate) id: String,
    pub(crate) dir: PathBuf,
    pub(crate) count: u32,
}

/// The types of `parent` with their device counts: the parent's device directories (named by
/// a UUID) each count for the type their `mdev_type` link names.
pub(crate) fn types(parent: &Path) -> io::Result<Vec<TypeState>> {
    let base = parent.join("mdev_supported_types");
    let mut out: Vec<TypeState> = fsx::list_dirs(&base)?
        .into_iter()
        .map(|id| TypeState {
            dir: base.join(&id),
            id,
            count: 0,
        })
        .collect();
    if out.is_empty() {
        return Ok(out);
    }
    for child in fsx::list_dirs(parent)? {
        if crate::kernel::guid_parse(&child).is_none() {
            continue;
        }
        let Some(type_id) = fsx::link_basename(&parent.join(&child).join("mdev_type")) else {
            continue;
        };
        if let Some(t) = out.iter_mut().find(|t| t.id == type_id) {
            t.count = t.count.saturating_add(1);
        }
    }
    Ok(out)
}

/// What just happened on the parent; only the counter model of unknown vendors needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Nothing: recompute.
    None,
    /// One device was created.
    Created,
    /// One device was removed.
    Removed,
}

/// What the rule of a parent's vendor needs, read once from the tree: the types with their
/// device counts and figures. [`Rules::values`] computes from it alone, so an operation can
/// tell the values before and after its change without reading the tree again.
pub(crate) struct Rules {
    /// `<parent>/mdev_supported_types`.
    base: PathBuf,
    pub(crate) types: Vec<TypeState>,
    kind: Kind,
}

enum Kind {
    Nvidia {
        figures: Vec<Option<(u64, u32)>>,
        /// An SR-IOV VF parent: the framebuffer sizes of the vGPUs on every VF of its PF.
        pf_used: Option<Vec<Option<u64>>>,
    },
    Gvtg {
        aperture: Option<i64>,
        figures: Vec<Option<(i64, i64, i64)>>,
    },
    Mtty,
    Other,
}

impl Rules {
    /// Reads the types of `parent` and what its vendor's rule needs of them.
    pub(crate) fn read(parent: &Path, vendor: &Vendor) -> io::Result<Rules> {
        let types = types(parent)?;
        let kind = match vendor {
            Vendor::Nvidia => {
                let pf_used = if fsx::exists_nofollow(&parent.join("physfn")) {
                    Some(
                        std::fs::canonicalize(parent.join("physfn"))
                            .map(|pf| pf_mdev_vgpus(&pf))
                            .unwrap_or_default(),
                    )
                } else {
                    None
                };
                Kind::Nvidia {
                    figures: types.iter().map(nvidia_figures).collect(),
                    pf_used,
                }
            }
            Vendor::Gvtg => Kind::Gvtg {
                aperture: gvtg_aperture_mib(parent).and_then(|a| i64::try_from(a).ok()),
                figures: types.iter().map(gvtg_figures).collect(),
            },
            Vendor::Mtty => Kind::Mtty,
            Vendor::Other(_) => Kind::Other,
        };
        Ok(Rules {
            base: parent.join("mdev_supported_types"),
            types,
            kind,
        })
    }

    /// `available_instances` of every type under the rule, in the order of `types`; `None`
    /// where the rule cannot tell (unknown vendor, or a type whose figures are nowhere).
    pub(crate) fn values(&self) -> Vec<Option<u32>> {
        match &self.kind {
            Kind::Nvidia { figures, pf_used } => nvidia(&self.types, figures, pf_used.as_deref()),
            Kind::Gvtg { aperture, figures } => gvtg(&self.types, *aperture, figures),
            Kind::Mtty => mtty(&self.types),
            Kind::Other => vec![None; self.types.len()],
        }
    }

    /// The capacity of one type now: the rule's value, or the file's where the rule cannot
    /// tell.
    pub(crate) fn available(&self, type_id: &str) -> u32 {
        let values = self.values();
        match self.types.iter().position(|t| t.id == type_id) {
            Some(i) => values[i].unwrap_or_else(|| read_available(&self.types[i].dir)),
            None => read_available(&self.base.join(type_id)),
        }
    }

    /// One device of `type_id` more (`Change::Created`) or less (`Change::Removed`): the
    /// counts as the tree has them once the operation is done.
    pub(crate) fn apply(&mut self, type_id: &str, change: Change) {
        let Some(i) = self.types.iter().position(|t| t.id == type_id) else {
            return;
        };
        let t = &mut self.types[i];
        match change {
            Change::Created => t.count = t.count.saturating_add(1),
            Change::Removed => t.count = t.count.saturating_sub(1),
            Change::None => return,
        }
        if let Kind::Nvidia {
            figures,
            pf_used: Some(used),
        } = &mut self.kind
        {
            let fb = figures[i].map(|(fb, _)| fb);
            if change == Change::Created {
                used.push(fb);
            } else if let Some(at) = used.iter().position(|u| *u == fb) {
                used.remove(at);
            }
        }
    }

    /// The `available_instances` the files hold, per type, where the rule cannot tell them
    /// (the counter model of unknown vendors): what recovery needs to put the counts back.
    pub(crate) fn counters(&self) -> Vec<(String, u32)> {
        self.types
            .iter()
            .zip(self.values())
            .filter(|(_, value)| value.is_none())
            .map(|(t, _)| (t.id.clone(), read_available(&t.dir)))
            .collect()
    }

    /// Rewrites `available_instances` ("%u\n") of every type whose file does not say the
    /// rule's value. For unknown vendors the mdev core's parent-level counter is modelled:
    /// every type goes down by one on a create and up by one on a remove.
    pub(crate) fn store(&self, change: Change) -> io::Result<()> {
        for (t, value) in self.types.iter().zip(self.values()) {
            let current = fsx::read_small(&t.dir.join("available_instances"));
            let old = current
                .as_deref()
                .and_then(|s| s.trim().parse::<u32>().ok());
            let new = match (value, change) {
                (Some(v), _) => v,
                (None, Change::Created) => old.unwrap_or(0).saturating_sub(1),
                (None, Change::Removed) => old.unwrap_or(0).saturating_add(1),
                (None, Change::None) => continue,
            };
            store(t, current.as_deref(), new)?;
        }
        Ok(())
    }
}

/// `available_instances` of every type of `parent` under its vendor rule; `None` where the rule
/// cannot tell (unknown vendor, or a type whose figures are nowhere to be found).
pub(crate) fn compute(parent: &Path, vendor: &Vendor) -> io::Result<Vec<(TypeState, Option<u32>)>> {
    let rules = Rules::read(parent, vendor)?;
    let values = rules.values();
    Ok(rules.types.into_iter().zip(values).collect())
}

fn read_available(type_dir: &Path) -> u32 {
    fsx::read_small(&type_dir.join("available_instances"))
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Rewrites `available_instances` of every type of `parent` from the tree as it is now (see
/// [`Rules::store`]).
pub(crate) fn refresh(parent: &Path, vendor: &Vendor, change: Change) -> io::Result<()> {
    Rules::read(parent, vendor)?.store(change)
}

/// Writes `new` to the type's `available_instances` unless it already says so.
fn store(t: &TypeState, current: Option<&str>, new: u32) -> io::Result<()> {
    let text = format!("{new}\n");
    if current != Some(text.as_str()) {
        fsx::write_atomic(&t.dir.join("available_instances"), &text, 0o444)?;
    }
    Ok(())
}

/// `available_instances` after an interrupted operation is finished: the rule's value where it
/// tells; otherwise the count recorded before the operation (`before`, from [`counters`]), one
/// up when the operation was a remove (now complete), unchanged for a create (now undone).
pub(crate) fn settle(
    parent: &Path,
    vendor: &Vendor,
    before: &[(String, u32)],
    removed: bool,
) -> io::Result<()> {
    for (t, value) in compute(parent, vendor)? {
        let new = match value {
            Some(v) => v,
            None => match before.iter().find(|(id, _)| *id == t.id) {
                Some((_, n)) if removed => n.saturating_add(1),
                Some((_, n)) => *n,
                None => continue,
            },
        };
        let current = fsx::read_small(&t.dir.join("available_instances"));
        store(&t, current.as_deref(), new)?;
    }
    Ok(())
}

/// Recomputes the `available_instances` of every type of an mdev parent from the tree.
pub fn refresh_available(parent: &Path) -> io::Result<()> {
    let vendor = Vendor::of(parent)?;
    refresh(parent, &vendor, Change::None)
}

// ---- NVIDIA -------------------------------------------------------------------------------

/// Framebuffer (MiB) and max_instance of an NVIDIA type: from its `description`, else from the
/// catalog by its `name`, else by the number in its id.
fn nvidia_figures(t: &TypeState) -> Option<(u64, u32)> {
    let (mut fb, mut max) = (None, None);
    if let Some(desc) = fsx::read_static(&t.dir.join("description")) {
        for field in desc.split([',', '\n']) {
            let Some((k, v)) = field.trim().split_once('=') else {
                continue;
            };
            match k.trim() {
                "framebuffer" => fb = parse_size_mib(v.trim()),
                "max_instance" => max = v.trim().parse().ok(),
                _ => {}
            }
        }
    }
    if fb.is_none() || max.is_none() {
        let known = fsx::read_opt(&t.dir.join("name"))
            .and_then(|n| catalog::nvidia_type_by_name(n.trim()))
            .or_else(|| {
                t.id.rsplit('-')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .and_then(catalog::nvidia_type_by_id)
            });
        if let Some(k) = known {
            fb = fb.or(Some(k.framebuffer_mib));
            max = max.or(Some(k.max_instances));
        }
    }
    Some((fb?, max?))
}

/// `1024M` → 1024, `2G` → 2048, `1024` → 1024.
fn parse_size_mib(s: &str) -> Option<u64> {
    if let Some(g) = s.strip_suffix('G') {
        return g.trim().parse::<u64>().ok().map(|g| g * 1024);
    }
    s.trim_end_matches("MB")
        .trim_end_matches('M')
        .trim()
        .parse()
        .ok()
}

/// Recomputes `available_instances` of the NVIDIA VF mdev parents `vfs`, all of one PF whose
/// vGPUs (see [`pf_mdev_vgpus`]) are counted once for all of them.
pub(crate) fn refresh_nvidia_vfs(pf: &Path, vfs: &[PathBuf]) -> io::Result<()> {
    let used = pf_mdev_vgpus(pf);
    for vf in vfs {
        let types = types(vf)?;
        let figures: Vec<_> = types.iter().map(nvidia_figures).collect();
        for (t, value) in types.iter().zip(nvidia(&types, &figures, Some(&used))) {
            if let Some(v) = value {
                let current = fsx::read_small(&t.dir.join("available_instances"));
                store(t, current.as_deref(), v)?;
            }
        }
    }
    Ok(())
}

/// Framebuffer sizes of the vGPUs (mdevs) on every VF of `pf`.
fn pf_mdev_vgpus(pf: &Path) -> Vec<Option<u64>> {
    let mut out = Vec::new();
    let vfs = super::binding::virtfns(pf).unwrap_or_default();
    for vf in vfs {
        for child in fsx::list(&vf).unwrap_or_default() {
            let Some(type_id) = fsx::link_basename(&vf.join(&child).join("mdev_type")) else {
                continue;
            };
            let t = TypeState {
                dir: vf.join("mdev_supported_types").join(&type_id),
                id: type_id,
                count: 1,
            };
            out.push(nvidia_figures(&t).map(|(fb, _)| fb));
        }
    }
    out
}

/// Equal-size mode (hardware.md §1.3): with no vGPU on the parent every type offers its
/// max_instance; once vGPUs exist, only types with their framebuffer size stay available, at
/// max_instance − vGPUs on the parent, every other type reads 0. An SR-IOV VF (it has a
/// `physfn` link) holds one vGPU at most: 1 while empty and while the same rule over the whole
/// PF (the vGPUs on all its VFs) leaves room for the type, else 0.
fn nvidia(
    types: &[TypeState],
    figures: &[Option<(u64, u32)>],
    pf_used: Option<&[Option<u64>]>,
) -> Vec<Option<u32>> {
    let total: u32 = types.iter().map(|t| t.count).sum();
    let pf_total = pf_used.map_or(0, |u| u32::try_from(u.len()).unwrap_or(u32::MAX));
    // Framebuffer sizes of the existing vGPUs; `None` inside when a used type has no figures.
    let used_fb: Vec<Option<u64>> = types
        .iter()
        .zip(figures)
        .filter(|(t, _)| t.count > 0)
        .map(|(_, f)| f.map(|(fb, _)| fb))
        .collect();
    figures
        .iter()
        .map(|f| {
            f.map(|(fb, max)| {
                if let Some(pf_used) = pf_used {
                    let room = pf_used.is_empty()
                        || (pf_used.iter().all(|u| *u == Some(fb)) && pf_total < max);
                    u32::from(total == 0 && max > 0 && room)
                } else if total == 0 {
                    max
                } else if used_fb.iter().all(|u| *u == Some(fb)) {
                    max.saturating_sub(total)
                } else {
                    0
                }
            })
        })
        .collect()
}

// ---- Intel GVT-g --------------------------------------------------------------------------

/// MiB of graphics memory the host keeps (i915 `HOST_LOW_GM_SIZE`, `HOST_HIGH_GM_SIZE`), the
/// fences it keeps (`HOST_FENCE`), and the assumed totals: a 4 GiB GGTT (hidden = 4096 MiB −
/// aperture) and 32 fence registers (Gen9).
const HOST_LOW_GM_MIB: i64 = 128;
const HOST_HIGH_GM_MIB: i64 = 384;
const HOST_FENCES: i64 = 4;
const GGTT_MIB: i64 = 4096;
const FENCES: i64 = 32;

/// Size in MiB of BAR `index` from a PCI `resource` file (`0x%016llx 0x%016llx 0x%016llx`,
/// start end flags, one line per resource).
pub(crate) fn bar_size_mib(resource: &str, index: usize) -> Option<u64> {
    let line = resource.lines().nth(index)?;
    let mut fields = line.split_whitespace().map(|f| {
        let f = f.strip_prefix("0x").unwrap_or(f);
        u64::from_str_radix(f, 16).ok()
    });
    let start = fields.next()??;
    let end = fields.next()??;
    if end <= start {
        return None;
    }
    Some((end - start + 1) >> 20)
}

/// The aperture (GMADR, BAR 2) of a GVT-g parent in MiB.
pub(crate) fn gvtg_aperture_mib(parent: &Path) -> Option<u64> {
    bar_size_mib(&fsx::read_static(&parent.join("resource"))?, 2)
}

/// (low_gm MiB, high_gm MiB, fences) of a GVT-g type: from its `description`, else the catalog.
fn gvtg_figures(t: &TypeState) -> Option<(i64, i64, i64)> {
    let (mut low, mut high, mut fence) = (None, None, None);
    if let Some(desc) = fsx::read_static(&t.dir.join("description")) {
        for line in desc.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let v = v.trim();
            match k.trim() {
                "low_gm_size" => low = parse_size_mib(v),
                "high_gm_size" => high = parse_size_mib(v),
                "fence" => fence = v.parse::<u64>().ok(),
                _ => {}
            }
        }
    }
    if low.is_none() || high.is_none() || fence.is_none() {
        let known = catalog::gvtg_type_by_name(&t.id);
        if let Some(k) = known {
            low = low.or(Some(k.low_gm_mib));
            high = high.or(Some(k.high_gm_mib));
            fence = fence.or(Some(u64::from(k.fences)));
        }
    }
    let (low, high, fence) = (low?, high?, fence?);
    if low == 0 || high == 0 || fence == 0 {
        return None;
    }
    Some((
        i64::try_from(low).ok()?,
        i64::try_from(high).ok()?,
        i64::try_from(fence).ok()?,
    ))
}

/// kvmgt `intel_vgpu_get_available`: min((aperture − 128 MiB − allocated low) / low,
/// (hidden − 384 MiB − allocated high) / high, (32 − 4 − allocated fences) / fence), where the
/// allocations are the sums over the existing vGPUs of their types' figures.
fn gvtg(
    types: &[TypeState],
    aperture: Option<i64>,
    figures: &[Option<(i64, i64, i64)>],
) -> Vec<Option<u32>> {
    let (mut low_used, mut high_used, mut fence_used) = (0i64, 0i64, 0i64);
    for (t, f) in types.iter().zip(figures) {
        if let Some((l, h, f)) = f {
            let n = i64::from(t.count);
            low_used += n * l;
            high_used += n * h;
            fence_used += n * f;
        }
    }
    figures
        .iter()
        .map(|f| match (aperture, f) {
            (Some(ap), Some((l, h, fe))) => {
                let low_avail = ap - HOST_LOW_GM_MIB - low_used;
                let high_avail = (GGTT_MIB - ap) - HOST_HIGH_GM_MIB - high_used;
                let fence_avail = FENCES - HOST_FENCES - fence_used;
                let n = (low_avail / l).min(high_avail / h).min(fence_avail / fe);
                Some(u32::try_from(n.max(0)).unwrap_or(u32::MAX))
            }
            _ => None,
        })
        .collect()
}

// ---- mtty ---------------------------------------------------------------------------------

/// Ports of the mtty sample (`MAX_MTTYS`), shared by every type of the parent.
pub(crate) const MAX_MTTYS: u32 = 24;

/// Ports a type uses: `mtty-N` uses N.
fn mtty_ports(id: &str) -> u32 {
    id.rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(1)
}

/// mtty `mtty_get_available`: free ports / ports of the type.
fn mtty(types: &[TypeState]) -> Vec<Option<u32>> {
    let used: u32 = types.iter().map(|t| t.count * mtty_ports(&t.id)).sum();
    let free = MAX_MTTYS.saturating_sub(used);
    types
        .iter()
        .map(|t| Some(free / mtty_ports(&t.id)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_sizes_come_from_the_resource_file() {
        let res = "0x00000000f6000000 0x00000000f6ffffff 0x0000000000140204\n\
                   0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
                   0x00000000e0000000 0x00000000efffffff 0x000000000014220c\n";
        assert_eq!(bar_size_mib(res, 0), Some(16));
        assert_eq!(bar_size_mib(res, 1), None);
        assert_eq!(bar_size_mib(res, 2), Some(256));
        assert_eq!(bar_size_mib(res, 5), None);
    }

    #[test]
    fn sizes_parse_in_both_vendor_forms() {
        assert_eq!(parse_size_mib("1024M"), Some(1024));
        assert_eq!(parse_size_mib("128MB"), Some(128));
        assert_eq!(parse_size_mib("2G"), Some(2048));
        assert_eq!(parse_size_mib("x"), None);
    }

    #[test]
    fn mtty_types_use_their_port_count() {
        assert_eq!(mtty_ports("mtty-1"), 1);
        assert_eq!(mtty_ports("mtty-2"), 2);
        assert_eq!(mtty_ports("mtty-x"), 1);
    }
}
