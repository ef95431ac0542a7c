//! A seeded week (or weeks) of VDI logins and its CSV trace format (docs/benchmarks.md,
//! "The week replayed"): `time,user,type,event,duration`, times and durations in whole
//! seconds from the trace's first Monday 00:00.

use std::fmt::Write as _;

/// Seconds in an hour, a day, a week.
pub const HOUR: u64 = 3600;
/// Seconds in a day.
pub const DAY: u64 = 24 * HOUR;
/// Seconds in a week.
pub const WEEK: u64 = 7 * DAY;

/// The storm bench's seeded generator (SplitMix64): the same trace on every machine.
pub use crate::trace::Rng;

/// The draws a week of logins needs beyond the generator's uniform one.
pub trait Draws {
    /// Standard normal (Box–Muller).
    fn normal(&mut self) -> f64;
    /// Log-normal with median `median` and shape `sigma`.
    fn log_normal(&mut self, median: f64, sigma: f64) -> f64 {
        median * (sigma * self.normal()).exp()
    }
    /// Poisson with mean `mean` (Knuth's method; means here are small).
    fn poisson(&mut self, mean: f64) -> u32;
}

impl Draws for Rng {
    fn normal(&mut self) -> f64 {
        let u = 1.0 - self.unit();
        let v = self.unit();
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    fn poisson(&mut self, mean: f64) -> u32 {
        let limit = (-mean).exp();
        let (mut k, mut p) = (0, self.unit());
        while p > limit {
            k += 1;
            p *= self.unit();
        }
        k
    }
}

/// A class of users: its vGPU type, head count, and the type's devices per GPU.
#[derive(Debug, Clone, Copy)]
pub struct Class {
    /// The class's short name (also its pool's tag, `pool-NAME`).
    pub name: &'static str,
    /// The vGPU type each login asks for.
    pub type_name: &'static str,
    /// Users of the class.
    pub users: u32,
    /// Devices of the type one GPU holds (a device takes 1/max of a GPU).
    pub max_per_gpu: u32,
    /// The type's framebuffer (GiB): its size class on a GPU.
    pub gib: u64,
}

/// The four classes: task workers (1Q), knowledge workers (2Q), designers (4Q) on Quadro
/// RTX 8000, and AI developers on a MIG slice of an H200 (1g.18gb).
pub const CLASSES: [Class; 4] = [
    Class {
        name: "task",
        type_name: "RTX8000-1Q",
        users: 150,
        max_per_gpu: 32,
        gib: 1,
    },
    Class {
        name: "office",
        type_name: "RTX8000-2Q",
        users: 120,
        max_per_gpu: 24,
        gib: 2,
    },
    Class {
        name: "design",
        type_name: "RTX8000-4Q",
        users: 32,
        max_per_gpu: 12,
        gib: 4,
    },
    Class {
        name: "ai",
        type_name: "H200X-1-18C",
        users: 12,
        max_per_gpu: 7,
        gib: 18,
    },
];

/// The class of a type name.
pub fn class_of(type_name: &str) -> Option<&'static Class> {
    CLASSES.iter().find(|c| c.type_name == type_name)
}

/// What a row of the trace is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A session: created at `time`, removed at `time + duration`.
    Login,
    /// A VM created and never started: created at `time`, never removed (duration 0).
    Orphan,
    /// A session whose broker forgets the removal: used for `duration`, never removed.
    Forgotten,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Login => "login",
            Kind::Orphan => "orphan",
            Kind::Forgotten => "forgotten",
        }
    }
}

/// One row of the trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Seconds since the trace's first Monday 00:00.
    pub time: u64,
    /// Who.
    pub user: String,
    /// The vGPU type asked for.
    pub type_name: String,
    /// What it is.
    pub kind: Kind,
    /// How long the session is used, in seconds (0 for an orphan).
    pub duration: u64,
}

/// The share of users that never start the VM they asked for.
pub const ORPHAN_RATE: f64 = 0.05;
/// The share of sessions whose removal the broker forgets.
pub const FORGOTTEN_RATE: f64 = 0.02;
/// The share of a class that comes on a weekday.
pub const WEEKDAY_ATTENDANCE: f64 = 0.92;
/// The share of those that log in again after lunch.
pub const AFTER_LUNCH: f64 = 0.7;

/// The weekday morning storm's logins: from 8:00 to 9:30 (hours of the day).
pub const MORNING_STORM: (f64, f64) = (8.0, 9.5);
/// The after-lunch storm's logins: from 13:00 to 14:00 (later for a long morning session).
pub const LUNCH_STORM: (f64, f64) = (13.0, 14.0);

/// Whether a request at `time` (seconds since a Monday 00:00) falls in a weekday storm
/// window: the logins the pools are there for.
pub fn in_storm(time: u64) -> bool {
    let day = time / DAY;
    let hour = (time % DAY) as f64 / HOUR as f64;
    let within = |w: (f64, f64)| w.0 <= hour && hour < w.1;
    day % 7 < 5 && (within(MORNING_STORM) || within(LUNCH_STORM))
}

/// Ad-hoc logins per user per hour: weekday working hours (9–18), weekday evening and
/// night, weekend daytime (9–18), weekend night.
fn ad_hoc_rate(weekend: bool, hour: u64) -> f64 {
    let day = (9..18).contains(&hour);
    match (weekend, day) {
        (false, true) => 0.012,
        (false, false) => 0.002,
        (true, true) => 0.008,
        (true, false) => 0.001,
    }
}

/// `weeks` weeks of logins from `seed` (see docs/benchmarks.md for the distributions).
pub fn generate(seed: u64, weeks: u64) -> Vec<Event> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let h = |x: f64| (x * HOUR as f64).round() as u64;
    for day in 0..7 * weeks {
        let base = day * DAY;
        let weekend = day % 7 >= 5;
        for class in &CLASSES {
            let mut push = |rng: &mut Rng, user: u32, time: u64, duration: u64| {
                let draw = rng.unit();
                let kind = if draw < ORPHAN_RATE {
                    Kind::Orphan
                } else if draw < ORPHAN_RATE + FORGOTTEN_RATE {
                    Kind::Forgotten
                } else {
                    Kind::Login
                };
                out.push(Event {
                    time,
                    user: format!("{}-{user:03}", class.name),
                    type_name: class.type_name.into(),
                    kind,
                    duration: if kind == Kind::Orphan { 0 } else { duration },
                });
            };
            if !weekend {
                for user in 0..class.users {
                    if rng.unit() >= WEEKDAY_ATTENDANCE {
                        continue;
                    }
                    // The morning storm: 8:00–9:30, uniform; a session of median 3.8 h.
                    let (from, to) = MORNING_STORM;
                    let login = from + (to - from) * rng.unit();
                    let session = rng.log_normal(3.8, 0.25).min(10.0);
                    push(&mut rng, user, base + h(login), h(session));
                    if rng.unit() < AFTER_LUNCH {
                        // After lunch: 13:00–14:00, or 15 min after the morning's end.
                        let (from, to) = LUNCH_STORM;
                        let again = (from + (to - from) * rng.unit()).max(login + session + 0.25);
                        let session = rng.log_normal(3.5, 0.3).min(8.0);
                        push(&mut rng, user, base + h(again), h(session));
                    }
                }
            }
            for hour in 0..24 {
                let n = rng.poisson(ad_hoc_rate(weekend, hour) * f64::from(class.users));
                for _ in 0..n {
                    let user = (rng.unit() * f64::from(class.users)) as u32;
                    let at = hour as f64 + rng.unit();
                    let session = rng.log_normal(1.0, 0.8).min(12.0);
                    push(&mut rng, user, base + h(at), h(session));
                }
            }
        }
    }
    out.sort_by(|a, b| (a.time, &a.user).cmp(&(b.time, &b.user)));
    out
}

/// The CSV header.
pub const HEADER: &str = "time,user,type,event,duration";

/// The trace as CSV (with its header).
pub fn to_csv(events: &[Event]) -> String {
    let mut s = format!("{HEADER}\n");
    for e in events {
        let _ = writeln!(
            s,
            "{},{},{},{},{}",
            e.time,
            e.user,
            e.type_name,
            e.kind.name(),
            e.duration
        );
    }
    s
}

/// Reads a CSV trace: the header, then rows; blank lines and lines starting with `#` are
/// skipped. Rows come out sorted by time.
pub fn from_csv(text: &str) -> Result<Vec<Event>, String> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'));
    match lines.next() {
        Some((_, l)) if l.trim() == HEADER => {}
        other => return Err(format!("the first line is not `{HEADER}`: {other:?}")),
    }
    let mut out = Vec::new();
    for (i, line) in lines {
        let f: Vec<&str> = line.trim().split(',').collect();
        let [time, user, ty, event, duration] = f[..] else {
            return Err(format!("line {}: not 5 fields", i + 1));
        };
        let num = |v: &str| {
            v.parse::<u64>()
                .map_err(|e| format!("line {}: {v:?}: {e}", i + 1))
        };
        let kind = match event {
            "login" => Kind::Login,
            "orphan" => Kind::Orphan,
            "forgotten" => Kind::Forgotten,
            other => return Err(format!("line {}: unknown event {other:?}", i + 1)),
        };
        out.push(Event {
            time: num(time)?,
            user: user.into(),
            type_name: ty.into(),
            kind,
            duration: num(duration)?,
        });
    }
    out.sort_by(|a, b| (a.time, &a.user).cmp(&(b.time, &b.user)));
    Ok(out)
}

/// Requests (rows of any kind) per type per hour, from `from` for `hours` hours.
pub fn hourly(events: &[Event], type_name: &str, from: u64, hours: u64) -> Vec<f64> {
    let mut out = vec![0.0; hours as usize];
    for e in events.iter().filter(|e| e.type_name == type_name) {
        if e.time >= from {
            if let Some(slot) = out.get_mut(((e.time - from) / HOUR) as usize) {
                *slot += 1.0;
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(dead_code, unused_imports)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_trace_and_it_survives_its_csv() {
        let a = generate(25, 1);
        assert_eq!(a, generate(25, 1));
        assert_ne!(a, generate(26, 1));
        assert_eq!(from_csv(&to_csv(&a)).expect("parse"), a);
        assert!(from_csv("time,user\n").is_err());
        assert!(from_csv(&format!("{HEADER}\n1,u,t,lost,0\n")).is_err());
    }

    #[test]
    fn the_week_has_its_storms_a_quiet_night_a_light_weekend_and_orphans() {
        let w = generate(25, 1);
        let per_hour = |day: u64, hour: u64| {
            w.iter()
                .filter(|e| e.time / HOUR == day * 24 + hour)
                .count()
        };
        let monday_8 = per_hour(0, 8);
        assert!(monday_8 > 150, "{monday_8}");
        assert!(per_hour(0, 3) < 10);
        assert!(per_hour(0, 13) > 100);
        assert!(per_hour(5, 8) < monday_8 / 10);
        let orphans = w.iter().filter(|e| e.kind == Kind::Orphan).count() as f64;
        let share = orphans / w.len() as f64;
        assert!((0.03..0.07).contains(&share), "{share}");
        assert!(w.windows(2).all(|p| p[0].time <= p[1].time));
        assert!(w
            .iter()
            .all(|e| e.time < WEEK && class_of(&e.type_name).is_some()));
    }

    #[test]
    fn the_storm_windows_are_the_weekday_mornings_and_after_lunch() {
        let at = |day: u64, h: u64, m: u64| day * DAY + h * HOUR + m * 60;
        assert!(in_storm(at(0, 8, 0)) && in_storm(at(4, 9, 29)) && in_storm(at(2, 13, 59)));
        assert!(!in_storm(at(0, 7, 59)) && !in_storm(at(0, 9, 30)) && !in_storm(at(0, 14, 0)));
        assert!(!in_storm(at(5, 8, 30)) && !in_storm(at(6, 13, 30)) && in_storm(at(7, 8, 30)));
        // Every morning login the generator draws is in a storm, and most of a weekday's
        // requests are.
        let w = generate(25, 1);
        let monday: Vec<&Event> = w.iter().filter(|e| e.time < DAY).collect();
        let storm = monday.iter().filter(|e| in_storm(e.time)).count();
        assert!(storm * 10 > monday.len() * 7, "{storm} of {}", monday.len());
        assert!(w
            .iter()
            .filter(|e| e.time / DAY == 0 && (e.time % DAY) / HOUR == 8)
            .all(|e| in_storm(e.time)));
    }
}
