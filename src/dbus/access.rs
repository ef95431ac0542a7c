//! Who may do what: every method of `org.vgpud1.Manager` names one polkit action
//! ([`Action`]), and [`Access::admit`] asks polkit whether the caller (by its bus name) may
//! take it. Without polkitd on the bus, root is allowed and everyone else is refused with an
//! error that says why. Answers are kept for a few seconds per caller and action, so a
//! storm of calls from one broker costs one question to polkit, not one per call.
//!
//! The caller's identity (uid, pid, systemd unit) is read once per connection from the bus
//! (`GetConnectionCredentials`), for the refusal messages and the audit log.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zbus::message::{Flags, Header};
use zbus::Connection;
use zbus_polkit::policykit1::{AuthorityProxy, CheckAuthorizationFlags, Subject};

use super::error::{Error, Result};

/// The polkit actions of `dbus/org.vgpud1.policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Lists, properties, capacity, type details, rendered XML.
    Read,
    /// Create, remove, start, stop, modify, attach, detach.
    ManageDevices,
    /// VF counts, vGPU modes, MIG, the scheduler, layouts.
    ConfigureHost,
}

impl Action {
    /// The polkit action id.
    pub fn id(self) -> &'static str {
        match self {
            Action::Read => "org.vgpud1.read",
            Action::ManageDevices => "org.vgpud1.manage-devices",
            Action::ConfigureHost => "org.vgpud1.configure-host",
        }
    }
}

/// The action each method of `org.vgpud1.Manager` needs, and the property reads of every
/// object (`Properties.Get`, `GetAll`, `ObjectManager.GetManagedObjects`, through
/// [`call_guard`]). A method missing here needs the strictest action, so a new method is
/// never open by mistake (a test checks the list against the introspection data).
pub fn action_of(method: &str) -> Action {
    match method {
        "ListGpus" | "ListTypes" | "ListDevices" | "GetCapacity" | "GetTypeInfo"
        | "GetHostdevXml" | "RenderHostdevXml" | "RenderDomain" | "ListMigProfiles"
        | "GetMetrics" | "ListLayouts" | "DiffLayout" | "GetDemand" | "GetForecast" => Action::Read,
        "Get" | "GetAll" | "GetManagedObjects" => Action::Read,
        "CreateDevice" | "RemoveDevice" | "ModifyDevice" | "StartDevice" | "StopDevice"
        | "AttachDevice" | "DetachDevice" => Action::ManageDevices,
        _ => Action::ConfigureHost,
    }
}

/// Who called, as the bus says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// The unique bus name (`:1.42`).
    pub name: String,
    /// The caller's uid.
    pub uid: Option<u32>,
    /// The caller's process id.
    pub pid: Option<u32>,
    /// The systemd unit the caller's process runs in, if any.
    pub unit: Option<String>,
}

/// How long an answer of polkit (or root's yes, without polkitd) is kept for a connection
/// and an action, a no too, so that a flood of refused calls asks polkit once per
/// connection, not once per call. A call that allows interactive authorization asks every
/// time (the user may authenticate now); only a yes it gets is kept.
const KEEP: Duration = Duration::from_secs(5);
/// At most this many answers are kept; past it, expired ones are dropped first.
const KEEP_MAX: usize = 4096;
/// How long a connection's credentials are kept: they cannot change while it lives, and
/// asking the bus again under a flood would make every call wait for the flooded bus.
const CALLER_KEEP: Duration = Duration::from_secs(300);

/// What polkit answered for a connection and an action (kept for [`KEEP`]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Yes,
    /// Authenticating would lift the refusal.
    Challenge,
    No,
    /// polkitd could not be asked (why), and the caller is not root.
    NoPolkit(String),
}

impl Answer {
    /// The answer to a call of `method`: its refusal names the method and the caller.
    fn result(self, method: &str, action: Action, caller: &Caller) -> Result<()> {
        match self {
            Answer::Yes => Ok(()),
            Answer::Challenge => Err(Error::interactive_authorization_required(format!(
                "{method} needs {}, which {} can get by authenticating: call again allowing interactive authorization",
                action.id(),
                describe(caller)
            ))),
            Answer::No => Err(Error::access_denied(format!(
                "{} is not authorized for {} ({method}); see polkit's rules for org.vgpud1, or add the user to the group vgpud",
                describe(caller),
                action.id()
            ))),
            Answer::NoPolkit(why) => Err(Error::access_denied(format!(
                "{method} needs {}, and polkit cannot be asked ({why}): only root may call vgpud without polkitd; {} is not root",
                action.id(),
                describe(caller)
            ))),
        }
    }
}

/// One question to polkit, shared by the calls that wait for its answer.
type PendingAnswer = Arc<tokio::sync::OnceCell<Answer>>;

/// The authorization check shared by every method.
pub struct Access {
    conn: Connection,
    answers: Mutex<HashMap<(String, Action), (Instant, Answer)>>,
    /// Questions to polkit under way, one per connection and action.
    asking: Mutex<HashMap<(String, Action), PendingAnswer>>,
    callers: Mutex<HashMap<String, (Instant, Caller)>>,
    /// Lookups of credentials under way, one per connection: the calls a connection pipelines
    /// before its credentials are known wait for one question to the bus, not one each.
    looking_up: Mutex<HashMap<String, Arc<tokio::sync::OnceCell<Caller>>>>,
    authority: Mutex<Option<AuthorityProxy<'static>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The value of `ask` for `key`, asked once for all who want it at the same time: the
/// first starts it, the others wait for its answer. Whoever finds the question still open
/// when it is answered closes it and hands the answer to `kept` (to keep it for later).
async fn once_per_key<
    K: std::hash::Hash + Eq + Clone,
    V: Clone,
    F: std::future::Future<Output = V>,
>(
    pending: &Mutex<HashMap<K, Arc<tokio::sync::OnceCell<V>>>>,
    key: K,
    ask: impl FnOnce() -> F,
    kept: impl FnOnce(&V),
) -> V {
    let cell = {
        let mut pending = lock(pending);
        if pending.len() >= KEEP_MAX {
            pending.clear();
        }
        pending.entry(key.clone()).or_default().clone()
    };
    let value = cell.get_or_init(ask).await.clone();
    let mut open = lock(pending);
    if open.get(&key).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
        open.remove(&key);
        drop(open);
        kept(&value);
    }
    value
}

/// Keeps `value` for `key`, dropping expired entries when the map is full.
fn keep<K: std::hash::Hash + Eq, V>(map: &mut HashMap<K, (Instant, V)>, key: K, value: V) {
    if map.len() >= KEEP_MAX {
        map.retain(|_, (at, _)| at.elapsed() < KEEP);
        if map.len() >= KEEP_MAX {
            map.clear();
        }
    }
    map.insert(key, (Instant::now(), value));
}

impl Access {
    /// Checks callers on `conn`, the bus vgpud serves on (polkitd is on the same bus).
    pub fn new(conn: Connection) -> Self {
        Access {
            conn,
            answers: Mutex::new(HashMap::new()),
            asking: Mutex::new(HashMap::new()),
            callers: Mutex::new(HashMap::new()),
            looking_up: Mutex::new(HashMap::new()),
            authority: Mutex::new(None),
        }
    }

    /// Lets the call in if its caller may take the method's action; the caller otherwise
    /// gets `AccessDenied`, or `InteractiveAuthorizationRequired` when polkit would ask a
    /// password and the call did not allow interaction.
    pub async fn admit(&self, header: &Header<'_>, caller: &Caller, method: &str) -> Result<()> {
        let action = action_of(method);
        if caller.name.is_empty() {
            // A peer-to-peer connection (no bus): only vgpud's own tests make those.
            return Ok(());
        }
        let interactive = header
            .primary()
            .flags()
            .contains(Flags::ALLOW_INTERACTIVE_AUTH);
        let answer = if interactive {
            // The user may authenticate now: asked every time; only a yes is kept.
            let answer = self.ask(header, action, caller, true).await;
            if answer == Answer::Yes {
                keep(
                    &mut lock(&self.answers),
                    (caller.name.clone(), action),
                    answer.clone(),
                );
            }
            answer
        } else {
            self.answer(header, action, caller).await
        };
        answer.result(method, action, caller)
    }

    /// The kept answer for the caller's connection and `action`, else polkit's, asked once
    /// for all the calls of the connection that want it at the same time.
    async fn answer(&self, header: &Header<'_>, action: Action, caller: &Caller) -> Answer {
        let key = (caller.name.clone(), action);
        let kept = lock(&self.answers)
            .get(&key)
            .filter(|(at, _)| at.elapsed() < KEEP)
            .map(|(_, a)| a.clone());
        if let Some(answer) = kept {
            return answer;
        }
        once_per_key(
            &self.asking,
            key.clone(),
            || self.ask(header, action, caller, false),
            |answer| keep(&mut lock(&self.answers), key.clone(), answer.clone()),
        )
        .await
    }

    /// Asks polkit whether `caller` may take `action` (root may without polkitd).
    async fn ask(
        &self,
        header: &Header<'_>,
        action: Action,
        caller: &Caller,
        interactive: bool,
    ) -> Answer {
        match self.ask_polkit(header, action, interactive).await {
            Ok(result) if result.is_authorized => Answer::Yes,
            Ok(result) if result.is_challenge && !interactive => Answer::Challenge,
            Ok(_) => Answer::No,
            Err(_) if caller.uid == Some(0) => Answer::Yes,
            Err(why) => Answer::NoPolkit(why),
        }
    }

    async fn ask_polkit(
        &self,
        header: &Header<'_>,
        action: Action,
        interactive: bool,
    ) -> std::result::Result<zbus_polkit::policykit1::AuthorizationResult, String> {
        let subject = Subject::new_for_message_header(header).map_err(|e| e.to_string())?;
        let authority = self.authority().await.map_err(|e| e.to_string())?;
        let flags = if interactive {
            CheckAuthorizationFlags::ALLOW_USER_INTERACTION
        } else {
            CheckAuthorizationFlags::empty()
        };
        authority
            .check_authorization(&subject, action.id(), &HashMap::new(), flags, "")
            .await
            .map_err(|e| why_polkit_failed(&e))
    }

    /// polkit's authority, made once (without the property cache a proxy makes by default,
    /// which would cost a call of its own).
    async fn authority(&self) -> zbus::Result<AuthorityProxy<'static>> {
        if let Some(a) = lock(&self.authority).clone() {
            return Ok(a);
        }
        let a = AuthorityProxy::builder(&self.conn)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await?;
        *lock(&self.authority) = Some(a.clone());
        Ok(a)
    }

    /// The caller of a message, from the bus's credentials of its connection.
    pub async fn caller(&self, header: &Header<'_>) -> Caller {
        let Some(name) = header.sender().map(|s| s.to_string()) else {
            return Caller::default();
        };
        if let Some(c) = self.cached_caller(header) {
            return c;
        }
        once_per_key(
            &self.looking_up,
            name.clone(),
            || self.look_up(name.clone()),
            |caller| keep(&mut lock(&self.callers), name.clone(), caller.clone()),
        )
        .await
    }

    /// The caller of a message when its connection's credentials are known already.
    pub fn cached_caller(&self, header: &Header<'_>) -> Option<Caller> {
        let name = header.sender()?;
        lock(&self.callers)
            .get(name.as_str())
            .filter(|(at, _)| at.elapsed() < CALLER_KEEP)
            .map(|(_, c)| c.clone())
    }

    /// Asks the bus for the credentials of the connection `name`.
    async fn look_up(&self, name: String) -> Caller {
        let mut caller = Caller {
            name,
            ..Caller::default()
        };
        let dbus = zbus::fdo::DBusProxy::builder(&self.conn)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await;
        if let Ok(dbus) = dbus {
            if let Ok(bus_name) = zbus::names::BusName::try_from(caller.name.as_str()) {
                if let Ok(creds) = dbus.get_connection_credentials(bus_name).await {
                    caller.uid = creds.unix_user_id();
                    caller.pid = creds.process_id();
                }
            }
        }
        caller.unit = caller.pid.and_then(unit_of);
        caller
    }
}

/// The check of the calls zbus answers on its own: `org.freedesktop.DBus.Properties` (`Get`
/// and `GetAll` read, `Set` needs the strictest action) and `ObjectManager.GetManagedObjects`
/// go through [`Access::admit`] like the methods, and are refused with the same errors.
/// Introspection and `Peer` stay open; `org.vgpud1` methods admit their callers themselves.
pub fn call_guard(access: std::sync::Arc<Access>) -> zbus::object_server::CallGuard {
    std::sync::Arc::new(move |msg: zbus::Message| {
        let access = access.clone();
        Box::pin(async move {
            let header = msg.header();
            let member = header.member().map(|m| m.to_string()).unwrap_or_default();
            let guarded = match header.interface().map(|i| i.as_str()) {
                Some("org.freedesktop.DBus.Properties") => true,
                Some("org.freedesktop.DBus.ObjectManager") => member == "GetManagedObjects",
                _ => false,
            };
            if guarded {
                let caller = access.caller(&header).await;
                access
                    .admit(&header, &caller, &member)
                    .await
                    .map_err(|e| Box::new(e) as zbus::BoxDBusError)?;
            }
            Ok(())
        })
    })
}

/// The bound on calls in flight, checked for every method call (the standard interfaces'
/// too) as it is read, before a task is started for it: a call of a known caller takes a
/// slot of its uid's budget ([`CALLS`]), a call of a connection whose credentials are not
/// known yet one of its connection's ([`WAITING`]). A call past its budget is answered
/// `Busy` at once, and the answer is queued without holding up the calls read after it; so
/// a flood of calls, refused ones included, holds a bounded amount of memory, and root's
/// calls behind it are read and answered while the flood's answers wait for the bus.
pub fn dispatch_limit(access: std::sync::Arc<Access>) -> zbus::object_server::DispatchLimit {
    std::sync::Arc::new(move |msg: &zbus::Message| {
        let header = msg.header();
        let caller = access.cached_caller(&header);
        let slot: Result<Box<dyn std::any::Any + Send>> = match (&caller, header.sender()) {
            (Some(caller), _) => CALLS.take_for(caller).map(|s| Box::new(s) as _),
            (None, Some(name)) => WAITING
                .take_waiting(name.as_str())
                .map(|s| Box::new(s) as _),
            // A peer-to-peer connection (no bus): only vgpud's own tests make those.
            (None, None) => Ok(Box::new(())),
        };
        slot.map_err(|busy| {
            let method = header.member().map(|m| m.as_str()).unwrap_or_default();
            if action_of(method) != Action::Read {
                // Rate-limited per uid (see `audit::refused`): a flood costs a count.
                let caller = caller.unwrap_or_default();
                let cause = crate::engine::Cause {
                    method: method.chars().take(64).collect(),
                    uid: caller.uid,
                    pid: caller.pid,
                    unit: caller.unit,
                };
                crate::audit::refused(&cause, "", busy.name(), &busy.message());
            }
            Box::new(busy) as zbus::BoxDBusError
        })
    })
}

/// How many calls of one user (by uid) may be in flight at once. A call past it is answered
/// `Busy` at once, before any work is done for it, so a flood of calls (refused ones
/// included) costs vgpud a bounded amount of memory and time however many are sent.
pub const CALLS_PER_UID: usize = 64;
/// Root's own budget: its calls never count against the others', so others cannot starve
/// it, and a broker running as root may storm (the engine queues its calls fairly).
pub const CALLS_OF_ROOT: usize = 1024;
/// How many calls may be in flight at once when a user other than root starts one (root's
/// count with the others': root's own bound is [`CALLS_OF_ROOT`]).
pub const CALLS_OF_OTHERS: usize = 2048;
/// How many calls of one connection may be in flight while its credentials are asked of
/// the bus (its first calls, pipelined); the rest are answered `Busy` at once. The system
/// bus lets a connection await 128 replies at most, so there this never refuses a call.
pub const WAITING_PER_CONNECTION: usize = 128;
/// How many calls of all connections may be in flight before their credentials are known.
pub const WAITING_ALL: usize = 1024;

/// Calls in flight, counted per key (a uid, or a connection), with a bound on all of them.
pub struct CallBudget<K> {
    in_flight: Mutex<(BTreeMap<K, usize>, usize)>,
}

/// The calls in flight per uid (`None`: credentials unknown, one shared budget).
pub static CALLS: CallBudget<Option<u32>> = CallBudget::new();
/// The calls waiting for their connection's credentials, per connection.
pub static WAITING: CallBudget<String> = CallBudget::new();

/// One call in flight, counted against its key until dropped.
pub struct CallSlot<K: Ord + 'static> {
    budget: &'static CallBudget<K>,
    key: K,
}

impl<K: Ord + Clone> CallBudget<K> {
    /// An empty budget.
    pub const fn new() -> Self {
        CallBudget {
            in_flight: Mutex::new((BTreeMap::new(), 0)),
        }
    }

    /// A slot for one more call of `key`, or `None` when `key` has `each` in flight or all
    /// keys together have `all`.
    pub fn take(&'static self, key: &K, each: usize, all: usize) -> Option<CallSlot<K>> {
        let mut guard = lock(&self.in_flight);
        let (map, total) = &mut *guard;
        let n = map.entry(key.clone()).or_insert(0);
        if *n >= each || *total >= all {
            if *n == 0 {
                map.remove(key);
            }
            return None;
        }
        *n += 1;
        *total += 1;
        Some(CallSlot {
            budget: self,
            key: key.clone(),
        })
    }

    /// How many calls of `key` are in flight.
    pub fn in_flight(&self, key: &K) -> usize {
        lock(&self.in_flight).0.get(key).copied().unwrap_or(0)
    }
}

impl CallBudget<Option<u32>> {
    /// A slot for one more call of `caller`, or `Busy` when its uid has its limit in flight
    /// ([`CALLS_OF_ROOT`] for root, [`CALLS_PER_UID`] for any other).
    /// All users but root share a bound too ([`CALLS_OF_OTHERS`]), so that many users'
    /// floods together stay bounded.
    pub fn take_for(&'static self, caller: &Caller) -> Result<CallSlot<Option<u32>>> {
        let (limit, all) = if caller.uid == Some(0) {
            (CALLS_OF_ROOT, usize::MAX)
        } else {
            (CALLS_PER_UID, CALLS_OF_OTHERS)
        };
        // Short: under a flood, every one of these answers crosses the bus.
        let who = caller
            .uid
            .map_or_else(|| "a caller".to_string(), |u| format!("uid {u}"));
        self.take(&caller.uid, limit, all).ok_or_else(|| {
            Error::Busy(format!(
                "{who} has {limit} calls in flight (or all users {CALLS_OF_OTHERS}); call again when one is answered"
            ))
        })
    }
}

impl CallBudget<String> {
    /// A slot for one more call of the connection `name` waiting for its credentials, or
    /// `Busy`.
    pub fn take_waiting(&'static self, name: &str) -> Result<CallSlot<String>> {
        self.take(&name.to_string(), WAITING_PER_CONNECTION, WAITING_ALL)
            .ok_or_else(|| {
                Error::Busy(format!(
                    "{} has {WAITING_PER_CONNECTION} calls in flight (or all new connections {WAITING_ALL}); call again when one is answered",
                    name.chars().take(32).collect::<String>()
                ))
            })
    }
}

impl<K: Ord + Clone> Default for CallBudget<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Ord + 'static> Drop for CallSlot<K> {
    fn drop(&mut self) {
        let mut guard = lock(&self.budget.in_flight);
        let (map, total) = &mut *guard;
        *total = total.saturating_sub(1);
        if let Some(n) = map.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// A caller in a message: `uid 1000 (pid 4242, unit ovirt-vdsm.service)`.
pub fn describe(c: &Caller) -> String {
    let uid = c
        .uid
        .map_or("an unknown user".to_string(), |u| format!("uid {u}"));
    match (&c.pid, &c.unit) {
        (Some(pid), Some(unit)) => format!("{uid} (pid {pid}, unit {unit})"),
        (Some(pid), None) => format!("{uid} (pid {pid})"),
        _ => uid,
    }
}

/// Why polkit could not be asked: its absence in words, any other error as it is. zbus
/// reports the bus's own error names as `Error::FDO`.
fn why_polkit_failed(e: &zbus::Error) -> String {
    match e {
        zbus::Error::FDO(f)
            if matches!(
                **f,
                zbus::fdo::Error::ServiceUnknown(_) | zbus::fdo::Error::NameHasNoOwner(_)
            ) =>
        {
            "org.freedesktop.PolicyKit1 is not on the bus".to_string()
        }
        _ => e.to_string(),
    }
}

/// The systemd unit of a process, from the last component of its cgroup path
/// (`0::/system.slice/vdsmd.service` → `vdsmd.service`).
fn unit_of(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    unit_from_cgroup(&text)
}

fn unit_from_cgroup(text: &str) -> Option<String> {
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    path.rsplit('/')
        .find(|c| {
            [".service", ".scope", ".slice"]
                .iter()
                .any(|s| c.ends_with(s))
        })
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/api.md's "Who may do what", by hand: every method of the API and the property reads.
    /// (tests/authorization_spec.rs checks the same against the introspection data and the
    /// real polkitd.)
    #[test]
    fn every_method_has_an_action_and_unknown_ones_get_the_strictest() {
        let read = [
            "ListGpus",
            "ListTypes",
            "ListDevices",
            "GetCapacity",
            "GetTypeInfo",
            "GetHostdevXml",
            "RenderHostdevXml",
            "RenderDomain",
            "ListMigProfiles",
            "GetMetrics",
            "ListLayouts",
            "DiffLayout",
            "GetDemand",
            "GetForecast",
            "Get",
            "GetAll",
            "GetManagedObjects",
        ];
        let manage = [
            "CreateDevice",
            "RemoveDevice",
            "ModifyDevice",
            "StartDevice",
            "StopDevice",
            "AttachDevice",
            "DetachDevice",
        ];
        let configure = [
            "SetVfCount",
            "SetHeterogeneousMode",
            "SetMigMode",
            "CreateGpuInstance",
            "DestroyGpuInstance",
            "SetScheduler",
            "ApplyLayout",
            "Set",
            "SomethingNew",
            "",
        ];
        for (methods, action) in [
            (&read[..], Action::Read),
            (&manage[..], Action::ManageDevices),
            (&configure[..], Action::ConfigureHost),
        ] {
            for m in methods {
                assert_eq!(action_of(m), action, "{m}");
            }
        }
    }

    #[test]
    fn the_action_ids_are_the_policy_files() {
        let policy = include_str!("../../polkit/org.vgpud1.policy");
        let ids = [
            (Action::Read, "org.vgpud1.read"),
            (Action::ManageDevices, "org.vgpud1.manage-devices"),
            (Action::ConfigureHost, "org.vgpud1.configure-host"),
        ];
        for (action, id) in ids {
            assert_eq!(action.id(), id);
            assert!(policy.contains(&format!("<action id=\"{id}\">")), "{id}");
        }
    }

    /// Two calls that want the same answer at once ask once; the answer is handed to `kept`
    /// once and the question closed; a full table of open questions is emptied, not grown.
    #[tokio::test]
    async fn concurrent_asks_for_one_key_ask_once_and_open_questions_are_bounded() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let pending: Mutex<HashMap<u32, Arc<tokio::sync::OnceCell<u32>>>> = Mutex::default();
        let (asked, kept) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let (answer, answered) = tokio::sync::watch::channel(false);
        let ask = || async {
            asked.fetch_add(1, Ordering::SeqCst);
            let _ = answered.clone().wait_for(|a| *a).await;
            7
        };
        let keep_it = |v: &u32| {
            assert_eq!(*v, 7);
            kept.fetch_add(1, Ordering::SeqCst);
        };
        let answer_later = async {
            tokio::task::yield_now().await;
            answer.send(true).expect("the askers wait");
        };
        let (first, second, ()) = tokio::join!(
            once_per_key(&pending, 1, ask, keep_it),
            once_per_key(&pending, 1, ask, keep_it),
            answer_later
        );
        assert_eq!((first, second), (7, 7));
        assert_eq!(
            asked.load(Ordering::SeqCst),
            1,
            "the second waits for the first's question"
        );
        assert_eq!(kept.load(Ordering::SeqCst), 1, "the answer is kept once");
        assert!(lock(&pending).is_empty(), "the question is closed");

        // KEEP_MAX questions left open (their askers went): the next one empties the table.
        for k in 0..KEEP_MAX as u32 {
            lock(&pending).insert(k + 100, Arc::default());
        }
        let v = once_per_key(&pending, 2, || async { 3 }, |_| {}).await;
        assert_eq!(v, 3);
        assert!(
            lock(&pending).is_empty(),
            "{} left open",
            lock(&pending).len()
        );
    }

    #[test]
    fn kept_answers_are_bounded_and_expired_ones_go_first() {
        let mut map: HashMap<u32, (Instant, bool)> = HashMap::new();
        keep(&mut map, 1, true);
        keep(&mut map, 2, false);
        assert_eq!(map.len(), 2, "below the bound, nothing is dropped");
        assert_eq!(map.get(&2).map(|e| e.1), Some(false));
        // Full, half of it expired: the expired half goes, the fresh half stays.
        let old = Instant::now()
            .checked_sub(KEEP * 2)
            .expect("a clock past 10 s");
        map.clear();
        for k in 0..KEEP_MAX as u32 {
            let at = if k % 2 == 0 { old } else { Instant::now() };
            map.insert(k, (at, true));
        }
        keep(&mut map, u32::MAX, true);
        assert_eq!(map.len(), KEEP_MAX / 2 + 1);
        assert!(map.contains_key(&1) && !map.contains_key(&0));
        assert!(map.contains_key(&u32::MAX));
        // Full of fresh answers: all go, so the map never grows past the bound.
        keep(&mut map, u32::MAX - 1, true);
        for k in 0..KEEP_MAX as u32 {
            map.insert(k, (Instant::now(), true));
        }
        assert!(map.len() >= KEEP_MAX);
        keep(&mut map, u32::MAX - 2, true);
        assert_eq!(map.len(), 1);
    }

    #[test]
    fn polkits_absence_is_named_and_other_errors_are_kept() {
        use zbus::fdo::Error as Fdo;
        for absent in [
            Fdo::ServiceUnknown("no .service file".into()),
            Fdo::NameHasNoOwner("no owner".into()),
        ] {
            assert_eq!(
                why_polkit_failed(&zbus::Error::FDO(Box::new(absent))),
                "org.freedesktop.PolicyKit1 is not on the bus"
            );
        }
        let other = why_polkit_failed(&zbus::Error::FDO(Box::new(Fdo::NoReply("late".into()))));
        assert!(
            other.contains("NoReply") && other.contains("late"),
            "{other}"
        );
        assert_eq!(
            why_polkit_failed(&zbus::Error::InvalidReply),
            zbus::Error::InvalidReply.to_string()
        );
    }

    #[test]
    fn the_unit_is_read_from_the_unified_cgroup() {
        assert_eq!(
            unit_from_cgroup("0::/system.slice/vdsmd.service\n").as_deref(),
            Some("vdsmd.service")
        );
        assert_eq!(
            unit_from_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n").as_deref(),
            Some("session-3.scope")
        );
        assert_eq!(unit_from_cgroup("0::/\n"), None);
        assert_eq!(unit_from_cgroup("12:pids:/x\n"), None);
    }

    #[test]
    fn a_uid_past_its_calls_in_flight_is_busy_and_root_has_its_own_budget() {
        static BUDGET: CallBudget<Option<u32>> = CallBudget::new();
        let nobody = Caller {
            name: ":1.9".into(),
            uid: Some(65534),
            ..Caller::default()
        };
        let root = Caller {
            name: ":1.10".into(),
            uid: Some(0),
            ..Caller::default()
        };
        let mut held: Vec<_> = (0..CALLS_PER_UID)
            .map(|_| BUDGET.take_for(&nobody).expect("within the budget"))
            .collect();
        let e = BUDGET.take_for(&nobody).err().expect("past the budget");
        assert_eq!(e.name(), "org.vgpud1.Error.Busy");
        assert!(
            e.message().contains("uid 65534 has 64 calls"),
            "{}",
            e.message()
        );
        // Root is not starved by nobody's calls, nor is another connection of nobody's
        // counted apart from the first.
        let roots: Vec<_> = (0..CALLS_OF_ROOT)
            .map(|_| BUDGET.take_for(&root).expect("root's own budget"))
            .collect();
        assert!(BUDGET.take_for(&root).is_err());
        drop(roots);
        assert_eq!(BUDGET.in_flight(&Some(0)), 0);
        // A call answered frees its slot.
        held.pop();
        let again = BUDGET.take_for(&nobody).expect("a slot was freed");
        assert_eq!(BUDGET.in_flight(&Some(65534)), CALLS_PER_UID);
        drop(again);
        drop(held);
        assert_eq!(BUDGET.in_flight(&Some(65534)), 0);
    }

    #[test]
    fn few_calls_of_a_connection_wait_for_its_credentials_and_all_are_bounded() {
        static WAIT: CallBudget<String> = CallBudget::new();
        let first: Vec<_> = (0..WAITING_PER_CONNECTION)
            .map(|_| WAIT.take_waiting(":1.7").expect("waits"))
            .collect();
        let e = WAIT.take_waiting(":1.7").err().expect("past the bound");
        assert_eq!(e.name(), "org.vgpud1.Error.Busy");
        // Another connection has its own, within the bound on all.
        let other = WAIT.take_waiting(":1.8").expect("another connection");
        assert!(WAIT
            .take(&":1.9".to_string(), 10, WAITING_PER_CONNECTION + 1)
            .is_none());
        drop((first, other));
        assert_eq!(WAIT.in_flight(&":1.7".to_string()), 0);
    }

    #[test]
    fn callers_are_described_with_what_is_known() {
        let mut c = Caller {
            name: ":1.2".into(),
            uid: Some(1000),
            pid: Some(42),
            unit: Some("vdsmd.service".into()),
        };
        assert_eq!(describe(&c), "uid 1000 (pid 42, unit vdsmd.service)");
        c.unit = None;
        assert_eq!(describe(&c), "uid 1000 (pid 42)");
        c.uid = None;
        c.pid = None;
        assert_eq!(describe(&c), "an unknown user");
    }
}
