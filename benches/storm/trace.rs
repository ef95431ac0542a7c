//! A synthetic day of VDI logins (seeded, reproducible) and an upper bound on how many of its
//! requests any placement could accept.

/// A small seeded generator (SplitMix64): the trace must be the same on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Exponential with mean `mean`.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

/// One request: a profile wanted from `start` to `end` (hours since midnight).
#[derive(Debug, Clone)]
pub struct Request {
    pub profile: &'static str,
    pub framebuffer_gib: u64,
    /// The type's maximum per GPU: one device takes at least 1/max of a GPU.
    pub max_per_gpu: u32,
    pub start: f64,
    pub end: f64,
}

/// The profile mix of the trace (RTX 8000 names, framebuffer GiB, maximum per GPU), with
/// weights: mostly small Q desktops, some B (task workers), A (app streaming) and C (compute).
pub const MIX: &[(&str, u64, u32, u32)] = &[
    ("RTX8000-1Q", 1, 32, 30),
    ("RTX8000-2Q", 2, 24, 22),
    ("RTX8000-4Q", 4, 12, 12),
    ("RTX8000-8Q", 8, 6, 4),
    ("RTX8000-1B", 1, 32, 12),
    ("RTX8000-2B", 2, 24, 6),
    ("RTX8000-2A", 2, 24, 6),
    ("RTX8000-4C", 4, 12, 5),
    ("RTX8000-8C", 8, 6, 3),
];

/// Arrival rate over the day, relative: night, a morning login peak, lunch, an afternoon peak.
fn rate(hour: f64) -> f64 {
    let bump =
        |center: f64, width: f64, height: f64| height * (-((hour - center) / width).powi(2)).exp();
    0.15 + bump(9.0, 1.2, 3.0) + bump(14.0, 1.8, 2.0) + bump(12.5, 0.6, 0.8)
}

/// `count` requests over a day: arrivals follow the daily rate, sessions last `mean_hours`
/// on average (exponential), profiles follow [`MIX`].
pub fn day(seed: u64, count: usize, mean_hours: f64) -> Vec<Request> {
    let mut rng = Rng::new(seed);
    let max_rate = (0..2400)
        .map(|i| rate(i as f64 / 100.0))
        .fold(0.0, f64::max);
    let total_weight: u32 = MIX.iter().map(|m| m.3).sum();
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        // Thinning: uniform times kept with probability rate/max.
        let start = rng.unit() * 24.0;
        if rng.unit() * max_rate > rate(start) {
            continue;
        }
        let mut pick = (rng.next_u64() % u64::from(total_weight)) as u32;
        let (profile, fb, max, _) = MIX
            .iter()
            .find(|m| {
                if pick < m.3 {
                    true
                } else {
                    pick -= m.3;
                    false
                }
            })
            .copied()
            .unwrap_or(MIX[0]);
        let end = (start + rng.exp(mean_hours)).min(24.0);
        out.push(Request {
            profile,
            framebuffer_gib: fb,
            max_per_gpu: max,
            start,
            end,
        });
    }
    out.sort_by(|a, b| a.start.total_cmp(&b.start));
    out
}

/// An upper bound on the number of requests any placement on `gpus` GPUs could accept. On a
/// GPU every device of a type with maximum `m` per GPU takes at least `1/m` of it (the
/// equal-size rule puts only one size on a GPU, and a size's maximum is the same for all its
/// series), so at every instant the accepted devices' shares sum to at most `gpus`. The
/// fractional relaxation of that is bounded through its dual: for any prices `y_w ≥ 0` per
/// time window, `gpus·Σ y_w·len_w + Σ_i max(0, 1 − s_i·Σ_w y_w·overlap_iw)` is at least every
/// feasible acceptance (weak duality); projected subgradient descent lowers it, and the
/// lowest value seen is the bound.
pub fn upper_bound(requests: &[Request], gpus: f64, windows: usize) -> f64 {
    let len = 24.0 / windows as f64;
    let share = |r: &Request| 1.0 / f64::from(r.max_per_gpu);
    // overlap (hours) of each request with each window it touches
    let overlaps: Vec<Vec<(usize, f64)>> = requests
        .iter()
        .map(|r| {
            let first = ((r.start / len).floor() as usize).min(windows - 1);
            let last = ((r.end / len).floor() as usize).min(windows - 1);
            (first..=last)
                .filter_map(|w| {
                    let lo = r.start.max(w as f64 * len);
                    let hi = r.end.min((w + 1) as f64 * len);
                    (hi > lo).then_some((w, hi - lo))
                })
                .collect()
        })
        .collect();
    let evaluate = |y: &[f64], grad: &mut Vec<f64>| -> f64 {
        grad.clear();
        grad.resize(windows, gpus * len);
        let mut value: f64 = y.iter().map(|v| v * gpus * len).sum();
        for (r, ov) in requests.iter().zip(&overlaps) {
            let cost: f64 = ov.iter().map(|(w, o)| y[*w] * o).sum::<f64>() * share(r);
            if cost < 1.0 {
                value += 1.0 - cost;
                for (w, o) in ov {
                    grad[*w] -= share(r) * o;
                }
            }
        }
        value
    };
    let mut y = vec![0.0; windows];
    let mut grad = Vec::new();
    let mut best = evaluate(&y, &mut grad);
    for k in 0..3000 {
        let norm = grad.iter().map(|g| g * g).sum::<f64>().sqrt();
        if norm == 0.0 {
            break;
        }
        let step = 100.0 / ((k + 1) as f64).sqrt() / norm;
        for (v, g) in y.iter_mut().zip(&grad) {
            *v = (*v - step * g).max(0.0);
        }
        best = best.min(evaluate(&y, &mut grad));
    }
    best
}
