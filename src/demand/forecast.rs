//! A forecast of how many devices of a type will be asked for in each coming hour, from the
//! demand record: a seasonal model over the hour of the week, small enough to explain.
//!
//! - **The week's shape.** Each of the 168 hours of the week has a level: the requests seen
//!   the first time that hour came, then, each later week, moved half-way toward what
//!   happened (`level += ALPHA × (actual − level)`, [`ALPHA`] = 0.5: exponential smoothing of
//!   the same hour over past weeks).
//! - **The recent trend.** Over the last [`TREND_HOURS`] hours whose hour of the week had a
//!   level, the ratio of what happened to what the levels said, `(Σ actual + 1) ÷ (Σ level +
//!   1)`, kept between 0.5 and 2: "this week runs 20 % above the usual" scales every
//!   forecast by 1.2.
//! - **The forecast** of an hour is its level × the trend; an hour of the week never seen
//!   yet gets the mean of the last [`TREND_HOURS`] hours.
//!
//! Its error is measured the way it is used: each hour of the last week against the
//! forecast made just before that hour ([`fit`]).

use std::collections::VecDeque;

use super::record::Record;

/// Hours in a week.
pub const HOURS_PER_WEEK: u64 = 168;
/// How far each week moves an hour's level toward what happened.
pub const ALPHA: f64 = 0.5;
/// The hours the trend and the fallback look back on.
pub const TREND_HOURS: usize = 24;
const TREND_MIN: f64 = 0.5;
const TREND_MAX: f64 = 2.0;

/// The model's state after the hours it has seen.
#[derive(Debug, Clone)]
pub struct Forecaster {
    levels: Vec<Option<f64>>,
    /// The last hours: what happened, and the level its hour of the week had before.
    recent: VecDeque<(f64, Option<f64>)>,
}

impl Default for Forecaster {
    fn default() -> Self {
        Forecaster {
            levels: vec![None; HOURS_PER_WEEK as usize],
            recent: VecDeque::with_capacity(TREND_HOURS + 1),
        }
    }
}

fn slot(hour: u64) -> usize {
    (hour % HOURS_PER_WEEK) as usize
}

impl Forecaster {
    /// The ratio of what happened lately to what the levels said.
    pub fn trend(&self) -> f64 {
        let (actual, level) = self
            .recent
            .iter()
            .filter_map(|(a, l)| l.map(|l| (*a, l)))
            .fold((0.0, 0.0), |(sa, sl), (a, l)| (sa + a, sl + l));
        ((actual + 1.0) / (level + 1.0)).clamp(TREND_MIN, TREND_MAX)
    }

    /// The forecast of the requests in the hour `hour` (Unix time ÷ 3600).
    pub fn predict(&self, hour: u64) -> f64 {
        match self.levels[slot(hour)] {
            Some(level) => level * self.trend(),
            None if self.recent.is_empty() => 0.0,
            None => self.recent.iter().map(|(a, _)| a).sum::<f64>() / self.recent.len() as f64,
        }
    }

    /// Takes in the requests of the hour `hour`; hours come in order, one after the other.
    pub fn observe(&mut self, hour: u64, actual: f64) {
        let level = &mut self.levels[slot(hour)];
        self.recent.push_back((actual, *level));
        if self.recent.len() > TREND_HOURS {
            self.recent.pop_front();
        }
        *level = Some(match *level {
            Some(l) => l + ALPHA * (actual - l),
            None => actual,
        });
    }
}

/// How far forecasts were from what happened.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Accuracy {
    /// The hours compared.
    pub hours: usize,
    /// The mean of |forecast − actual| per hour, in requests.
    pub mean_abs_error: f64,
    /// The requests that came in those hours.
    pub actual: f64,
    /// Σ|forecast − actual| ÷ Σ actual; `None` when nothing came.
    pub relative: Option<f64>,
}

/// Compares (forecast, actual) pairs.
pub fn accuracy(pairs: &[(f64, f64)]) -> Accuracy {
    let error: f64 = pairs.iter().map(|(f, a)| (f - a).abs()).sum();
    let actual: f64 = pairs.iter().map(|(_, a)| a).sum();
    Accuracy {
        hours: pairs.len(),
        mean_abs_error: if pairs.is_empty() {
            0.0
        } else {
            error / pairs.len() as f64
        },
        actual,
        relative: (actual > 0.0).then(|| error / actual),
    }
}

/// A model fitted on a type's history.
#[derive(Debug, Clone)]
pub struct Fitted {
    /// The model after the last hour.
    pub model: Forecaster,
    /// The last week's hours: (hour, the forecast made just before it, what happened).
    pub last_week: Vec<(u64, f64, f64)>,
}

impl Fitted {
    /// How the last week's forecasts did.
    pub fn accuracy(&self) -> Accuracy {
        let pairs: Vec<(f64, f64)> = self.last_week.iter().map(|(_, f, a)| (*f, *a)).collect();
        accuracy(&pairs)
    }
}

/// Runs the model over `hourly` (consecutive hours, oldest first, as
/// [`hourly_requests`] gives them).
pub fn fit(hourly: &[(u64, f64)]) -> Fitted {
    let mut model = Forecaster::default();
    let mut last_week = Vec::new();
    let week_starts = hourly.len().saturating_sub(HOURS_PER_WEEK as usize);
    for (i, (hour, actual)) in hourly.iter().enumerate() {
        if i >= week_starts {
            last_week.push((*hour, model.predict(*hour), *actual));
        }
        model.observe(*hour, *actual);
    }
    Fitted { model, last_week }
}

/// The requests of `type_id` in each hour from `from_hour` to `to_hour` (exclusive; hours
/// as Unix time ÷ 3600), hours without any as 0.
pub fn hourly_requests(
    record: &Record,
    type_id: &str,
    from_hour: u64,
    to_hour: u64,
) -> Vec<(u64, f64)> {
    let mut out: Vec<(u64, f64)> = (from_hour..to_hour.max(from_hour))
        .map(|h| (h, 0.0))
        .collect();
    for (start, counts) in record.buckets(type_id, from_hour * 3600, to_hour * 3600) {
        let i = (start / 3600 - from_hour) as usize;
        if let Some(slot) = out.get_mut(i) {
            slot.1 += f64::from(counts.requests);
        }
    }
    out
}

/// The model of `type_id` fitted on every complete hour the record keeps before `now_unix_s`;
/// its `model.predict(now_unix_s / 3600)` is the forecast of the hour under way.
pub fn fit_type(record: &Record, type_id: &str, now_unix_s: u64) -> Fitted {
    let now_hour = now_unix_s / 3600;
    let first = now_hour.saturating_sub(super::record::KEEP_S / 3600);
    fit(&hourly_requests(record, type_id, first, now_hour))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demand::record::Note;

    /// A week of office logins: 40 at 8:00 and 20 at 13:00 on weekdays, 2 at 9:00 on
    /// weekends, nothing else (hour 0 of the slot count is a Thursday, as Unix time's).
    fn office(hour: u64) -> f64 {
        let day = (hour / 24 + 3) % 7; // 0 = Monday
        let h = hour % 24;
        match (day < 5, h) {
            (true, 8) => 40.0,
            (true, 13) => 20.0,
            (false, 9) => 2.0,
            _ => 0.0,
        }
    }

    #[test]
    fn a_week_that_repeats_is_foreseen_exactly() {
        let start = 480_000;
        let hours: Vec<(u64, f64)> = (start..start + 3 * HOURS_PER_WEEK)
            .map(|h| (h, office(h)))
            .collect();
        let fitted = fit(&hours);
        // The third week was foreseen hour by hour.
        let acc = fitted.accuracy();
        assert_eq!(acc.hours, 168);
        assert!(acc.mean_abs_error < 1e-9, "{acc:?}");
        assert_eq!(acc.relative, Some(0.0));
        // And the fourth is too.
        for h in start + 3 * HOURS_PER_WEEK..start + 4 * HOURS_PER_WEEK {
            assert!(
                (fitted.model.predict(h) - office(h)).abs() < 1e-9,
                "hour {h}"
            );
        }
    }

    #[test]
    fn a_busier_week_raises_the_forecast_and_a_new_peak_is_learned_by_half() {
        let start = 480_000;
        let mut hours: Vec<(u64, f64)> = (start..start + 2 * HOURS_PER_WEEK)
            .map(|h| (h, office(h)))
            .collect();
        // The third week's Monday so far runs 50 % busier (its 8:00 and 13:00).
        let monday = (start + 2 * HOURS_PER_WEEK..start + 3 * HOURS_PER_WEEK)
            .find(|h| (h / 24 + 3) % 7 == 0 && h % 24 == 0)
            .expect("a Monday");
        for h in start + 2 * HOURS_PER_WEEK..monday + 14 {
            hours.push((h, office(h) * 1.5));
        }
        let fitted = fit(&hours);
        let tuesday_8 = monday + 24 + 8;
        let usual = office(tuesday_8);
        let f = fitted.model.predict(tuesday_8);
        assert!(
            f > usual * 1.3 && f <= usual * 2.0,
            "forecast {f} vs usual {usual}"
        );
        // A slot that jumps from 40 to 80 moves half-way: 60, then 70.
        let mut m = Forecaster::default();
        m.observe(0, 40.0);
        m.observe(HOURS_PER_WEEK, 80.0);
        assert_eq!(m.levels[0], Some(60.0));
        m.observe(2 * HOURS_PER_WEEK, 80.0);
        assert_eq!(m.levels[0], Some(70.0));
    }

    #[test]
    fn without_history_the_forecast_is_the_recent_mean_or_nothing() {
        let m = Forecaster::default();
        assert_eq!(m.predict(5), 0.0);
        let mut m = Forecaster::default();
        for h in 0..4 {
            m.observe(h, 2.0 * h as f64);
        }
        // Hours 0..4 seen (0, 2, 4, 6): hour 10 has no level yet.
        assert_eq!(m.predict(10), 3.0);
        assert_eq!(accuracy(&[]).relative, None);
        let a = accuracy(&[(1.0, 3.0), (2.0, 1.0)]);
        assert_eq!(
            (a.mean_abs_error, a.actual, a.relative),
            (1.5, 4.0, Some(0.75))
        );
    }

    #[test]
    fn hours_are_read_from_the_record_with_empty_ones_as_zero() {
        let mut r = Record::default();
        let h0 = 490_000u64;
        r.note("t", Note::Request, h0 * 3600 + 10).expect("note");
        r.note("t", Note::Request, h0 * 3600 + 3599).expect("note");
        r.note("t", Note::Refused, h0 * 3600 + 3599).expect("note");
        r.note("t", Note::Request, (h0 + 2) * 3600).expect("note");
        assert_eq!(
            hourly_requests(&r, "t", h0, h0 + 3),
            vec![(h0, 2.0), (h0 + 1, 0.0), (h0 + 2, 1.0)]
        );
        assert!(hourly_requests(&r, "t", h0 + 3, h0).is_empty());
    }
}
