//! The exact offline optimum of a small packing day: the most requests that any assignment
//! to `gpus` GPUs can hold, where an accepted request stays on its GPU for its whole interval
//! (no migration) and at every instant a GPU's devices share one framebuffer size and number
//! at most that size's maximum per GPU. It knows the whole day in advance, so it may refuse a
//! request that would fit to take later ones; an online policy must take what fits.
//!
//! Depth-first branch and bound over the requests in start order: each is placed on a GPU of
//! its size with room (fullest first), on one empty GPU (empty GPUs are interchangeable, so
//! only the first is tried), or refused. A branch is cut when what it has accepted plus the
//! requests left, less a lower bound on the refusals still to come ([`Search::bound`]), cannot
//! beat the best found, or when the same state (the held requests per GPU, GPUs in any order)
//! was reached before at the same request with at least as many accepted.

use std::collections::HashMap;

use crate::trace::Request;

/// What the search found.
#[derive(Debug, Clone, Copy)]
pub struct Optimum {
    /// The most requests any assignment holds.
    pub accepted: usize,
    /// Search nodes visited.
    pub nodes: u64,
    /// Whether the search ended within its node limit; if not, `accepted` is only the best
    /// found and `upper` bounds the optimum.
    pub proven: bool,
    /// An upper bound on the optimum (the root's bound; `accepted` when proven).
    pub upper: usize,
}

/// One GPU of a search state: the requests it holds (indices into the sorted day; all of one
/// size, so their class is the GPU's).
#[derive(Clone, Default)]
struct Gpu {
    held: Vec<u32>,
}

struct Search {
    start: Vec<f64>,
    end: Vec<f64>,
    class: Vec<usize>,
    /// The maximum per GPU of each class.
    cap: Vec<u32>,
    gpus: usize,
    /// How many requests the bound looks ahead with the state's GPUs pinned.
    window: usize,
    /// `suffix[k]`: a lower bound on the refusals among requests `k..` alone.
    suffix: Vec<u32>,
    best: usize,
    nodes: u64,
    /// Per request index, the canonical states seen, with the most accepted before it.
    seen: HashMap<(u32, Vec<u32>), u32>,
    limit: u64,
}

/// The most requests of `requests` that `gpus` GPUs can hold (see the module comment), given
/// `known`, a count some placement is known to reach (to prune from the start; 0 if none),
/// searching at most `limit` nodes.
pub fn optimum(requests: &[Request], gpus: usize, known: usize, limit: u64) -> Optimum {
    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by(|&a, &b| requests[a].start.total_cmp(&requests[b].start));
    let mut sizes: Vec<(u64, u32)> = Vec::new();
    for r in requests {
        if !sizes.iter().any(|s| s.0 == r.framebuffer_gib) {
            sizes.push((r.framebuffer_gib, r.max_per_gpu));
        }
    }
    let class_of = |r: &Request| {
        sizes
            .iter()
            .position(|s| s.0 == r.framebuffer_gib)
            .expect("size")
    };
    let mut s = Search {
        start: order.iter().map(|&i| requests[i].start).collect(),
        end: order.iter().map(|&i| requests[i].end).collect(),
        class: order.iter().map(|&i| class_of(&requests[i])).collect(),
        cap: sizes.iter().map(|s| s.1).collect(),
        gpus,
        window: 40,
        suffix: Vec::new(),
        best: known,
        nodes: 0,
        seen: HashMap::new(),
        limit,
    };
    let n = requests.len();
    s.suffix = vec![0; n + 1];
    for k in (0..n).rev() {
        s.suffix[k] = s.chain_bound(k, n, &[]);
    }
    let state = vec![Gpu::default(); gpus];
    let root = n - s.chain_bound(0, n, &state) as usize;
    s.dfs(0, state, 0);
    let proven = s.nodes < s.limit;
    Optimum {
        accepted: s.best,
        nodes: s.nodes,
        proven,
        upper: if proven { s.best } else { root },
    }
}

impl Search {
    /// The most of `want[c]` devices per class that fit at one instant: `room[c]` places on
    /// GPUs pinned to class c, and `free` GPUs that can take any one class.
    fn fit(&self, want: &[u32], room: &[u32], free: usize) -> u32 {
        // best[f]: the most fitted over the classes so far with f free GPUs used.
        let mut best = vec![0u32; free + 1];
        for c in 0..want.len() {
            let mut next = vec![0u32; free + 1];
            for used in 0..=free {
                for more in 0..=(free - used) {
                    let got = want[c].min(room[c] + more as u32 * self.cap[c]);
                    let v = best[used] + got;
                    if v > next[used + more] {
                        next[used + more] = v;
                    }
                }
            }
            // best[f] is "with at most f used": keep it monotone.
            for f in 1..=free {
                next[f] = next[f].max(next[f - 1]);
            }
            best = next;
        }
        best[free]
    }

    /// A lower bound on how many of requests `from..to` must be refused, given the requests
    /// `pins` hold: at each start `t` of one of them, the requests `from..` active then that do
    /// not fit beside the pinned ones (each GPU free of pins may take any one size) must be
    /// refused; over a chain of such instants the refusals add up, less the requests that
    /// cover two consecutive instants (a refused request counts at every instant it covers).
    fn chain_bound(&self, from: usize, to: usize, pins: &[Gpu]) -> u32 {
        let classes = self.cap.len();
        let m = to - from;
        if m == 0 {
            return 0;
        }
        let mut deficit = vec![0i64; m];
        for k in from..to {
            let t = self.start[k];
            let mut want = vec![0u32; classes];
            for j in from..=k {
                if self.end[j] > t {
                    want[self.class[j]] += 1;
                }
            }
            let mut room = vec![0u32; classes];
            let mut free = 0;
            for g in pins {
                let active = g.held.iter().filter(|&&h| self.end[h as usize] > t).count() as u32;
                if active == 0 {
                    free += 1;
                } else {
                    let c = self.class[g.held[0] as usize];
                    room[c] += self.cap[c] - active;
                }
            }
            if pins.is_empty() {
                free = self.gpus;
            }
            let total: u32 = want.iter().sum();
            deficit[k - from] = i64::from(total - self.fit(&want, &room, free));
        }
        // best[b]: the most a chain ending at instant b proves.
        let mut best = vec![0i64; m];
        let mut top = 0;
        for b in 0..m {
            let tb = self.start[from + b];
            let mut carry = 0i64;
            // c: the requests from..=a that cover both instants a and b
            let mut c = 0i64;
            for (a, chain) in best[..b].iter().enumerate() {
                if self.end[from + a] > tb {
                    c += 1;
                }
                carry = carry.max(chain - c);
            }
            best[b] = deficit[b] + carry.max(0);
            top = top.max(best[b]);
        }
        top as u32
    }

    /// A lower bound on the refusals among requests `i..` from `state`: the chain bound over
    /// the next `window` requests with the state's GPUs pinned, plus the precomputed bound
    /// of the requests after them alone (two disjoint sets of requests).
    fn bound(&self, i: usize, state: &[Gpu]) -> u32 {
        let n = self.start.len();
        let to = (i + self.window).min(n);
        self.chain_bound(i, to, state) + self.suffix[to]
    }

    /// The state as a key: each GPU's held requests sorted, the GPUs sorted.
    fn key(state: &[Gpu]) -> Vec<u32> {
        let mut gpus: Vec<Vec<u32>> = state
            .iter()
            .map(|g| {
                let mut h = g.held.clone();
                h.sort_unstable();
                h
            })
            .collect();
        gpus.sort();
        let mut key = Vec::new();
        for g in gpus {
            key.extend(g);
            key.push(u32::MAX);
        }
        key
    }

    fn dfs(&mut self, i: usize, mut state: Vec<Gpu>, accepted: usize) {
        self.nodes += 1;
        if self.nodes >= self.limit {
            return;
        }
        let n = self.start.len();
        if i == n {
            self.best = self.best.max(accepted);
            return;
        }
        let t = self.start[i];
        for g in &mut state {
            g.held.retain(|&h| self.end[h as usize] > t);
        }
        if accepted + (n - i) <= self.best {
            return;
        }
        let key = (i as u32, Self::key(&state));
        match self.seen.get(&key) {
            Some(&a) if a as usize >= accepted => return,
            _ => {}
        }
        self.seen.insert(key, accepted as u32);
        if accepted + (n - i) - self.bound(i, &state) as usize <= self.best {
            return;
        }
        let c = self.class[i];
        // Places: GPUs of the class with room, fullest first, then one empty GPU (empty GPUs
        // are interchangeable).
        let mut places: Vec<usize> = (0..self.gpus)
            .filter(|&g| {
                let h = &state[g].held;
                !h.is_empty() && self.class[h[0] as usize] == c && (h.len() as u32) < self.cap[c]
            })
            .collect();
        places.sort_by_key(|&g| std::cmp::Reverse(state[g].held.len()));
        if let Some(e) = (0..self.gpus).find(|&g| state[g].held.is_empty()) {
            places.push(e);
        }
        for g in places {
            let mut next = state.clone();
            next[g].held.push(i as u32);
            self.dfs(i + 1, next, accepted + 1);
        }
        self.dfs(i + 1, state, accepted);
    }
}

// Run by tests/packing_optimum.rs; the bench (no test harness) compiles them unused.
#[cfg(test)]
#[allow(dead_code)]
pub(crate) mod tests {
    use super::*;
    use crate::trace::Rng;

    /// Every assignment (refuse, or GPU g, per request) checked against the rules: the exact
    /// answer by brute force (the replay bench's hindsight is checked against it too).
    pub fn brute(requests: &[Request], gpus: usize) -> usize {
        let n = requests.len();
        let mut best = 0;
        let mut choice = vec![0usize; n]; // 0: refused, g + 1: on GPU g
        loop {
            let ok = (0..gpus).all(|g| {
                let on: Vec<&Request> = (0..n)
                    .filter(|&i| choice[i] == g + 1)
                    .map(|i| &requests[i])
                    .collect();
                // At each start (the only instants where the count rises) the active
                // requests share one size and number at most its maximum.
                on.iter().all(|r| {
                    let active: Vec<&&Request> = on
                        .iter()
                        .filter(|o| o.start <= r.start && r.start < o.end)
                        .collect();
                    active
                        .iter()
                        .all(|o| o.framebuffer_gib == r.framebuffer_gib)
                        && active.len() as u32 <= r.max_per_gpu
                })
            });
            if ok {
                best = best.max(choice.iter().filter(|&&c| c > 0).count());
            }
            // next assignment
            let mut k = 0;
            while k < n && choice[k] == gpus {
                choice[k] = 0;
                k += 1;
            }
            if k == n {
                return best;
            }
            choice[k] += 1;
        }
    }

    /// A tiny day: sizes 1, 2, 4 with small maxima (so that both rules bind), random
    /// intervals over a few hours.
    fn tiny(rng: &mut Rng, n: usize) -> Vec<Request> {
        const SIZES: [(u64, u32); 3] = [(1, 3), (2, 2), (4, 1)];
        let mut v: Vec<Request> = (0..n)
            .map(|_| {
                let (fb, max) = SIZES[(rng.next_u64() % 3) as usize];
                let start = rng.unit() * 4.0;
                Request {
                    profile: "test",
                    framebuffer_gib: fb,
                    max_per_gpu: max,
                    start,
                    end: start + 0.2 + rng.unit() * 2.0,
                }
            })
            .collect();
        v.sort_by(|a, b| a.start.total_cmp(&b.start));
        v
    }

    #[test]
    fn matches_brute_force_on_tiny_days() {
        let mut rng = Rng::new(7);
        let mut refused_some = 0;
        for case in 0..300 {
            let gpus = 1 + case % 3;
            let n = if gpus == 3 { 7 } else { 9 };
            let day = tiny(&mut rng, n);
            let want = brute(&day, gpus);
            let got = optimum(&day, gpus, 0, u64::MAX);
            assert!(got.proven);
            assert_eq!(got.accepted, want, "case {case}: {day:?}");
            if want < n {
                refused_some += 1;
            }
        }
        // The days must be tight enough that the optimum refuses, or the check says little.
        assert!(refused_some > 150, "{refused_some}");
    }

    #[test]
    fn a_known_count_does_not_change_the_answer() {
        let mut rng = Rng::new(11);
        for _ in 0..50 {
            let day = tiny(&mut rng, 9);
            let exact = optimum(&day, 2, 0, u64::MAX).accepted;
            assert_eq!(optimum(&day, 2, exact, u64::MAX).accepted, exact);
            assert_eq!(
                optimum(&day, 2, exact.saturating_sub(2), u64::MAX).accepted,
                exact
            );
        }
    }

    #[test]
    fn waits_for_a_later_pair_offline() {
        // One GPU, maximum 2 of size 1: a long request would block two short ones that
        // overlap it with each other; the optimum refuses the long one.
        let r = |fb, max, start, end| Request {
            profile: "test",
            framebuffer_gib: fb,
            max_per_gpu: max,
            start,
            end,
        };
        let day = vec![r(4, 1, 0.0, 10.0), r(1, 2, 1.0, 2.0), r(1, 2, 1.5, 2.5)];
        assert_eq!(optimum(&day, 1, 0, u64::MAX).accepted, 2);
        assert_eq!(brute(&day, 1), 2);
    }
}
