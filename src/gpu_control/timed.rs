//! A [`GpuControl`] whose every call's CPU time is counted as NVML's
//! ([`crate::metrics::cpu`]): the engine wraps its backend in it, so vgpud's own CPU can be
//! told from the library's.

use std::sync::Arc;

use super::{
    ActiveVgpu, ControlResult, GpuControl, GpuFacts, GpuInstance, GpuMetrics, MigMode, MigProfile,
    Placement, SchedulerCapabilities, SchedulerSetting, SchedulerState, VgpuTypeFacts,
};
use crate::metrics::cpu::{measure, Part::Nvml};

/// `inner`, each call timed.
pub struct Timed(pub Arc<dyn GpuControl>);

impl GpuControl for Timed {
    fn availability(&self) -> Result<(), String> {
        measure(Nvml, || self.0.availability())
    }
    fn driver_version(&self) -> ControlResult<String> {
        measure(Nvml, || self.0.driver_version())
    }
    fn gpu(&self, gpu: &str) -> ControlResult<GpuFacts> {
        measure(Nvml, || self.0.gpu(gpu))
    }
    fn mig_mode(&self, gpu: &str) -> ControlResult<MigMode> {
        measure(Nvml, || self.0.mig_mode(gpu))
    }
    fn set_mig_mode(&self, gpu: &str, enabled: bool) -> ControlResult<MigMode> {
        measure(Nvml, || self.0.set_mig_mode(gpu, enabled))
    }
    fn mig_profiles(&self, gpu: &str) -> ControlResult<Vec<MigProfile>> {
        measure(Nvml, || self.0.mig_profiles(gpu))
    }
    fn gpu_instances(&self, gpu: &str) -> ControlResult<Vec<GpuInstance>> {
        measure(Nvml, || self.0.gpu_instances(gpu))
    }
    fn create_gpu_instance(
        &self,
        gpu: &str,
        profile_id: u32,
        placement: Option<Placement>,
        compute_instance: bool,
    ) -> ControlResult<GpuInstance> {
        measure(Nvml, || {
            self.0
                .create_gpu_instance(gpu, profile_id, placement, compute_instance)
        })
    }
    fn destroy_gpu_instance(&self, gpu: &str, id: u32) -> ControlResult<()> {
        measure(Nvml, || self.0.destroy_gpu_instance(gpu, id))
    }
    fn vgpu_types(&self, gpu: &str) -> ControlResult<Vec<VgpuTypeFacts>> {
        measure(Nvml, || self.0.vgpu_types(gpu))
    }
    fn active_vgpus(&self, gpu: &str) -> ControlResult<Vec<ActiveVgpu>> {
        measure(Nvml, || self.0.active_vgpus(gpu))
    }
    fn heterogeneous_mode(&self, gpu: &str) -> ControlResult<bool> {
        measure(Nvml, || self.0.heterogeneous_mode(gpu))
    }
    fn scheduler(&self, gpu: &str) -> ControlResult<SchedulerState> {
        measure(Nvml, || self.0.scheduler(gpu))
    }
    fn scheduler_capabilities(&self, gpu: &str) -> ControlResult<SchedulerCapabilities> {
        measure(Nvml, || self.0.scheduler_capabilities(gpu))
    }
    fn set_scheduler(&self, gpu: &str, setting: &SchedulerSetting) -> ControlResult<()> {
        measure(Nvml, || self.0.set_scheduler(gpu, setting))
    }
    fn metrics(&self, gpu: &str) -> ControlResult<GpuMetrics> {
        measure(Nvml, || self.0.metrics(gpu))
    }
}
