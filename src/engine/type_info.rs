//! What a device type is, beyond `ListTypes`' row: what the vendor's driver says of it (its
//! `description`, parsed), what vgpud's catalog knows (NVIDIA series, class and license
//! edition), where it can go and how many more fit now.

use super::{CreateRequest, Engine, EngineResult};
use crate::catalog;
use crate::model::TypeDetails;

/// A type's details. Fields the vendor does not give are `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TypeInfo {
    /// Type id (`nvidia-259`).
    pub id: String,
    /// Type name (`GRID RTX6000-4Q`).
    pub name: String,
    /// The driver's `description`, as it is.
    pub description: String,
    /// The `device_api` (`vfio-pci`).
    pub device_api: String,
    /// The GPUs that offer the type, in address order.
    pub gpus: Vec<String>,
    /// How many more the host (or the GPU asked for) can take now.
    pub available: u32,
    /// Framebuffer in bytes.
    pub framebuffer: Option<u64>,
    /// Display heads.
    pub heads: Option<u32>,
    /// Maximum resolution (width, height).
    pub max_resolution: Option<(u32, u32)>,
    /// Frame-rate limit in frames per second.
    pub frame_rate_limit: Option<u32>,
    /// Maximum instances per GPU.
    pub max_instances: Option<u32>,
    /// NVIDIA's series letter: `Q`, `B`, `A` or `C`.
    pub series: Option<char>,
    /// The class NVML reports (`Quadro` for Q, `NVS` for B; hardware.md §5.6).
    pub class: Option<&'static str>,
    /// The NVIDIA software edition whose license the type needs.
    pub license: Option<&'static str>,
    /// Heterogeneous (mixed-size) mode on a GPU with vGPUs on VFs: the placement size in GiB
    /// and how many placements the board has for the type.
    pub placement: Option<(u64, u64)>,
    /// Intel GVT-g: aperture and hidden graphics memory in MiB, fences and weight.
    pub gvtg: Option<GvtgInfo>,
}

/// Intel GVT-g resources of a type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GvtgInfo {
    /// Aperture (low graphics memory) in MiB.
    pub low_gm_mib: Option<u64>,
    /// Hidden (high graphics memory) in MiB.
    pub high_gm_mib: Option<u64>,
    /// Fence registers.
    pub fences: Option<u32>,
    /// Scheduling weight.
    pub weight: Option<u32>,
}

/// The class NVML gives a series (only those hardware.md §5.6 saw).
fn nvidia_class(series: char) -> Option<&'static str> {
    match series {
        'Q' => Some("Quadro"),
        'B' => Some("NVS"),
        _ => None,
    }
}

/// The NVIDIA vGPU software edition each series is licensed under (NVIDIA's vGPU user
/// guide: Q virtual workstation, B virtual PC, A virtual applications, C compute).
fn nvidia_license(series: char) -> Option<&'static str> {
    match series {
        'Q' => Some("NVIDIA RTX Virtual Workstation"),
        'B' => Some("NVIDIA Virtual PC"),
        'A' => Some("NVIDIA Virtual Applications"),
        'C' => Some("NVIDIA AI Enterprise"),
        _ => None,
    }
}

impl Engine {
    /// The details of the type `req.type_query` (on `req.parent`, when given). A type no GPU
    /// offers is `NotFound`.
    pub fn type_info(&self, req: &CreateRequest) -> EngineResult<TypeInfo> {
        let candidates = self.candidates(req)?;
        let mut gpus: Vec<String> = candidates.iter().map(|(g, _)| g.clone()).collect();
        gpus.sort();
        gpus.dedup();
        let (first_gpu, ty) = candidates
            .iter()
            .min_by(|a, b| a.0.cmp(&b.0))
            .cloned()
            .ok_or_else(|| super::EngineError::NotFound("no such type".into()))?;
        let mut info = TypeInfo {
            id: ty.id.clone(),
            name: ty.name.clone(),
            description: ty.description.trim_end().to_string(),
            device_api: ty.device_api.clone(),
            gpus,
            available: self.capacity(req)?,
            ..TypeInfo::default()
        };
        match &ty.details {
            TypeDetails::Nvidia {
                heads,
                frame_rate_limit,
                framebuffer_mib,
                max_resolution,
                max_instances,
            } => {
                info.framebuffer = framebuffer_mib.map(|m| m * 1024 * 1024);
                info.heads = *heads;
                info.max_resolution = *max_resolution;
                info.frame_rate_limit = *frame_rate_limit;
                info.max_instances = *max_instances;
                let known = catalog::nvidia_type_by_name(&ty.name);
                if let Some(t) = known {
                    let series = t.series();
                    info.series = Some(series);
                    info.class = nvidia_class(series);
                    info.license = nvidia_license(series);
                }
                if self.offers_sriov_vgpu(&first_gpu) {
                    let board = self
                        .with_gpu(&first_gpu, |g| g.model.clone())
                        .unwrap_or_default();
                    // The board by its PCI model name ("H200 SXM 141GB"), else the model's
                    // last word ("L40S").
                    let board = catalog::nvidia_board_of_model(&board)
                        .unwrap_or_else(|| board.rsplit(' ').next().unwrap_or_default());
                    let board_gib = catalog::nvidia_board_framebuffer_gib(board);
                    let type_gib = framebuffer_mib.map(|m| m / 1024);
                    if let (Some(b), Some(t)) = (board_gib, type_gib) {
                        info.placement = catalog::nvidia_placement(b, t);
                    }
                }
            }
            TypeDetails::Gvtg {
                low_gm_mib,
                high_gm_mib,
                fences,
                resolution,
                weight,
            } => {
                info.max_resolution = *resolution;
                info.gvtg = Some(GvtgInfo {
                    low_gm_mib: *low_gm_mib,
                    high_gm_mib: *high_gm_mib,
                    fences: *fences,
                    weight: *weight,
                });
            }
            TypeDetails::Unknown => {}
        }
        Ok(info)
    }
}
