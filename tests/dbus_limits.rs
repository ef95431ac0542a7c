//! The D-Bus adapter's own size limits on name arguments, seen alone (src/dbus/limits.rs):
//! later layers refuse long names too (the engine at 256 bytes, the domain XML at 200), so
//! a test that only checks for `InvalidArgument` passes even without the adapter's limit.
//! Here every name argument of every method gets:
//!
//! - names of 201–256 bytes, which the adapter must let through (what answers then is a
//!   later layer: the engine, the XML renderer, or success), and
//! - names past the documented limit (docs/api.md, "Limits": "names 256 bytes", layouts and
//!   MIG profiles 64, the name options `owner` and `parent` 256 like names, other string
//!   options 4096),
//!   which the adapter must refuse itself, with its own words:
//!   "WHAT of METHOD is N bytes long; at most MAX are accepted".

mod common;

use std::collections::HashMap;

use zbus::Variant;

use common::proxy::{error_message, error_name, opts, LayoutsProxy, NvidiaProxy};
use common::setup::Setup;

/// The documented limit of names (docs/api.md, "Limits": "names 256 bytes").
const NAME: usize = 256;
/// Layout names and MIG profile names.
const SHORT_NAME: usize = 64;
/// String options.
const OPTION_STRING: usize = 4096;

/// One name argument: method, the argument's name in dbus/org.vgpud1.xml (or `option "KEY"`),
/// and its limit.
const ARGUMENTS: &[(&str, &str, usize)] = &[
    ("CreateDevice", "type", NAME),
    ("GetCapacity", "type", NAME),
    ("GetTypeInfo", "type", NAME),
    ("GetDemand", "type", NAME),
    ("GetForecast", "type", NAME),
    ("AttachDevice", "domain", NAME),
    ("DetachDevice", "domain", NAME),
    ("RenderDomain", "name", NAME),
    ("SetVfCount", "gpu", NAME),
    ("SetHeterogeneousMode", "gpu", NAME),
    ("ListMigProfiles", "gpu", NAME),
    ("SetMigMode", "gpu", NAME),
    ("CreateGpuInstance", "gpu", NAME),
    ("CreateGpuInstance", "profile", SHORT_NAME),
    ("DestroyGpuInstance", "gpu", NAME),
    ("SetScheduler", "gpu", NAME),
    ("GetMetrics", "gpu_or_uuid", NAME),
    ("ApplyLayout", "name", SHORT_NAME),
    ("DiffLayout", "name", SHORT_NAME),
    ("CreateDevice", "option \"parent\"", NAME),
    ("CreateDevice", "option \"owner\"", NAME),
    ("GetCapacity", "option \"parent\"", NAME),
    ("GetTypeInfo", "option \"parent\"", NAME),
    ("RenderDomain", "option \"template\"", OPTION_STRING),
];

const DEV: &str = "a1b2c3d4-0000-4000-8000-000000000001";

/// Calls `method` with `value` as its argument `what`, the other arguments harmless.
async fn call(s: &Setup, method: &str, what: &str, value: &str) -> zbus::Result<()> {
    let m = s.manager().await;
    let n = NvidiaProxy::new(&s.conn).await?;
    let l = LayoutsProxy::new(&s.conn).await?;
    let none = HashMap::<&str, Variant<'_>>::new;
    let option = what
        .strip_prefix("option \"")
        .map(|k| k.trim_end_matches('"'));
    let o = || option.map_or_else(none, |k| opts(&[(k, value)]));
    // The positional name, or a harmless one when the option is what is tested.
    let arg = if option.is_some() { "mtty-1" } else { value };
    match (method, what) {
        ("CreateDevice", _) => m.create_device(arg, o()).await.map(drop),
        ("GetCapacity", _) => m.get_capacity(arg, o()).await.map(drop),
        ("GetTypeInfo", _) => m.get_type_info(arg, o()).await.map(drop),
        ("GetDemand", _) => m.get_demand(arg, o()).await.map(drop),
        ("GetForecast", _) => m.get_forecast(arg, o()).await.map(drop),
        ("AttachDevice", _) => m.attach_device(DEV, value, none()).await,
        ("DetachDevice", _) => m.detach_device(DEV, value, none()).await,
        ("RenderDomain", _) => {
            let name = if option.is_some() { "vm1" } else { value };
            m.render_domain(name, &[], o()).await.map(drop)
        }
        ("SetVfCount", _) => m.set_vf_count(value, 0, none()).await.map(drop),
        ("SetHeterogeneousMode", _) => m.set_heterogeneous_mode(value, false, none()).await,
        ("ListMigProfiles", _) => n.list_mig_profiles(value).await.map(drop),
        ("SetMigMode", _) => n.set_mig_mode(value, false, none()).await.map(drop),
        ("CreateGpuInstance", "gpu") => n
            .create_gpu_instance(value, "1g.10gb", none())
            .await
            .map(drop),
        ("CreateGpuInstance", _) => n.create_gpu_instance("mtty", value, none()).await.map(drop),
        ("DestroyGpuInstance", _) => n.destroy_gpu_instance(value, 1, none()).await,
        ("SetScheduler", _) => n.set_scheduler(value, none()).await.map(drop),
        ("GetMetrics", _) => n.get_metrics(value).await.map(drop),
        ("ApplyLayout", _) => l
            .apply_layout(value, HashMap::from([("dry_run", Variant::from(true))]))
            .await
            .map(drop),
        ("DiffLayout", _) => l.diff_layout(value).await.map(drop),
        _ => panic!("no call for {method} {what}"),
    }
}

/// The adapter's refusal of `what` of `method` at `len` bytes (src/dbus/limits.rs `string`).
fn adapters_words(method: &str, what: &str, len: usize, max: usize) -> String {
    format!("{what} of {method} is {len} bytes long; at most {max} are accepted")
}

#[tokio::test]
async fn the_adapter_refuses_long_names_itself_and_lets_201_to_256_bytes_through() {
    let s = Setup::new(&["mtty"]).await;
    let mut wrong = Vec::new();
    for &(method, what, max) in ARGUMENTS {
        // Within the limit: 201..=256 bytes (the XML layer's 200 and the engine's 256 are
        // below or at it), or just under a smaller limit.
        let within: Vec<usize> = if max == NAME {
            vec![201, 228, 256]
        } else {
            vec![max - 1, max]
        };
        for len in within {
            let value = "n".repeat(len);
            let answer = call(&s, method, what, &value).await;
            if let Err(e) = &answer {
                if error_message(e).contains(&format!("{what} of {method} is ")) {
                    wrong.push(format!(
                        "{method} {what} of {len} bytes (within the limit {max}) refused by the adapter: {}",
                        error_message(e)
                    ));
                }
            }
        }
        // Past the limit: the adapter itself refuses, before any later layer is reached.
        for len in [max + 1, max + 44, 4 * max, 65536] {
            let value = "n".repeat(len);
            match call(&s, method, what, &value).await {
                Ok(()) => wrong.push(format!("{method} {what} of {len} bytes accepted")),
                Err(e) => {
                    let expected = adapters_words(method, what, len, max);
                    if error_name(&e) != "org.vgpud1.Error.InvalidArgument"
                        || error_message(&e) != expected
                    {
                        wrong.push(format!(
                            "{method} {what} of {len} bytes: expected the adapter's \
                             InvalidArgument {expected:?}, got {}: {}",
                            error_name(&e),
                            error_message(&e)
                        ));
                    }
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the D-Bus adapter's name limits:\n{}",
        wrong.join("\n")
    );
}
