//! Size limits on what callers send, checked before any work is done for a call: every
//! string argument, every array and the `a{sv} options` dictionary (how many, how long, and
//! only plain values in it). The engine checks content (names, UUIDs); this only bounds size,
//! so that no call can make vgpud allocate or echo much.

use zbus::OwnedVariant;

use super::error::{Error, Result};
use super::options::Options;

/// The longest name argument (type, parent, owner, domain, template): the engine's limit.
pub const NAME: usize = crate::engine::MAX_NAME_LEN;
/// A UUID argument (36 characters; a little slack so the engine can say what is wrong).
pub const UUID: usize = 64;
/// How many UUIDs RenderDomain takes.
pub const UUIDS: usize = 64;
/// How many options a call may carry.
pub const OPTIONS: usize = 32;
/// The longest option name.
pub const OPTION_KEY: usize = 64;
/// The longest string option (a disk image path, `vgpu_params`).
pub const OPTION_STRING: usize = 4096;

/// A string argument of at most `max` bytes.
pub fn string(method: &str, what: &str, value: &str, max: usize) -> Result<()> {
    if value.len() > max {
        return Err(Error::InvalidArgument(format!(
            "{what} of {method} is {} bytes long; at most {max} are accepted",
            value.len()
        )));
    }
    Ok(())
}

/// An array argument of at most `max` strings of at most `each` bytes.
pub fn strings(method: &str, what: &str, values: &[String], max: usize, each: usize) -> Result<()> {
    if values.len() > max {
        return Err(Error::InvalidArgument(format!(
            "{what} of {method} has {} entries; at most {max} are accepted",
            values.len()
        )));
    }
    values
        .iter()
        .try_for_each(|v| string(method, what, v, each))
}

/// The options dictionary: at most [`OPTIONS`] entries, short keys, and plain values only
/// (strings of at most [`OPTION_STRING`] bytes, booleans, numbers).
pub fn options(method: &str, options: &Options) -> Result<()> {
    if options.len() > OPTIONS {
        return Err(Error::InvalidArgument(format!(
            "{method} got {} options; at most {OPTIONS} are accepted",
            options.len()
        )));
    }
    for (key, value) in options {
        string(method, "an option name", key, OPTION_KEY)?;
        plain(method, key, value, option_max(key))?;
    }
    Ok(())
}

/// The longest value of a string option: a name or a UUID is held to its own limit, so a
/// caller's 4 KB owner is refused at the door, before it is asked who it is.
fn option_max(key: &str) -> usize {
    match key {
        "owner" | "parent" | "pool" => NAME,
        "uuid" => UUID,
        _ => OPTION_STRING,
    }
}

fn plain(method: &str, key: &str, value: &OwnedVariant, max: usize) -> Result<()> {
    let sig = value.value_signature().to_string();
    let shown: String = key.chars().take(OPTION_KEY).collect();
    match sig.as_str() {
        "s" => {
            let s: &str = value
                .downcast_ref()
                .map_err(|e| Error::InvalidArgument(format!("option {shown:?}: {e}")))?;
            string(method, &format!("option {shown:?}"), s, max)
        }
        "b" | "y" | "n" | "q" | "i" | "u" | "x" | "t" | "d" => Ok(()),
        _ => Err(Error::InvalidArgument(format!(
            "option {shown:?} of {method} is of type {}; options are strings, booleans or numbers",
            sig.chars().take(16).collect::<String>()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zbus::Variant;

    fn opts(pairs: Vec<(&str, Variant<'static>)>) -> Options {
        pairs
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.try_into().expect("owned")))
            .collect()
    }

    #[test]
    fn plain_options_of_sane_size_pass() {
        let o = opts(vec![
            ("owner", Variant::from("vm1")),
            ("persistent", Variant::from(true)),
            ("numa_node", Variant::from(1i32)),
        ]);
        options("CreateDevice", &o).expect("fine");
    }

    #[test]
    fn huge_many_or_nested_options_are_refused() {
        let big = opts(vec![("disk", Variant::from("x".repeat(OPTION_STRING + 1)))]);
        let e = options("CreateDevice", &big).expect_err("long");
        assert!(e.to_string().contains("at most 4096"), "{e}");
        let many = (0..=OPTIONS)
            .map(|i| {
                (
                    format!("k{i}"),
                    Variant::from(true).try_into().expect("owned"),
                )
            })
            .collect::<Options>();
        assert!(options("CreateDevice", &many).is_err());
        let owner = opts(vec![("owner", Variant::from("o".repeat(NAME + 1)))]);
        let e = options("CreateDevice", &owner).expect_err("an owner past a name's length");
        assert!(e.to_string().contains("at most 256"), "{e}");
        let nested = opts(vec![("owner", Variant::from(vec!["a", "b"]))]);
        let e = options("CreateDevice", &nested).expect_err("array");
        assert!(e.to_string().contains("of type as"), "{e}");
        let key = opts(vec![("k".repeat(100).leak(), Variant::from(true))]);
        assert!(options("CreateDevice", &key).is_err());
    }

    #[test]
    fn arguments_are_bounded() {
        string("RenderDomain", "name", "vm1", NAME).expect("short");
        let e = string("RenderDomain", "name", &"n".repeat(30 << 20), NAME).expect_err("30 MiB");
        assert!(
            e.to_string().len() < 200,
            "the error does not echo the input"
        );
        let uuids = vec!["u".to_string(); UUIDS + 1];
        assert!(strings("RenderDomain", "uuids", &uuids, UUIDS, UUID).is_err());
    }
}
