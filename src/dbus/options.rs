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

    /// An unsigned integer option, given as `u` or `t`.
    pub fn unsigned(&mut self, key: &str) -> Result<Option<u64>> {
        match self.options.remove(key) {
            None => Ok(None),
            Some(v) => {
                let n = u32::try_from(&v)
                    .map(u64::from)
                    .or_else(|_| u64::try_from(&v));
                n.map(Some).map_err(|_| {
                    Error::InvalidArgument(format!(
                        "option {key:?} of {} must be an unsigned integer (u or t)",
                        self.method
                    ))
                })
            }
        }
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
