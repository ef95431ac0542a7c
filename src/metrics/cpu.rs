//! CPU time vgpud's process spends outside vgpud's own code: in the simulated kernel (on a
//! simulated host, where the kernel's side effects run in vgpud's process) and in the NVML
//! library (the driver's, or the fake one). Measured with the calling thread's CPU clock
//! around each call, so that a benchmark can tell vgpud's own share from theirs.

use std::sync::atomic::{AtomicU64, Ordering};

use nix::time::{clock_gettime, ClockId};

/// A part of the process whose CPU time is kept apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The simulated kernel and drivers (`vgpud-sim`), uevents they send included.
    SimulatedKernel,
    /// The NVML library.
    Nvml,
}

static NANOS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

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

/// Runs `f`, adding the CPU time this thread spends in it to `nanos`.
fn measure_into<T>(nanos: &AtomicU64, f: impl FnOnce() -> T) -> T {
    let start = thread_cpu_ns();
    let out = f();
    nanos.fetch_add(thread_cpu_ns().saturating_sub(start), Ordering::Relaxed);
    out
}

/// The CPU time counted as `part`'s since the process started, in seconds.
pub fn seconds(part: Part) -> f64 {
    NANOS[part as usize].load(Ordering::Relaxed) as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

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
