//! The trailing `a{sv} options` of methods: typed access, and unknown keys refused.

use std::collections::HashMap;

use zbus::OwnedVariant;

use super::error::{Error, Result};

/// Options as received on the bus.
pub type Options = HashMap<String, OwnedVariant>;

/// Takes options out of a dictionary one by one, then refuses whatever is left.
pub struct OptionReader {
    method: &'static str,
    options: Options,
}

impl OptionReader {
    /// Reads the options of `method`.
    pub fn new(method: &'static str, options: Options) -> Self {
        OptionReader { method, options }
    }

    /// A string option.
    pub fn string(&mut self, key: &str) -> Result<Option<String>> {
        match self.options.remove(key) {
            None => Ok(None),
            Some(v) => String::try_from(v).map(Some).map_err(|_| {
                Error::InvalidArgument(format!(
                    "option {key:?} of {} must be a string (s)",
                    self.method
                ))
            }),
        }
    }

    /// A boolean option.
    pub fn boolean(&mut self, key: &str) -> Result<Option<bool>> {
        match self.options.remove(key) {
            None => Ok(None),
            Some(v) => bool::try_from(v).map(Some).map_err(|_| {
                Error::InvalidArgument(format!(
                    "option {key:?} of {} must be a boolean (b)",
                    self.method
                ))
            }),
        }
    }

    /// A non-negative integer option, given as any integer type (`y`, `n`, `q`, `i`, `u`, `x`,
    /// `t`): Python and Go send plain integers as `i` or `x`, and a property's value (`i`)
    /// passed back must work too. A negative value is refused.
    pub fn unsigned(&mut self, key: &str) -> Result<Option<u64>> {
        let Some(v) = self.options.remove(key) else {
            return Ok(None);
        };
        let signed = i64::try_from(&v)
            .or_else(|_| i32::try_from(&v).map(i64::from))
            .or_else(|_| i16::try_from(&v).map(i64::from));
        let n = match signed {
            Ok(n) => u64::try_from(n).map_err(|_| {
                Error::InvalidArgument(format!(
                    "option {key:?} of {} is {n}; it must not be negative",
                    self.method
                ))
            })?,
            Err(_) => u64::try_from(&v)
                .or_else(|_| u32::try_from(&v).map(u64::from))
                .or_else(|_| u16::try_from(&v).map(u64::from))
                .or_else(|_| u8::try_from(&v).map(u64::from))
                .map_err(|_| {
                    Error::InvalidArgument(format!(
                        "option {key:?} of {} must be an integer (y, n, q, i, u, x or t)",
                        self.method
                    ))
                })?,
        };
        Ok(Some(n))
    }

    /// Fails if any option was not taken.
    pub fn finish(self, known: &[&str]) -> Result<()> {
        let mut unknown: Vec<&str> = self.options.keys().map(String::as_str).collect();
        if unknown.is_empty() {
            return Ok(());
        }
        unknown.sort_unstable();
        let shown: Vec<String> = unknown
            .iter()
            .take(5)
            .map(|k| format!("{:?}", k.chars().take(40).collect::<String>()))
            .collect();
        Err(Error::InvalidArgument(format!(
            "unknown option(s) {} for {}; known: {}",
            shown.join(", "),
            self.method,
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zbus::Variant;

    fn read(v: Variant<'static>) -> Result<Option<u64>> {
        let mut options = Options::new();
        options.insert("n".into(), v.try_into().expect("owned"));
        OptionReader::new("Test", options).unsigned("n")
    }

    #[test]
    fn integers_of_every_width_and_sign_are_taken() {
        for v in [
            Variant::from(1u8),
            Variant::from(1i16),
            Variant::from(1u16),
            Variant::from(1i32),
            Variant::from(1u32),
            Variant::from(1i64),
            Variant::from(1u64),
        ] {
            let sig = v.value_signature().to_string();
            assert_eq!(read(v).expect(&sig), Some(1), "{sig}");
        }
        assert_eq!(read(Variant::from(u64::MAX)).expect("t"), Some(u64::MAX));
    }

    #[test]
    fn negative_and_non_integers_are_refused() {
        let e = read(Variant::from(-1i32)).expect_err("negative");
        assert!(e.to_string().contains("must not be negative"), "{e}");
        let e = read(Variant::from("1")).expect_err("string");
        assert!(e.to_string().contains("must be an integer"), "{e}");
        let e = read(Variant::from(1.0f64)).expect_err("double");
        assert!(e.to_string().contains("must be an integer"), "{e}");
    }
}
