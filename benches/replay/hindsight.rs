//! The hindsight policy: it knows every login of the trace in advance, so each device is
//! made just before it is asked for (no spare is ever idle, every login is a hand-out) and
//! the only question left is which logins the GPUs cannot hold. That is computed offline,
//! without a daemon: the most requests the Quadro GPUs can hold under NVIDIA's equal-size
//! rule (one size per GPU at a time, devices stay where they are made) is the storm
//! benchmark's branch and bound (`benches/storm/optimum.rs`), exact on a small trace (up
//! to [`EXACT_MAX`] requests, within its node limit); on a longer one, its fractional upper
//! bound (`trace::upper_bound`), which makes the refusals a lower bound. The MIG slices are one size on identical slots, where taking
//! the requests by earliest end whenever a slot is free is exact (interval scheduling on k
//! machines).

use crate::optimum::optimum;
use crate::trace::{upper_bound, Request};
use crate::week::{class_of, Event, Kind, HOUR};

/// What the hindsight policy gets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hindsight {
    /// Requests in the window.
    pub requests: usize,
    /// The fewest refusals (a lower bound when not `exact`).
    pub refused: usize,
    /// Whether `refused` is the exact optimum.
    pub exact: bool,
    /// GPU-hours held by orphans and forgotten devices (the broker's: no policy can free
    /// them without leases).
    pub broker_idle_gpu_hours: f64,
}

/// Traces up to this many Quadro requests get the exact search; longer ones the bound.
pub const EXACT_MAX: usize = 300;

/// The fewest of `requests` that `gpus` GPUs must refuse, and whether it is exact: the
/// search (at most `limit` nodes) for up to [`EXACT_MAX`] requests, else (or when the search
/// does not end) a lower bound from the fractional bound.
pub fn least_refusals(requests: &[Request], gpus: usize, limit: u64) -> (usize, bool) {
    if requests.is_empty() {
        return (0, true);
    }
    let mut upper = requests.len();
    if requests.len() <= EXACT_MAX {
        let found = optimum(requests, gpus, 0, limit);
        if found.proven {
            return (requests.len() - found.accepted, true);
        }
        upper = found.upper;
    }
    // The bound works on a day: times scaled into 24 h (a linear change of time keeps
    // every overlap, so the bound is the same), in half-hour windows of the week.
    let span = requests.iter().map(|r| r.end).fold(1e-9, f64::max);
    let scaled: Vec<Request> = requests
        .iter()
        .map(|r| Request {
            start: r.start * 24.0 / span,
            end: r.end * 24.0 / span,
            ..r.clone()
        })
        .collect();
    let windows = ((span * 2.0).ceil() as usize).max(1);
    let bound = (upper_bound(&scaled, gpus as f64, windows).floor() as usize).min(upper);
    (requests.len() - bound, false)
}

/// The fewest of `intervals` (start, end) that `slots` identical slots must refuse: by
/// earliest end, each taken when a slot is free for its whole interval (exact).
pub fn least_refusals_slots(intervals: &[(f64, f64)], slots: usize) -> usize {
    let mut order: Vec<&(f64, f64)> = intervals.iter().collect();
    order.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut taken: Vec<(f64, f64)> = Vec::new();
    let mut refused = 0;
    for &&(s, e) in &order {
        // The most taken intervals over [s, e) is reached at one of their starts or at s.
        let peak = std::iter::once(s)
            .chain(taken.iter().map(|t| t.0).filter(|&t| s <= t && t < e))
            .map(|t| taken.iter().filter(|o| o.0 <= t && t < o.1).count())
            .max()
            .unwrap_or(0);
        if peak < slots {
            taken.push((s, e));
        } else {
            refused += 1;
        }
    }
    refused
}

/// The hindsight policy over the rows of `events` in `[from, from + hours·3600)`, on
/// `gpus` Quadro GPUs and `mig_slots` MIG slices. A device the broker never removes holds
/// its room to the window's end, or, with a lease of `lease_h` hours, until the lease runs
/// out after its last use (an orphan's VM never ran: from its creation).
pub fn hindsight(
    events: &[Event],
    from: u64,
    hours: u64,
    gpus: usize,
    mig_slots: usize,
    limit: u64,
    lease_h: Option<f64>,
) -> Hindsight {
    let end = hours as f64;
    let mut quadro = Vec::new();
    let mut mig = Vec::new();
    let mut broker_idle = 0.0;
    let window = events
        .iter()
        .filter(|e| e.time >= from && e.time < from + hours * HOUR);
    for e in window.clone() {
        let Some(class) = class_of(&e.type_name) else {
            continue;
        };
        let start = (e.time - from) as f64 / HOUR as f64;
        let used_until = (start + e.duration as f64 / HOUR as f64).min(end);
        let held_until = match (e.kind, lease_h) {
            (Kind::Login, _) => used_until,
            (Kind::Orphan | Kind::Forgotten, None) => end,
            (Kind::Orphan | Kind::Forgotten, Some(lease)) => (used_until + lease).min(end),
        };
        broker_idle += (held_until - used_until) / f64::from(class.max_per_gpu);
        if class.type_name.starts_with("H200") {
            mig.push((start, held_until.max(start + 1e-6)));
        } else {
            quadro.push(Request {
                profile: class.type_name,
                framebuffer_gib: class.gib,
                max_per_gpu: class.max_per_gpu,
                start,
                end: held_until.max(start + 1e-6),
            });
        }
    }
    let (refused, exact) = least_refusals(&quadro, gpus, limit);
    Hindsight {
        requests: quadro.len() + mig.len(),
        refused: refused + least_refusals_slots(&mig, mig_slots),
        exact,
        broker_idle_gpu_hours: broker_idle,
    }
}

#[cfg(test)]
#[allow(dead_code, unused_imports)]
mod tests {
    use super::*;
    use crate::trace::Rng;

    /// The fewest refusals by brute force: the storm bench's exact search over every
    /// assignment.
    fn brute(requests: &[Request], gpus: usize) -> usize {
        requests.len() - crate::optimum::tests::brute(requests, gpus)
    }

    fn tiny(seed: u64, n: usize) -> Vec<Request> {
        let mut rng = Rng::new(seed);
        let sizes = [("1Q", 1, 3), ("2Q", 2, 2), ("4Q", 4, 1)];
        (0..n)
            .map(|_| {
                let (profile, gib, max) = sizes[(rng.unit() * 3.0) as usize];
                let start = rng.unit() * 10.0;
                Request {
                    profile,
                    framebuffer_gib: gib,
                    max_per_gpu: max,
                    start,
                    end: start + 0.5 + rng.unit() * 5.0,
                }
            })
            .collect()
    }

    #[test]
    fn the_hindsight_optimum_matches_brute_force_on_tiny_traces() {
        for seed in 0..30 {
            let requests = tiny(seed, 7);
            let (refused, exact) = least_refusals(&requests, 2, 1_000_000);
            assert!(exact);
            assert_eq!(refused, brute(&requests, 2), "seed {seed}");
        }
    }

    #[test]
    fn slots_by_earliest_end_match_brute_force() {
        for seed in 0..30 {
            let mut rng = Rng::new(seed);
            let iv: Vec<(f64, f64)> = (0..8)
                .map(|_| {
                    let s = rng.unit() * 10.0;
                    (s, s + 0.5 + rng.unit() * 5.0)
                })
                .collect();
            // One size with max 2 per "GPU" and one GPU is two slots.
            let as_requests: Vec<Request> = iv
                .iter()
                .map(|&(start, end)| Request {
                    profile: "1g",
                    framebuffer_gib: 18,
                    max_per_gpu: 2,
                    start,
                    end,
                })
                .collect();
            assert_eq!(
                least_refusals_slots(&iv, 2),
                brute(&as_requests, 1),
                "seed {seed}"
            );
        }
    }

    #[test]
    fn a_trace_in_hindsight_counts_the_brokers_devices_to_the_end() {
        let row = |time, ty: &str, kind, duration| Event {
            time,
            user: "u".into(),
            type_name: ty.into(),
            kind,
            duration,
        };
        let events = vec![
            row(0, "RTX8000-4Q", Kind::Orphan, 0),
            row(HOUR, "RTX8000-4Q", Kind::Forgotten, HOUR),
            row(HOUR, "H200X-1-18C", Kind::Login, HOUR),
            row(HOUR, "H200X-1-18C", Kind::Login, HOUR),
        ];
        let h = hindsight(&events, 0, 4, 1, 1, 10_000, None);
        assert_eq!((h.requests, h.refused, h.exact), (4, 1, true));
        // The orphan: 4 h of a 12th of a GPU; the forgotten one: the 2 h after its use.
        assert!((h.broker_idle_gpu_hours - 6.0 / 12.0).abs() < 1e-9);
        // With a lease of half an hour each holds half an hour past its use.
        let h = hindsight(&events, 0, 4, 1, 1, 10_000, Some(0.5));
        assert_eq!(h.refused, 1, "the two MIG logins still share one slot");
        assert!((h.broker_idle_gpu_hours - 1.0 / 12.0).abs() < 1e-9);
    }
}
