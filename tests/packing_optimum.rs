//! The exact packing optimum of the storm benchmark (`benches/storm/optimum.rs`, whose tests
//! check it against brute force on tiny days): a bench without the test harness cannot run
//! its own tests, so they run here.

#[allow(dead_code)]
#[path = "../benches/storm/trace.rs"]
mod trace;

#[allow(dead_code)]
#[path = "../benches/storm/optimum.rs"]
mod optimum;
