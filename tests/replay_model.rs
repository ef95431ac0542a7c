//! The replay benchmark's trace generator and hindsight optimum (`benches/replay/`): a bench
//! without the test harness cannot run its own tests, so they run here (seeded determinism,
//! the CSV round trip, the optimum against brute force on tiny traces).

#[allow(dead_code)]
#[path = "../benches/replay/week.rs"]
mod week;

#[allow(dead_code)]
#[path = "../benches/replay/hindsight.rs"]
mod hindsight;

#[allow(dead_code)]
#[path = "../benches/storm/trace.rs"]
mod trace;

#[allow(dead_code)]
#[path = "../benches/storm/optimum.rs"]
mod optimum;
