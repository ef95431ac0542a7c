//! Where vgpud's process spends its CPU time, by part: outside vgpud's own code (the
//! simulated kernel, where a simulated host's side effects run in vgpud's process; the real
//! kernel's work in vgpud's sysfs writes; the NVML library) and in its own stages (the
//! engine's calls, applying uevents, persistence). Measured with the calling thread's CPU
//! clock around each call, so that a benchmark or the real-kernel suite can say where a
//! create's time goes without a profiler.
//!
//! The parts are exclusive: a part measured inside another (the simulated kernel inside an
//! engine call) counts as its own only, and the outer one gets the rest. What no part counts
//! (the bus, the async runtime, publishing signals, timers) is the process's CPU less all
//! parts.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::time::{clock_gettime, ClockId};

/// A part of the process whose CPU time is kept apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The simulated kernel and drivers (`vgpud-sim`), uevents they send included.
    SimulatedKernel,
    /// The NVML library.
    Nvml,
    /// Writes to sysfs on a real host: the kernel's own work on vgpud's thread (an mdev's
    /// create runs its driver's `create` callback in the writer's context).
    KernelWrites,
    /// The state's journal, intents and the definition and record files.
    Persistence,
    /// The engine's work in calls from the bus, less the parts above.
    EngineCalls,
    /// Applying the kernel's uevents and reading types again after them, less the parts above.
    Uevents,
}

/// Each part's nanoseconds, by [`Part`] (the last is `Uevents`).
static NANOS: [AtomicU64; Part::Uevents as usize + 1] =
    [const { AtomicU64::new(0) }; Part::Uevents as usize + 1];

thread_local! {
    /// The CPU time of this thread's measurements so far, so that an enclosing one can leave
    /// out what its inner ones counted.
    static MEASURED: Cell<u64> = const { Cell::new(0) };
}

fn thread_cpu_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0, |t| {
        (t.tv_sec() as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(t.tv_nsec() as u64)
    })
}

/// Runs `f`, counting the CPU time this thread spends in it as `part`'s.
pub fn measure<T>(part: Part, f: impl FnOnce() -> T) -> T {
    measure_into(&NANOS[part as usize], f)
}

/// Runs `f`, adding the CPU time this thread spends in it, less what measurements inside it
/// counted, to `nanos`.
fn measure_into<T>(nanos: &AtomicU64, f: impl FnOnce() -> T) -> T {
    let inner_before = MEASURED.get();
    let start = thread_cpu_ns();
    let out = f();
    let spent = thread_cpu_ns().saturating_sub(start);
    let inner = MEASURED.get().saturating_sub(inner_before);
    nanos.fetch_add(spent.saturating_sub(inner), Ordering::Relaxed);
    MEASURED.set(inner_before.saturating_add(spent));
    out
}

/// The whole process's CPU time since it started (all threads, user and system), in seconds.
pub fn process_seconds() -> f64 {
    clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .map_or(0.0, |t| t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9)
}

/// The CPU time counted as `part`'s since the process started, in seconds.
pub fn seconds(part: Part) -> f64 {
    NANOS[part as usize].load(Ordering::Relaxed) as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spins for `ms` of wall time (most of it this thread's CPU).
    fn spin(ms: u64) {
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(ms) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }

    #[test]
    fn a_measurement_inside_another_counts_as_its_own_only() {
        let (outer, inner, after) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
        measure_into(&outer, || {
            spin(10);
            measure_into(&inner, || spin(40));
            spin(10);
        });
        let (o, i) = (
            outer.load(Ordering::Relaxed) as f64 / 1e6,
            inner.load(Ordering::Relaxed) as f64 / 1e6,
        );
        // The inner 40 ms are the inner part's; the outer keeps its own 20 (on a busy
        // machine a thread gets less CPU than wall time, never more).
        assert!(i > 2.0 && i <= 45.0, "inner {i} ms");
        assert!(
            o > 0.5 && o <= 25.0,
            "outer {o} ms: the inner part counted twice?"
        );
        // A measurement after them starts from zero again.
        measure_into(&after, || spin(5));
        let a = after.load(Ordering::Relaxed) as f64 / 1e6;
        assert!(a > 0.1 && a <= 10.0, "after {a} ms");
    }

    #[test]
    fn the_cpu_time_of_the_calling_thread_is_counted_and_sleep_is_not() {
        let busy = AtomicU64::new(0);
        // Busy for about 20 ms of wall time: most of it CPU, whatever else runs.
        let spun = measure_into(&busy, || {
            let start = std::time::Instant::now();
            let mut x = 0u64;
            while start.elapsed() < std::time::Duration::from_millis(20) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            x
        });
        assert!(spun > 0);
        let counted = busy.load(Ordering::Relaxed) as f64 / 1e9;
        assert!((0.002..1.0).contains(&counted), "{counted}");
        // Sleeping costs no CPU.
        let idle = AtomicU64::new(0);
        measure_into(&idle, || {
            std::thread::sleep(std::time::Duration::from_millis(30))
        });
        assert!(idle.load(Ordering::Relaxed) < 5_000_000, "{idle:?}");
    }
}
