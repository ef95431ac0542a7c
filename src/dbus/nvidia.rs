//! `org.vgpud1.Nvidia` at `/org/vgpud1/nvidia`: the NVIDIA driver's control plane (NVML) on
//! the bus: MIG mode and GPU instances, the vGPU scheduler and telemetry. An object of its
//! own, so that the manager's introspection stays small; calls go through the manager's one
//! dispatch point (limits, authorization, audit, events).

use std::collections::HashMap;

use zbus::message::Header;
use zbus::{interface, OwnedVariant, Variant};

use vgpud_client::proxy::MigProfileRow;

use super::error::{Error, Result};
use super::limits;
use super::manager::{blocking, owned_dict, Manager};
use super::options::{OptionReader, Options};

/// The object path.
pub const PATH: &str = "/org/vgpud1/nvidia";

/// `org.vgpud1.Nvidia`: the manager's dispatch, for the NVIDIA methods.
pub struct NvidiaObject(pub(super) Manager);

const SCHEDULER_OPTIONS: &[&str] = &[
    "policy",
    "timeslice_ms",
    "arr",
    "avg_factor",
    "frequency_hz",
    "runtime",
    "persistent",
];

#[interface(name = "org.vgpud1.Nvidia")]
impl NvidiaObject {
    /// GPU-instance profiles: id, index, name, slices, memory bytes, max, remaining,
    /// placements and free placements as (start, size).
    #[zbus(out_args("profiles"))]
    async fn list_mig_profiles(
        &self,
        #[zbus(header)] header: Header<'_>,
        gpu: String,
    ) -> Result<Vec<MigProfileRow>> {
        self.0
            .track("ListMigProfiles", async {
                self.0
                    .admit(
                        &header,
                        "ListMigProfiles",
                        &[("gpu", &gpu, limits::NAME)],
                        None,
                    )
                    .await?;
                let engine = self.0.engine.clone();
                let profiles = blocking(move || engine.mig_profiles(&gpu)).await?;
                let pairs = |v: &[crate::gpu_control::Placement]| -> Vec<(u32, u32)> {
                    v.iter().map(|p| (p.start, p.size)).collect()
                };
                Ok(profiles
                    .into_iter()
                    .map(|(p, free)| {
                        (
                            p.id,
                            p.index,
                            crate::engine::mig::profile_name(&p),
                            p.slices,
                            p.memory_mib.saturating_mul(1024 * 1024),
                            p.max_instances,
                            p.remaining,
                            pairs(&p.placements),
                            pairs(&free),
                        )
                    })
                    .collect())
            })
            .await
    }

    /// MIG on or off; returns (current, pending). Option: persistent.
    #[zbus(out_args("current", "pending"))]
    async fn set_mig_mode(
        &self,
        #[zbus(header)] header: Header<'_>,
        gpu: String,
        enabled: bool,
        options: Options,
    ) -> Result<(bool, bool)> {
        self.0
            .track("SetMigMode", async {
                let cause = self
                    .0
                    .admit(
                        &header,
                        "SetMigMode",
                        &[("gpu", &gpu, limits::NAME)],
                        Some(&options),
                    )
                    .await?;
                let mut opts = OptionReader::new("SetMigMode", options);
                let persistent = opts.boolean("persistent")?.unwrap_or(true);
                opts.finish(&["persistent"])?;
                let engine = self.0.engine.clone();
                let mode = self
                    .0
                    .changing(cause, &gpu.clone(), move || {
                        engine.set_mig_mode(&gpu, enabled, persistent)
                    })
                    .await?;
                Ok((mode.current, mode.pending))
            })
            .await
    }

    /// Makes a GPU instance of a profile (id or name). Options: placement, compute_instance,
    /// persistent.
    #[zbus(out_args("id"))]
    async fn create_gpu_instance(
        &self,
        #[zbus(header)] header: Header<'_>,
        gpu: String,
        profile: String,
        options: Options,
    ) -> Result<u32> {
        self.0
            .track("CreateGpuInstance", async {
                let cause = self
                    .0
                    .admit(
                        &header,
                        "CreateGpuInstance",
                        &[
                            ("gpu", &gpu, limits::NAME),
                            ("profile", &profile, crate::engine::mig::MAX_PROFILE_LEN),
                        ],
                        Some(&options),
                    )
                    .await?;
                let mut opts = OptionReader::new("CreateGpuInstance", options);
                let placement = opts
                    .unsigned("placement")?
                    .map(|p| {
                        u32::try_from(p).map_err(|_| {
                            Error::InvalidArgument(format!(
                                "CreateGpuInstance: placement {p} is too large"
                            ))
                        })
                    })
                    .transpose()?;
                let compute = opts.boolean("compute_instance")?.unwrap_or(true);
                let persistent = opts.boolean("persistent")?.unwrap_or(true);
                opts.finish(&["placement", "compute_instance", "persistent"])?;
                let engine = self.0.engine.clone();
                let made = self
                    .0
                    .changing(cause, &gpu.clone(), move || {
                        engine.create_gpu_instance(&gpu, &profile, placement, compute, persistent)
                    })
                    .await?;
                Ok(made.id)
            })
            .await
    }

    /// Destroys a GPU instance no device uses.
    async fn destroy_gpu_instance(
        &self,
        #[zbus(header)] header: Header<'_>,
        gpu: String,
        id: u32,
        options: Options,
    ) -> Result<()> {
        self.0
            .track("DestroyGpuInstance", async {
                let cause = self
                    .0
                    .admit(
                        &header,
                        "DestroyGpuInstance",
                        &[("gpu", &gpu, limits::NAME)],
                        Some(&options),
                    )
                    .await?;
                OptionReader::new("DestroyGpuInstance", options).finish(&[])?;
                let engine = self.0.engine.clone();
                self.0
                    .changing(cause, &gpu.clone(), move || {
                        engine.destroy_gpu_instance(&gpu, id)
                    })
                    .await
            })
            .await
    }

    /// Sets the vGPU scheduler. Options: policy, timeslice_ms, arr, avg_factor,
    /// frequency_hz, runtime, persistent.
    #[zbus(out_args("result"))]
    async fn set_scheduler(
        &self,
        #[zbus(header)] header: Header<'_>,
        gpu: String,
        options: Options,
    ) -> Result<HashMap<String, OwnedVariant>> {
        self.0.track("SetScheduler", async {
            let cause = self
                .0
                .admit(
                    &header,
                    "SetScheduler",
                    &[("gpu", &gpu, limits::NAME)],
                    Some(&options),
                )
                .await?;
            let mut opts = OptionReader::new("SetScheduler", options);
            let policy = match opts.string("policy")? {
                None => crate::gpu_control::SchedulerPolicy::BestEffort,
                Some(p) => crate::gpu_control::SchedulerPolicy::parse(&p).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "SetScheduler: policy {:?} is not one of best-effort, equal-share, fixed-share",
                        p.chars().take(48).collect::<String>()
                    ))
                })?,
            };
            let mut number = |key: &str| -> Result<u32> {
                opts.unsigned(key)?
                    .map(|v| {
                        u32::try_from(v).map_err(|_| {
                            Error::InvalidArgument(format!("SetScheduler: {key} {v} is too large"))
                        })
                    })
                    .transpose()
                    .map(Option::unwrap_or_default)
            };
            let timeslice_ms = number("timeslice_ms")?;
            let avg_factor = number("avg_factor")?;
            let frequency_hz = number("frequency_hz")?;
            let setting = crate::gpu_control::SchedulerSetting {
                policy,
                arr: opts.boolean("arr")?.unwrap_or(false),
                timeslice_ms,
                avg_factor,
                frequency_hz,
            };
            let runtime = opts.boolean("runtime")?.unwrap_or(true);
            let persistent = opts.boolean("persistent")?.unwrap_or(true);
            opts.finish(SCHEDULER_OPTIONS)?;
            let engine = self.0.engine.clone();
            let outcome = self
                .0
                .changing(cause, &gpu.clone(), move || {
                    engine.set_scheduler(&gpu, &setting, runtime, persistent)
                })
                .await?;
            owned_dict(vec![
                ("applied", outcome.applied.into()),
                ("rm_pvmrl", outcome.rm_pvmrl.into()),
                ("modprobe_file", outcome.modprobe_file.into()),
                ("note", outcome.note.into()),
            ])
        })
        .await
    }

    /// Telemetry of a GPU (address) or vGPU device (UUID), from NVML.
    #[zbus(out_args("metrics"))]
    async fn get_metrics(
        &self,
        #[zbus(header)] header: Header<'_>,
        gpu_or_uuid: String,
    ) -> Result<HashMap<String, OwnedVariant>> {
        self.0
            .track("GetMetrics", async {
                self.0
                    .admit(
                        &header,
                        "GetMetrics",
                        &[("gpu_or_uuid", &gpu_or_uuid, limits::NAME)],
                        None,
                    )
                    .await?;
                let engine = self.0.engine.clone();
                let figures = blocking(move || engine.metrics(&gpu_or_uuid)).await?;
                owned_dict(
                    figures
                        .into_iter()
                        .map(|(k, f)| {
                            let v = match f {
                                crate::engine::telemetry::Figure::U32(n) => Variant::from(n),
                                crate::engine::telemetry::Figure::U64(n) => Variant::from(n),
                            };
                            (k, v)
                        })
                        .collect(),
                )
            })
            .await
    }

    /// "available", or why NVML (MIG, scheduler, telemetry) cannot be used.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn nvml(&self) -> String {
        match self.0.engine.nvml_status() {
            Ok(()) => "available".to_string(),
            Err(reason) => reason,
        }
    }
}
