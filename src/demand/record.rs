//! The demand record: for each device type and each 5-minute bucket, how many devices were
//! asked for, served warm (from a spare) or cold (made then), refused for lack of room, and
//! released.
//!
//! It is bounded whatever the callers do: buckets older than [`KEEP_S`] (8 weeks) are
//! dropped, at most [`MAX_ENTRIES`] buckets are kept in all (the oldest go first), at most
//! [`MAX_TYPES`] types, each named by at most [`MAX_TYPE_LEN`] plain characters. Its text
//! form ([`Record::encode`]) is a line per bucket, about 25 bytes with everyday counts (a
//! full record about 3 MiB), never more than [`MAX_FILE_BYTES`].

use std::collections::BTreeMap;

/// The length of a bucket, in seconds.
pub const BUCKET_S: u64 = 300;
/// How far back buckets are kept: 8 weeks.
pub const KEEP_S: u64 = 8 * 7 * 24 * 3600;
/// The most buckets kept, over all types.
pub const MAX_ENTRIES: usize = 120_000;
/// The most types recorded.
pub const MAX_TYPES: usize = 256;
/// The longest type id recorded.
pub const MAX_TYPE_LEN: usize = 64;
/// The largest record file read (bytes): [`MAX_ENTRIES`] lines of the longest form (every
/// count at its maximum); a record of everyday counts is about 3 MiB when full.
pub const MAX_FILE_BYTES: u64 = 12 << 20;

const MAGIC: &str = "vgpud-demand 1";

/// What happened in one bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Devices asked for (`CreateDevice`).
    pub requests: u32,
    /// Requests served from a spare at once.
    pub warm: u32,
    /// Requests served by making a device then.
    pub cold: u32,
    /// Requests refused for lack of room (`NoCapacity`).
    pub refused: u32,
    /// Devices given back (removed, or released to a pool).
    pub released: u32,
}

impl Counts {
    /// Adds `other`, saturating.
    pub fn add(&mut self, other: &Counts) {
        self.requests = self.requests.saturating_add(other.requests);
        self.warm = self.warm.saturating_add(other.warm);
        self.cold = self.cold.saturating_add(other.cold);
        self.refused = self.refused.saturating_add(other.refused);
        self.released = self.released.saturating_add(other.released);
    }

    fn is_empty(&self) -> bool {
        *self == Counts::default()
    }
}

/// One thing to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Note {
    /// A device was asked for.
    Request,
    /// A request was served from a spare.
    Warm,
    /// A request was served by making a device.
    Cold,
    /// A request was refused for lack of room.
    Refused,
    /// A device was given back.
    Released,
}

/// Why a note was not counted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    /// The type id is empty, too long or has characters a type id never has.
    #[error("{0:?} is not a type id the demand record keeps")]
    BadType(String),
    /// [`MAX_TYPES`] types are recorded already.
    #[error("the demand record keeps {MAX_TYPES} types already")]
    TooManyTypes,
}

/// The demand of every type, by bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    types: BTreeMap<String, BTreeMap<u64, Counts>>,
    entries: usize,
}

/// Whether `id` can be a type id: 1 to [`MAX_TYPE_LEN`] ASCII letters, digits and `-_.:`.
pub fn plain_type(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_TYPE_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
}

/// The bucket holding the time `unix_s`.
pub fn bucket_of(unix_s: u64) -> u64 {
    unix_s / BUCKET_S
}

impl Record {
    /// Counts `note` for `type_id` at the time `unix_s`.
    pub fn note(&mut self, type_id: &str, note: Note, unix_s: u64) -> Result<(), NoteError> {
        let counts = self.bucket_mut(type_id, bucket_of(unix_s))?;
        let field = match note {
            Note::Request => &mut counts.requests,
            Note::Warm => &mut counts.warm,
            Note::Cold => &mut counts.cold,
            Note::Refused => &mut counts.refused,
            Note::Released => &mut counts.released,
        };
        *field = field.saturating_add(1);
        self.bound();
        Ok(())
    }

    fn bucket_mut(&mut self, type_id: &str, bucket: u64) -> Result<&mut Counts, NoteError> {
        if !plain_type(type_id) {
            return Err(NoteError::BadType(type_id.chars().take(80).collect()));
        }
        if !self.types.contains_key(type_id) && self.types.len() >= MAX_TYPES {
            return Err(NoteError::TooManyTypes);
        }
        let buckets = self.types.entry(type_id.to_string()).or_default();
        if !buckets.contains_key(&bucket) {
            self.entries += 1;
        }
        Ok(buckets.entry(bucket).or_default())
    }

    /// Drops the buckets that ended more than [`KEEP_S`] before `now_unix_s`.
    pub fn prune(&mut self, now_unix_s: u64) {
        let first_kept = bucket_of(now_unix_s.saturating_sub(KEEP_S));
        let mut dropped = 0;
        for buckets in self.types.values_mut() {
            let kept = buckets.split_off(&first_kept);
            dropped += buckets.len();
            *buckets = kept;
        }
        self.entries -= dropped;
        self.types.retain(|_, b| !b.is_empty());
    }

    /// Keeps at most [`MAX_ENTRIES`] buckets: the oldest go first.
    fn bound(&mut self) {
        while self.entries > MAX_ENTRIES {
            let oldest = self
                .types
                .iter()
                .filter_map(|(t, b)| b.keys().next().map(|k| (*k, t.clone())))
                .min();
            let Some((bucket, type_id)) = oldest else {
                return;
            };
            if let Some(buckets) = self.types.get_mut(&type_id) {
                buckets.remove(&bucket);
                if buckets.is_empty() {
                    self.types.remove(&type_id);
                }
            }
            self.entries -= 1;
        }
    }

    /// The types recorded.
    pub fn types(&self) -> impl Iterator<Item = &str> {
        self.types.keys().map(String::as_str)
    }

    /// How many buckets are kept, over all types.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// The non-empty buckets of `type_id` that start in `[from_unix_s, to_unix_s)`, as
    /// (start of the bucket, counts), oldest first.
    pub fn buckets(&self, type_id: &str, from_unix_s: u64, to_unix_s: u64) -> Vec<(u64, Counts)> {
        let (from, to) = (from_unix_s.div_ceil(BUCKET_S), to_unix_s.div_ceil(BUCKET_S));
        if from >= to {
            return Vec::new();
        }
        self.types
            .get(type_id)
            .map(|b| b.range(from..to).map(|(k, c)| (k * BUCKET_S, *c)).collect())
            .unwrap_or_default()
    }

    /// The sum of the buckets of `type_id` that start in `[from_unix_s, to_unix_s)`.
    pub fn total(&self, type_id: &str, from_unix_s: u64, to_unix_s: u64) -> Counts {
        let mut sum = Counts::default();
        for (_, c) in self.buckets(type_id, from_unix_s, to_unix_s) {
            sum.add(&c);
        }
        sum
    }

    /// The text form: a header line, then per type a `type ID` line and a line per bucket,
    /// `BUCKET REQUESTS WARM COLD REFUSED RELEASED` (BUCKET: the Unix time ÷ 300).
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(32 + self.entries * 26);
        out.push_str(MAGIC);
        out.push('\n');
        for (type_id, buckets) in &self.types {
            out.push_str("type ");
            out.push_str(type_id);
            out.push('\n');
            for (k, c) in buckets {
                out.push_str(&format!(
                    "{k} {} {} {} {} {}\n",
                    c.requests, c.warm, c.cold, c.refused, c.released
                ));
            }
        }
        out
    }

    /// Parses [`Record::encode`]'s form; anything else is refused with the line and the
    /// reason (the caller sets the file aside).
    pub fn decode(text: &str) -> Result<Record, String> {
        let mut lines = text.lines().enumerate();
        match lines.next() {
            Some((_, MAGIC)) => {}
            Some((_, other)) => {
                return Err(format!(
                    "line 1: {:?} is not {MAGIC:?}",
                    other.chars().take(40).collect::<String>()
                ))
            }
            None => return Err("empty".into()),
        }
        let mut record = Record::default();
        let mut current: Option<String> = None;
        for (i, line) in lines {
            let at = |why: &str| format!("line {}: {why}", i + 1);
            if let Some(type_id) = line.strip_prefix("type ") {
                if !plain_type(type_id) {
                    return Err(at("not a type id"));
                }
                if record.types.contains_key(type_id) {
                    return Err(at("a type named twice"));
                }
                if record.types.len() >= MAX_TYPES {
                    return Err(at("too many types"));
                }
                record.types.insert(type_id.to_string(), BTreeMap::new());
                current = Some(type_id.to_string());
                continue;
            }
            let Some(type_id) = &current else {
                return Err(at("a bucket before any type"));
            };
            let fields: Vec<u64> = line
                .split(' ')
                .map(|f| f.parse::<u64>())
                .collect::<Result<_, _>>()
                .map_err(|_| at("not six numbers"))?;
            let [k, requests, warm, cold, refused, released] = fields[..] else {
                return Err(at("not six numbers"));
            };
            let n = |v: u64| u32::try_from(v).map_err(|_| at("a count too large"));
            let counts = Counts {
                requests: n(requests)?,
                warm: n(warm)?,
                cold: n(cold)?,
                refused: n(refused)?,
                released: n(released)?,
            };
            if counts.is_empty() {
                continue;
            }
            let buckets = record.types.entry(type_id.clone()).or_default();
            if buckets.keys().next_back().is_some_and(|last| *last >= k) {
                return Err(at("buckets out of order"));
            }
            if record.entries >= MAX_ENTRIES {
                return Err(at("more buckets than a record keeps"));
            }
            buckets.insert(k, counts);
            record.entries += 1;
        }
        record.types.retain(|_, b| !b.is_empty());
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "nvidia-259";
    const MONDAY_9: u64 = 1_764_579_600; // 2025-12-01 09:00 UTC

    #[test]
    fn notes_fall_into_five_minute_buckets() {
        let mut r = Record::default();
        r.note(T, Note::Request, MONDAY_9).expect("note");
        r.note(T, Note::Cold, MONDAY_9 + 299).expect("note");
        r.note(T, Note::Request, MONDAY_9 + 300).expect("note");
        r.note(T, Note::Refused, MONDAY_9 + 300).expect("note");
        r.note(T, Note::Released, MONDAY_9 + 3600).expect("note");
        let b = r.buckets(T, MONDAY_9, MONDAY_9 + 7200);
        assert_eq!(b.len(), 3, "{b:?}");
        assert_eq!(
            b[0],
            (
                MONDAY_9,
                Counts {
                    requests: 1,
                    cold: 1,
                    ..Counts::default()
                }
            )
        );
        assert_eq!(b[1].1.refused, 1);
        assert_eq!(
            b[2],
            (
                MONDAY_9 + 3600,
                Counts {
                    released: 1,
                    ..Counts::default()
                }
            )
        );
        let sum = r.total(T, MONDAY_9, MONDAY_9 + 600);
        assert_eq!((sum.requests, sum.cold, sum.refused), (2, 1, 1));
        // The window is half-open: the bucket starting at its end is out.
        assert_eq!(r.buckets(T, MONDAY_9, MONDAY_9 + 300).len(), 1);
        assert_eq!(r.entries(), 3);
    }

    #[test]
    fn eight_weeks_are_kept_and_older_buckets_go() {
        let mut r = Record::default();
        let now = MONDAY_9 + KEEP_S;
        r.note(T, Note::Request, MONDAY_9 - BUCKET_S)
            .expect("too old");
        r.note(T, Note::Request, MONDAY_9).expect("just kept");
        r.note("other", Note::Request, MONDAY_9 - 2 * BUCKET_S)
            .expect("too old");
        r.prune(now);
        assert_eq!(
            r.buckets(T, 0, u64::MAX / 2),
            vec![(
                MONDAY_9,
                Counts {
                    requests: 1,
                    ..Counts::default()
                }
            )]
        );
        assert_eq!(
            r.types().collect::<Vec<_>>(),
            vec![T],
            "an emptied type goes"
        );
        assert_eq!(r.entries(), 1);
    }

    #[test]
    fn the_record_is_bounded_whatever_callers_do() {
        let mut r = Record::default();
        for i in 0..(MAX_ENTRIES as u64 + 10) {
            let t = if i % 2 == 0 { "a" } else { "b" };
            r.note(t, Note::Request, i * BUCKET_S).expect("note");
        }
        assert_eq!(r.entries(), MAX_ENTRIES);
        // The oldest went: the first ten buckets.
        assert!(r.buckets("a", 0, 10 * BUCKET_S).is_empty());
        assert_eq!(r.buckets("a", 10 * BUCKET_S, 12 * BUCKET_S).len(), 1);
        assert!(
            r.encode().len() as u64 <= MAX_FILE_BYTES,
            "{}",
            r.encode().len()
        );
        // Even with every count at its largest: a bucket number of 20 digits, five of 10,
        // the spaces and the newline.
        assert!(MAX_ENTRIES as u64 * (20 + 5 * 11 + 1) <= MAX_FILE_BYTES);
        let mut r = Record::default();
        for i in 0..MAX_TYPES {
            r.note(&format!("t{i}"), Note::Request, MONDAY_9)
                .expect("note");
        }
        assert_eq!(
            r.note("one-more", Note::Request, MONDAY_9),
            Err(NoteError::TooManyTypes)
        );
        r.note("t0", Note::Request, MONDAY_9)
            .expect("a known type still counts");
        for bad in ["", "a b", "x/../y", &"x".repeat(MAX_TYPE_LEN + 1), "é"] {
            assert!(
                matches!(
                    r.note(bad, Note::Request, MONDAY_9),
                    Err(NoteError::BadType(_))
                ),
                "{bad:?}"
            );
        }
        let mut c = Counts {
            requests: u32::MAX,
            ..Counts::default()
        };
        c.add(&Counts {
            requests: 1,
            ..Counts::default()
        });
        assert_eq!(c.requests, u32::MAX, "saturates");
    }

    #[test]
    fn the_text_form_reads_back_and_bad_text_is_refused() {
        let mut r = Record::default();
        for (i, note) in [
            Note::Request,
            Note::Warm,
            Note::Cold,
            Note::Refused,
            Note::Released,
        ]
        .into_iter()
        .enumerate()
        {
            r.note(T, note, MONDAY_9 + i as u64 * 7).expect("note");
            r.note("i915-GVTg_V5_4", note, MONDAY_9 + 900)
                .expect("note");
        }
        let text = r.encode();
        assert!(
            text.starts_with("vgpud-demand 1\ntype i915-GVTg_V5_4\n5881935 1 1 1 1 1\n"),
            "{text}"
        );
        assert_eq!(Record::decode(&text), Ok(r));
        for (bad, why) in [
            ("", "empty"),
            ("vgpud-demand 2\n", "line 1"),
            ("vgpud-demand 1\n1 1 0 0 0 0\n", "before any type"),
            ("vgpud-demand 1\ntype a b\n", "not a type id"),
            ("vgpud-demand 1\ntype a\n5 1 0 0 0\n", "six numbers"),
            ("vgpud-demand 1\ntype a\n5 1 0 0 0 x\n", "six numbers"),
            ("vgpud-demand 1\ntype a\n5 1 0 0 0 0 0\n", "six numbers"),
            (
                "vgpud-demand 1\ntype a\n5 4294967296 0 0 0 0\n",
                "too large",
            ),
            (
                "vgpud-demand 1\ntype a\n6 1 0 0 0 0\n5 1 0 0 0 0\n",
                "out of order",
            ),
            ("vgpud-demand 1\ntype a\ntype a\n", "twice"),
        ] {
            let e = Record::decode(bad).expect_err(bad);
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }
}
