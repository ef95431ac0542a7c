//! Telemetry of GPUs and vGPUs from NVML: utilization (GPU, memory, encoder, decoder),
//! framebuffer used and total, temperature, power, ECC errors, and for a vGPU what NVML
//! samples of it.

use super::mig::control_error;
use super::{Engine, EngineError, EngineResult};
use crate::gpu_control::GpuMetrics;
use crate::model::DeviceKind;

/// One figure of [`Engine::metrics`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    /// A percentage, degrees, milliwatts, or a count.
    U32(u32),
    /// Bytes or a count.
    U64(u64),
}

/// Telemetry, by name (`gpu_utilization`, `memory_used`, ...), sorted.
pub type Metrics = Vec<(&'static str, Figure)>;

fn gpu_figures(m: &GpuMetrics) -> Metrics {
    let mut out = Vec::new();
    let mut u = |k, v: Option<u32>| {
        if let Some(v) = v {
            out.push((k, Figure::U32(v)));
        }
    };
    u("gpu_utilization", m.gpu_utilization);
    u("memory_utilization", m.memory_utilization);
    u("encoder_utilization", m.encoder_utilization);
    u("decoder_utilization", m.decoder_utilization);
    u("temperature", m.temperature_c);
    u("power_mw", m.power_mw);
    let mut b = |k, v: Option<u64>| {
        if let Some(v) = v {
            out.push((k, Figure::U64(v)));
        }
    };
    b("memory_used", m.memory_used);
    b("memory_total", m.memory_total);
    b("ecc_corrected", m.ecc_corrected);
    b("ecc_uncorrected", m.ecc_uncorrected);
    out.sort_by_key(|(k, _)| *k);
    out
}

impl Engine {
    /// The telemetry of a GPU (by address) or of a vGPU device (by UUID).
    pub fn metrics(&self, target: &str) -> EngineResult<Metrics> {
        super::request::check_name("gpu_or_uuid", target)?;
        if let Ok(uuid) = super::request::parse_uuid(target) {
            return self.device_metrics(&uuid);
        }
        self.nvidia_gpu(target)?;
        let m = self.control.metrics(target).map_err(control_error)?;
        Ok(gpu_figures(&m))
    }

    fn device_metrics(&self, uuid: &str) -> EngineResult<Metrics> {
        let Some(info) = self.device(uuid) else {
            return Err(EngineError::NotFound(format!(
                "no device {uuid} on this host"
            )));
        };
        let pf = self.gpu_of_parent(&info.parent);
        self.nvidia_gpu(&pf)?;
        if !info.active {
            return Err(EngineError::NotFound(format!(
                "device {uuid} is not active: NVML reports only running vGPUs"
            )));
        }
        let active = self.control.active_vgpus(&pf).map_err(control_error)?;
        // NVML names a legacy vGPU by its mdev UUID. A vGPU on a VF it does not tie to the
        // VF: it is the one in the GPU instance vgpud made for the device, or else the only
        // one of the device's type on the GPU.
        let instance = self.nvidia_state(&pf).and_then(|s| {
            s.gpu_instances
                .into_iter()
                .find(|g| g.device == uuid)
                .map(|g| g.instance.id)
        });
        let type_number = crate::discovery::sriov::nvidia_type_number(&info.type_id);
        let vgpu = match info.kind {
            DeviceKind::Mdev => active
                .iter()
                .find(|v| v.mdev_uuid.eq_ignore_ascii_case(uuid)),
            DeviceKind::SriovVgpu => match instance {
                Some(gi) => active.iter().find(|v| v.gpu_instance_id == Some(gi)),
                None => {
                    let same: Vec<_> = active
                        .iter()
                        .filter(|v| Some(v.type_id) == type_number)
                        .collect();
                    (same.len() == 1).then(|| same[0])
                }
            },
            DeviceKind::Passthrough => None,
        };
        let Some(v) = vgpu else {
            return Err(EngineError::NotFound(format!(
                "NVML reports no vGPU for device {uuid} on {pf}"
            )));
        };
        let mut out: Metrics = vec![
            ("fb_used", Figure::U64(v.fb_used)),
            ("type_id", Figure::U32(v.type_id)),
        ];
        if let Some(gi) = v.gpu_instance_id {
            out.push(("gpu_instance", Figure::U32(gi)));
        }
        if let Some(u) = v.utilization {
            out.push(("gpu_utilization", Figure::U32(u.gpu)));
            out.push(("memory_utilization", Figure::U32(u.memory)));
            out.push(("encoder_utilization", Figure::U32(u.encoder)));
            out.push(("decoder_utilization", Figure::U32(u.decoder)));
        }
        out.sort_by_key(|(k, _)| *k);
        Ok(out)
    }
}
