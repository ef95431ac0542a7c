//! Reading the demand record ([`crate::demand`]): a type's buckets over a window, summed into
//! steps, and its forecast. Both answer from memory.

use super::{Engine, EngineError, EngineResult};
use crate::demand::forecast::{self, Accuracy};
use crate::demand::record::{Counts, BUCKET_S};
use crate::model::PASSTHROUGH_TYPE;

/// The longest step of a demand query: a week.
pub const MAX_STEP_S: u64 = 7 * 24 * 3600;
/// The most rows a demand query answers.
pub const MAX_ROWS: u64 = 20_000;
/// The most hours a forecast looks ahead.
pub const MAX_AHEAD_HOURS: u64 = 168;

/// A type's forecast: the last week hour by hour (start, forecast, actual), the hours ahead
/// (start, forecast), and how the last week's forecasts did.
#[derive(Debug, Clone)]
pub struct ForecastView {
    /// The type id the record keeps it under.
    pub type_id: String,
    /// (hour start, forecast made just before it, requests that came).
    pub last_week: Vec<(u64, f64, f64)>,
    /// (hour start, forecast), from the hour under way on.
    pub ahead: Vec<(u64, f64)>,
    /// The last week's error.
    pub accuracy: Accuracy,
}

impl Engine {
    /// The id the demand record keeps `query` under: itself when the record has it, else the
    /// id of the first type a GPU offers that the query names (id, name or short name).
    fn demand_key(&self, query: &str) -> EngineResult<String> {
        if self.demand.with(|r| r.types().any(|t| t == query)) {
            return Ok(query.to_string());
        }
        if query.eq_ignore_ascii_case(PASSTHROUGH_TYPE) {
            return Ok(PASSTHROUGH_TYPE.to_string());
        }
        self.list_gpus()
            .iter()
            .flat_map(|g| g.types.iter())
            .find(|t| t.matches(query))
            .map(|t| t.id.clone())
            .ok_or_else(|| {
                EngineError::NotFound(format!(
                    "no type {:?} on this host, and none in the demand record",
                    super::request::shorten(query)
                ))
            })
    }

    /// The demand of a type from `from_s` to `to_s` (Unix times), summed per `step_s`
    /// (a multiple of 5 minutes up to a week; steps start at `from_s` rounded down to 5
    /// minutes): (step start, counts), oldest first, steps with nothing left out.
    pub fn demand_of(
        &self,
        query: &str,
        from_s: u64,
        to_s: u64,
        step_s: u64,
    ) -> EngineResult<(String, Vec<(u64, Counts)>)> {
        if step_s == 0 || !step_s.is_multiple_of(BUCKET_S) || step_s > MAX_STEP_S {
            return Err(EngineError::InvalidArgument(format!(
                "option \"step\" is {step_s} s: a multiple of {BUCKET_S} s up to {MAX_STEP_S} s"
            )));
        }
        if from_s >= to_s {
            return Err(EngineError::InvalidArgument(format!(
                "option \"from\" ({from_s}) must come before \"to\" ({to_s})"
            )));
        }
        let start = from_s - from_s % BUCKET_S;
        if (to_s - start).div_ceil(step_s) > MAX_ROWS {
            return Err(EngineError::InvalidArgument(format!(
                "{} s in steps of {step_s} s is more than {MAX_ROWS} rows: take a longer step or a shorter window",
                to_s - start
            )));
        }
        let key = self.demand_key(query)?;
        let mut rows: Vec<(u64, Counts)> = Vec::new();
        for (at, counts) in self.demand.with(|r| r.buckets(&key, start, to_s)) {
            let step_start = start + (at - start) / step_s * step_s;
            match rows.last_mut() {
                Some((s, sum)) if *s == step_start => sum.add(&counts),
                _ => rows.push((step_start, counts)),
            }
        }
        Ok((key, rows))
    }

    /// A type's forecast at `now_s`, `ahead_hours` (1 to a week) ahead.
    pub fn forecast_of(
        &self,
        query: &str,
        now_s: u64,
        ahead_hours: u64,
    ) -> EngineResult<ForecastView> {
        if !(1..=MAX_AHEAD_HOURS).contains(&ahead_hours) {
            return Err(EngineError::InvalidArgument(format!(
                "option \"hours\" is {ahead_hours}: 1 to {MAX_AHEAD_HOURS}"
            )));
        }
        let key = self.demand_key(query)?;
        let fitted = self.demand.with(|r| forecast::fit_type(r, &key, now_s));
        let now_hour = now_s / 3600;
        let ahead = (now_hour..now_hour + ahead_hours)
            .map(|h| (h * 3600, fitted.model.predict(h)))
            .collect();
        Ok(ForecastView {
            type_id: key,
            accuracy: fitted.accuracy(),
            last_week: fitted
                .last_week
                .iter()
                .map(|(h, f, a)| (h * 3600, *f, *a))
                .collect(),
            ahead,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::demand::record::Note;
    use crate::engine::Engine;
    use crate::host::Host;

    #[test]
    fn demand_is_summed_per_step_and_names_resolve_to_the_recorded_id() {
        let dir = tempfile::tempdir().expect("tempdir");
        vgpud_sim::write_profile("nvidia-turing", dir.path()).expect("profile");
        let e = Engine::new(Host::simulated(dir.path())).expect("engine");
        let t0 = 1_764_579_600; // a Monday, 09:00 UTC
        let id = e
            .list_gpus()
            .iter()
            .flat_map(|g| g.types.clone())
            .find(|t| t.matches("RTX6000-2Q"))
            .expect("a 2Q type")
            .id;
        for (at, note) in [
            (t0, Note::Request),
            (t0 + 10, Note::Cold),
            (t0 + 400, Note::Request),
            (t0 + 400, Note::Refused),
            (t0 + 3700, Note::Released),
        ] {
            e.demand().note_at(&id, note, at);
        }
        let (key, rows) = e
            .demand_of("RTX6000-2Q", t0, t0 + 7200, 3600)
            .expect("by name");
        assert_eq!(key, id);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].0, t0);
        assert_eq!(
            (rows[0].1.requests, rows[0].1.cold, rows[0].1.refused),
            (2, 1, 1)
        );
        assert_eq!((rows[1].0, rows[1].1.released), (t0 + 3600, 1));
        let (_, fine) = e.demand_of(&id, t0 + 1, t0 + 7200, 300).expect("by id");
        assert_eq!(
            fine.len(),
            3,
            "steps start at from rounded down to 5 minutes"
        );
        assert_eq!(fine[0].0, t0);
        for (from, to, step) in [
            (t0, t0, 300),
            (t0, t0 + 1, 299),
            (t0, t0 + 1, 0),
            (0, t0, 300),
        ] {
            assert!(
                matches!(
                    e.demand_of(&id, from, to, step),
                    Err(crate::engine::EngineError::InvalidArgument(_))
                ),
                "{from} {to} {step}"
            );
        }
        assert!(matches!(
            e.demand_of("no-such-type", t0, t0 + 300, 300),
            Err(crate::engine::EngineError::NotFound(_))
        ));
        let f = e.forecast_of(&id, t0 + 7200, 24).expect("forecast");
        assert_eq!(f.ahead.len(), 24);
        assert_eq!(f.ahead[0].0, t0 + 7200);
        assert_eq!(f.last_week.len(), 168);
        assert_eq!(f.accuracy.actual, 2.0, "the two requests of the last week");
        assert!(e.forecast_of(&id, t0, 0).is_err());
        assert!(e.forecast_of(&id, t0, 169).is_err());
    }
}
