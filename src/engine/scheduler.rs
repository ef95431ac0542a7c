//! The vGPU time-slice scheduler of an NVIDIA GPU: set at runtime through NVML where the
//! driver allows it (no vGPU running on the GPU, MIG off), and persistently as the `RmPVMRL`
//! registry DWORD of hardware.md §4.2, rendered into a modprobe.d file vgpud owns
//! (`etc/modprobe.d/vgpud-scheduler.conf`), which the driver reads when it loads.

use super::mig::control_error;
use super::{lock, Engine, EngineError, EngineResult};
use crate::gpu_control::{SchedulerPolicy, SchedulerSetting};
use crate::persist::{
    self,
    sriov::{RecordedPolicy, RecordedScheduler},
};

/// The modprobe.d file vgpud renders, relative to `etc/`.
pub const MODPROBE_FILE: &str = "modprobe.d/vgpud-scheduler.conf";

/// Time slice bounds of `RmPVMRL` (ms; 0 = default).
pub const TIMESLICE_MS: (u32, u32) = (1, 30);
/// ARR averaging factor bounds (0 = default 33).
pub const AVG_FACTOR: (u32, u32) = (1, 60);
/// ARR frequency bounds in Hz (0 = default).
pub const FREQUENCY_HZ: (u32, u32) = (63, 960);

/// Checks a setting against the documented ranges; 0 means the driver's default.
pub fn validate(s: &SchedulerSetting) -> EngineResult<()> {
    let check = |what: &str, v: u32, (lo, hi): (u32, u32)| {
        if v != 0 && !(lo..=hi).contains(&v) {
            return Err(EngineError::InvalidArgument(format!(
                "{what} {v} is outside {lo}..={hi} (0 for the driver's default)"
            )));
        }
        Ok(())
    };
    check("timeslice_ms", s.timeslice_ms, TIMESLICE_MS)?;
    check("avg_factor", s.avg_factor, AVG_FACTOR)?;
    check("frequency_hz", s.frequency_hz, FREQUENCY_HZ)?;
    if s.policy == SchedulerPolicy::BestEffort
        && (s.arr || s.timeslice_ms != 0 || s.avg_factor != 0 || s.frequency_hz != 0)
    {
        return Err(EngineError::InvalidArgument(
            "best-effort takes no time slice, ARR, averaging factor or frequency".into(),
        ));
    }
    if s.arr && s.timeslice_ms != 0 {
        return Err(EngineError::InvalidArgument(
            "with arr the driver derives the time slice from frequency_hz; timeslice_ms applies without arr".into(),
        ));
    }
    if !s.arr && (s.avg_factor != 0 || s.frequency_hz != 0) {
        return Err(EngineError::InvalidArgument(
            "avg_factor and frequency_hz apply to adaptive round robin (arr: true)".into(),
        ));
    }
    Ok(())
}

/// The `RmPVMRL` value of a setting (hardware.md §4.2): best effort `0x00`; equal share
/// `0x01` and fixed share `0x11` in the low bits; without ARR the time slice in bits 23–16
/// (`0x00TT0001`); with ARR the averaging factor in bits 31–24 and the frequency in bits
/// 23–12 (`0xAAFFF001`).
pub fn rm_pvmrl(s: &SchedulerSetting) -> u32 {
    let low = match s.policy {
        SchedulerPolicy::BestEffort => return 0,
        SchedulerPolicy::EqualShare => 0x01,
        SchedulerPolicy::FixedShare => 0x11,
    };
    if s.arr {
        (s.avg_factor.min(0x3c) << 24) | (s.frequency_hz.min(0x3c0) << 12) | low
    } else {
        (s.timeslice_ms.min(0x1e) << 16) | low
    }
}

/// The modprobe.d file for the recorded settings, by PF address (none: `None`, no file).
pub fn render_modprobe(settings: &[(String, RecordedScheduler)]) -> Option<String> {
    if settings.is_empty() {
        return None;
    }
    let per_device: Vec<String> = settings
        .iter()
        .map(|(pf, s)| format!("pci={pf};RmPVMRL={:#010x}", rm_pvmrl(&setting_of(s))))
        .collect();
    Some(format!(
        "# Written by vgpud (SetScheduler with persistent). Do not edit: vgpud rewrites it.\n\
         # The vGPU scheduler of each GPU (RmPVMRL, NVIDIA vGPU user guide), applied when\n\
         # the nvidia module loads next. A NVreg_RegistryDwordsPerDevice option in another\n\
         # file overrides or is overridden by this one; keep one.\n\
         options nvidia NVreg_RegistryDwordsPerDevice=\"{}\"\n",
        per_device.join(";")
    ))
}

/// A recorded setting as an NVML setting.
pub fn setting_of(r: &RecordedScheduler) -> SchedulerSetting {
    SchedulerSetting {
        policy: match r.policy {
            RecordedPolicy::BestEffort => SchedulerPolicy::BestEffort,
            RecordedPolicy::EqualShare => SchedulerPolicy::EqualShare,
            RecordedPolicy::FixedShare => SchedulerPolicy::FixedShare,
        },
        arr: r.arr,
        timeslice_ms: r.timeslice_ms,
        avg_factor: r.avg_factor,
        frequency_hz: r.frequency_hz,
    }
}

fn recorded(s: &SchedulerSetting) -> RecordedScheduler {
    RecordedScheduler {
        policy: match s.policy {
            SchedulerPolicy::BestEffort => RecordedPolicy::BestEffort,
            SchedulerPolicy::EqualShare => RecordedPolicy::EqualShare,
            SchedulerPolicy::FixedShare => RecordedPolicy::FixedShare,
        },
        arr: s.arr,
        timeslice_ms: s.timeslice_ms,
        avg_factor: s.avg_factor,
        frequency_hz: s.frequency_hz,
    }
}

/// What [`Engine::set_scheduler`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SchedulerOutcome {
    /// Applied to the running driver now.
    pub applied: bool,
    /// The modprobe.d file written (empty: none).
    pub modprobe_file: String,
    /// The `RmPVMRL` value rendered.
    pub rm_pvmrl: u32,
    /// A sentence on when it takes effect.
    pub note: String,
}

impl Engine {
    /// Sets the vGPU scheduler of `gpu`: at runtime (`runtime`) through NVML, refused while a
    /// vGPU runs on the GPU (`Busy`) or MIG is on (`NotSupported`); with `persistent`, also
    /// recorded, applied again at boot, and rendered as `RmPVMRL` into the modprobe.d file.
    pub fn set_scheduler(
        &self,
        gpu: &str,
        setting: &SchedulerSetting,
        runtime: bool,
        persistent: bool,
    ) -> EngineResult<SchedulerOutcome> {
        self.nvidia_gpu(gpu)?;
        validate(setting)?;
        if !runtime && !persistent {
            return Err(EngineError::InvalidArgument(
                "with runtime false and persistent false there is nothing to do".into(),
            ));
        }
        if setting.policy == SchedulerPolicy::FixedShare && self.is_heterogeneous(gpu) {
            return Err(EngineError::NotSupported(format!(
                "{gpu} is in heterogeneous (mixed-size) vGPU mode, where the driver offers only best-effort and equal-share"
            )));
        }
        let gpu_lock = self.physical_gpu_lock(gpu)?;
        let held = lock(&gpu_lock);
        let mut outcome = SchedulerOutcome {
            rm_pvmrl: rm_pvmrl(setting),
            ..SchedulerOutcome::default()
        };
        if runtime {
            self.refuse_scheduler_change(gpu)?;
            self.control
                .set_scheduler(gpu, setting)
                .map_err(control_error)?;
            outcome.applied = true;
            self.refresh_nvidia(gpu, false);
        }
        drop(held);
        if persistent {
            let mut settings = self.settings(gpu)?;
            settings.scheduler =
                (*setting != SchedulerSetting::default()).then(|| recorded(setting));
            persist::sriov::write(&self.host, &settings).map_err(|e| {
                EngineError::persist(format!("recording the scheduler of {gpu}"), e)
            })?;
            outcome.modprobe_file = self.write_modprobe()?;
        }
        outcome.note = match (outcome.applied, persistent) {
            (true, true) => {
                "applied now; the nvidia module gets it again when it loads next".into()
            }
            (true, false) => {
                "applied now; lost when the nvidia module reloads or the host reboots".into()
            }
            (false, _) => {
                "applies when the nvidia module loads next (reboot or driver reload)".into()
            }
        };
        Ok(outcome)
    }

    fn refuse_scheduler_change(&self, gpu: &str) -> EngineResult<()> {
        if self
            .nvidia_state(gpu)
            .and_then(|s| s.mig)
            .is_some_and(|m| m.current)
        {
            return Err(EngineError::NotSupported(format!(
                "{gpu} is in MIG mode: MIG-backed vGPUs are not time-sliced, the driver has no scheduler to set"
            )));
        }
        let running: Vec<String> = self
            .devices_of(gpu)
            .into_iter()
            .filter(|d| d.active)
            .map(|d| format!("{} ({})", d.uuid, d.type_name))
            .collect();
        if !running.is_empty() {
            return Err(EngineError::Busy(format!(
                "vGPUs run on {gpu}: {}; the driver changes the scheduler only with none running (runtime: false records it for the next driver load)",
                running.join(", ")
            )));
        }
        Ok(())
    }

    /// Renders the modprobe.d file from every recorded setting; returns its path.
    fn write_modprobe(&self) -> EngineResult<String> {
        let records = persist::sriov::read_all(&self.host)
            .map_err(|e| EngineError::persist("reading the recorded GPU settings", e))?;
        let settings: Vec<(String, RecordedScheduler)> = records
            .into_iter()
            .filter_map(|r| Some((r.pf.clone(), r.scheduler?)))
            .collect();
        let path = self.host.etc(MODPROBE_FILE);
        match render_modprobe(&settings) {
            Some(text) => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(|source| {
                        EngineError::persist(
                            "creating the modprobe.d directory",
                            persist::PersistError::Io {
                                action: "creating",
                                path: dir.to_path_buf(),
                                source,
                            },
                        )
                    })?;
                }
                persist::write_atomic(&path, text.as_bytes(), 0o644)
                    .map_err(|e| EngineError::persist(format!("writing {}", path.display()), e))?;
            }
            None => {
                persist::remove_durable(&path)
                    .map_err(|e| EngineError::persist(format!("removing {}", path.display()), e))?;
            }
        }
        Ok(path.display().to_string())
    }

    /// Boot: applies the recorded scheduler of `pf` at runtime (the modprobe.d file already
    /// did when the driver loaded with it; this covers a driver loaded without).
    pub(super) fn restore_scheduler(&self, pf: &str) -> EngineResult<()> {
        let Some(rec) = self.settings(pf)?.scheduler else {
            return Ok(());
        };
        let setting = setting_of(&rec);
        let now = self.control.scheduler(pf).map_err(control_error)?;
        if now.policy == setting.policy && now.arr == setting.arr {
            return Ok(());
        }
        self.set_scheduler(pf, &setting, true, false).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(policy: SchedulerPolicy, arr: bool, ts: u32, avg: u32, freq: u32) -> SchedulerSetting {
        SchedulerSetting {
            policy,
            arr,
            timeslice_ms: ts,
            avg_factor: avg,
            frequency_hz: freq,
        }
    }

    #[test]
    fn rm_pvmrl_values_are_the_documented_ones() {
        use SchedulerPolicy::*;
        // hardware.md §4.2: 0x00 best effort, 0x01 equal share, 0x11 fixed share,
        // 0x00180011 fixed share 24 ms, 0x3c3c0001 / 0x3c3c0011 ARR with factor 60.
        assert_eq!(rm_pvmrl(&s(BestEffort, false, 0, 0, 0)), 0x00);
        assert_eq!(rm_pvmrl(&s(EqualShare, true, 0, 0, 0)), 0x01);
        assert_eq!(rm_pvmrl(&s(FixedShare, true, 0, 0, 0)), 0x11);
        assert_eq!(rm_pvmrl(&s(FixedShare, false, 24, 0, 0)), 0x0018_0011);
        assert_eq!(rm_pvmrl(&s(EqualShare, false, 3, 0, 0)), 0x0003_0001);
        assert_eq!(rm_pvmrl(&s(EqualShare, true, 0, 0x3c, 0x3c0)), 0x3c3c_0001);
        assert_eq!(rm_pvmrl(&s(FixedShare, true, 0, 0x3c, 0x3c0)), 0x3c3c_0011);
        // Out-of-range values are capped as the driver caps them.
        assert_eq!(rm_pvmrl(&s(EqualShare, false, 99, 0, 0)), 0x001e_0001);
    }

    #[test]
    fn settings_outside_the_driver_ranges_are_refused() {
        use SchedulerPolicy::*;
        assert!(validate(&s(EqualShare, false, 31, 0, 0)).is_err());
        assert!(validate(&s(EqualShare, true, 0, 61, 0)).is_err());
        assert!(validate(&s(EqualShare, true, 0, 0, 62)).is_err());
        assert!(validate(&s(BestEffort, false, 2, 0, 0)).is_err());
        assert!(validate(&s(EqualShare, true, 2, 0, 0)).is_err());
        assert!(validate(&s(EqualShare, false, 0, 33, 0)).is_err());
        assert!(validate(&s(FixedShare, false, 24, 0, 0)).is_ok());
        assert!(validate(&s(EqualShare, true, 0, 33, 480)).is_ok());
        assert!(validate(&s(BestEffort, false, 0, 0, 0)).is_ok());
        // Each rule refuses on its own, with its own words.
        let refusal = |set: SchedulerSetting| match validate(&set) {
            Err(EngineError::InvalidArgument(m)) => m,
            other => panic!("{set:?} is refused as an invalid argument, not {other:?}"),
        };
        for set in [
            s(BestEffort, true, 0, 0, 0),
            s(BestEffort, false, 2, 0, 0),
            s(BestEffort, false, 0, 33, 0),
            s(BestEffort, false, 0, 0, 480),
        ] {
            assert!(refusal(set).starts_with("best-effort takes no"), "{set:?}");
        }
        assert!(refusal(s(EqualShare, true, 2, 0, 0)).starts_with("with arr"));
        assert!(refusal(s(EqualShare, false, 0, 33, 0)).starts_with("avg_factor and frequency_hz"));
        assert!(refusal(s(EqualShare, false, 0, 0, 480)).starts_with("avg_factor and frequency_hz"));
        assert!(refusal(s(EqualShare, false, 31, 0, 0)).starts_with("timeslice_ms 31 is outside"));
        assert!(refusal(s(EqualShare, true, 0, 61, 0)).starts_with("avg_factor 61 is outside"));
        assert!(refusal(s(EqualShare, true, 0, 0, 62)).starts_with("frequency_hz 62 is outside"));
    }

    #[test]
    fn the_modprobe_file_has_one_option_for_every_gpu() {
        let rec = |policy, timeslice_ms| RecordedScheduler {
            policy,
            arr: false,
            timeslice_ms,
            avg_factor: 0,
            frequency_hz: 0,
        };
        let text = render_modprobe(&[
            ("0000:41:00.0".into(), rec(RecordedPolicy::FixedShare, 24)),
            ("0000:c1:00.0".into(), rec(RecordedPolicy::EqualShare, 3)),
        ])
        .expect("file");
        let options: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            options,
            vec![
                "options nvidia NVreg_RegistryDwordsPerDevice=\"pci=0000:41:00.0;RmPVMRL=0x00180011;pci=0000:c1:00.0;RmPVMRL=0x00030001\""
            ]
        );
        assert_eq!(render_modprobe(&[]), None);
    }
}
