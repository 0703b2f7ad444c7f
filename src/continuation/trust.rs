//! What a continuation takes only from its own command line. A run
//! directory is data: anyone who can write it (a shared `runs/`, a copy
//! from elsewhere) could otherwise turn the sandbox off (`"executor":
//! "local"`), open it (network, root, disk, workspace) or send the user's
//! API key to a server of theirs (`base_url`). So every setting that
//! loosens the sandbox or decides where the key goes comes from the flags
//! of `runner continue` (or their defaults and environment variables), and
//! the recorded value is only compared with it: a recorded value looser
//! than, or unordered and different from, what the command line gives
//! refuses the continuation, naming the flag that would allow it. A
//! recorded value as strict or stricter is no difference. A flag given on
//! the command line is the user's choice and wins; its difference is said.
//!
//! Model name, limits, tools, prompt and image may come from the record
//! ([`FROM_RECORD`]): the sandbox holds whatever runs in it. The seccomp
//! filter, and a recorded key this runner does not know, are refused
//! unless the continuation would record the same value itself. The header
//! is read typed ([`RecordedSettings`]); a value no runner writes has
//! refused it before (see [`crate::runtime::header::HeaderError`]).

use serde::Serialize;
use serde_json::Value;

use super::settings::SettingsError;
use crate::backend_kind::BackendKind;
use crate::exec::backend::Network;
use crate::runtime::header::{Named, RecordedSettings};

/// How a recorded value is compared with the continuation's.
#[derive(Debug, Clone, Copy)]
enum Order {
    /// Any difference counts.
    Equal,
    /// Strictest first: a recorded value at or before the continuation's
    /// is no difference.
    Rank(&'static [&'static str]),
    /// A number, `null` for unbounded: a recorded value at most the
    /// continuation's is no difference.
    AtMost,
    /// A switch whose `true` loosens (`--writable-rootfs`).
    On,
    /// A switch whose `false` loosens (`--no-default-deny`).
    Off,
    /// A user: root is looser than any other; two others differ.
    User,
    /// Allowlisted hosts: more hosts loosen; with a bridge, none matter.
    Hosts,
}

/// A setting a continuation takes only from its command line.
struct Trusted {
    /// Its key in the header (as [`super::settings::given`] names it).
    key: &'static str,
    flag: &'static str,
    order: Order,
    /// Its value in a header, as recorded; `None` when not recorded.
    value: fn(&RecordedSettings) -> Option<Value>,
}

/// One row of [`TRUSTED`].
const fn row(
    key: &'static str,
    flag: &'static str,
    order: Order,
    value: fn(&RecordedSettings) -> Option<Value>,
) -> Trusted {
    Trusted {
        key,
        flag,
        order,
        value,
    }
}

/// A recorded setting as the JSON value it is recorded as.
fn json<T: Serialize>(v: &Option<T>) -> Option<Value> {
    v.as_ref()
        .map(|v| serde_json::to_value(v).unwrap_or(Value::Null))
}

/// A recorded choice as the name it is recorded as.
fn named<T: Named>(v: &Option<T>) -> Option<Value> {
    v.as_ref().map(|v| Value::from(v.name()))
}

/// The settings a continuation takes only from its command line, and how
/// the recorded value is compared with the command line's.
const TRUSTED: &[Trusted] = &[
    row(
        "executor",
        "--executor",
        Order::Rank(&["docker", "local"]),
        |s| named(&s.executor),
    ),
    row("base_url", "--base-url", Order::Equal, |s| {
        json(&s.base_url)
    }),
    row(
        "network",
        "--network",
        Order::Rank(&["none", "allowlist", "bridge"]),
        |s| named(&s.network),
    ),
    row("allowed_hosts", "--allow-host", Order::Hosts, |s| {
        json(&s.allowed_hosts)
    }),
    row("egress_network", "--egress-network", Order::Equal, |s| {
        json(&s.egress_network)
    }),
    row("user", "--user", Order::User, |s| json(&s.user)),
    row("writable_rootfs", "--writable-rootfs", Order::On, |s| {
        json(&s.writable_rootfs)
    }),
    row("disk_bytes", "--disk", Order::AtMost, |s| {
        json(&s.disk_bytes)
    }),
    row("memory_bytes", "--memory", Order::AtMost, |s| {
        json(&s.memory_bytes)
    }),
    row("cpus", "--cpus", Order::AtMost, |s| json(&s.cpus)),
    row("pids_limit", "--pids-limit", Order::AtMost, |s| {
        json(&s.pids_limit)
    }),
    row(
        "workspace_mode",
        "--workspace-mode",
        Order::Rank(&["copy", "auto", "bind"]),
        |s| named(&s.workspace_mode),
    ),
    row("runtime", "--runtime", Order::Equal, |s| json(&s.runtime)),
    row("keep_background", "--keep-background", Order::On, |s| {
        json(&s.keep_background)
    }),
    row("default_deny", "--no-default-deny", Order::Off, |s| {
        json(&s.default_deny)
    }),
];

/// The settings of a sandbox, which a continuation on the host has none of.
const SANDBOX_ONLY: &[&str] = &[
    "network",
    "allowed_hosts",
    "egress_network",
    "user",
    "writable_rootfs",
    "disk_bytes",
    "memory_bytes",
    "cpus",
    "pids_limit",
    "workspace_mode",
    "runtime",
];

/// Recorded settings a continuation may take as they are.
pub const FROM_RECORD: &[&str] = &[
    "provider",
    "model",
    "script",
    "image",
    "system_prompt",
    "approve",
    "deny",
    "tools",
    "shell",
    "timeout_secs",
    "max_command_timeout_secs",
    "model_timeout_secs",
    "max_steps",
    "max_time_secs",
    "max_cost_usd",
    "max_tokens",
    "context_window_tokens",
    "context_window_auto",
    "tool_choice",
    "stream",
    "output_limit_bytes",
];

/// Recorded settings that are what a run observed rather than a setting
/// it applied (the header's workspace is compared by the caller, see
/// [`workspace`]).
pub const OBSERVED: &[&str] = &["api_key_set", "command_env"];

/// Recorded settings that must be the continuation's own, with no flag to
/// take the recorded one from: `seccomp` (`--seccomp` is the command
/// line's alone, and a recorded filter that is not it refuses).
pub const SAME_OR_REFUSED: &[&str] = &["seccomp"];

/// One recorded setting the continuation would not apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// "the run was started with --executor local; this continuation
    /// would use docker".
    pub says: String,
    /// What to pass to continue with the recorded value, when a flag can.
    pub flag: Option<String>,
}

/// The recorded workspace `recorded` against none given.
pub fn workspace(recorded: &std::path::Path) -> Difference {
    Difference {
        says: format!(
            "the run was started with --workspace {}; this continuation would use none",
            recorded.display()
        ),
        flag: Some(format!("--workspace {}", recorded.display())),
    }
}

/// Compares the run's `recorded` settings with `continuing` (the
/// continuation's own); `given` are the recorded keys whose flag the
/// command line gave, and `found` differences already seen (the
/// workspace). The differences a given flag settles come back as notes to
/// show; any other refuses the continuation.
pub fn check(
    recorded: &RecordedSettings,
    continuing: &RecordedSettings,
    given: &[&str],
    mut found: Vec<Difference>,
) -> Result<Vec<String>, SettingsError> {
    let mut notes = Vec::new();
    let same_api = recorded.provider == continuing.provider;
    let on_host = continuing.executor == Some(BackendKind::Local);
    for t in TRUSTED {
        let (key, flag, order) = (t.key, t.flag, t.order);
        let Some(rec) = (t.value)(recorded) else {
            continue;
        };
        let cur = (t.value)(continuing).unwrap_or(Value::Null);
        // Another API has its own URL; an allowlist is its hosts; on the
        // host (--executor local, given) no sandbox setting applies.
        let moot = (key == "base_url" && !same_api)
            || (on_host && SANDBOX_ONLY.contains(&key))
            || (key == "network" && recorded.network == Some(Network::Allowlist))
            || (key == "allowed_hosts" && continuing.network == Some(Network::Bridge));
        if moot || no_looser(order, &rec, &cur) {
            continue;
        }
        let was = flag_text(flag, order, &rec);
        if given.contains(&key) {
            notes.push(format!(
                "note: the run was started with {was}; this continuation uses {} (given)",
                shown(key, order, &cur)
            ));
            continue;
        }
        found.push(Difference {
            says: format!(
                "the run was started with {was}; this continuation would use {}",
                shown(key, order, &cur)
            ),
            flag: Some(was),
        });
    }
    found.extend(not_its_own(recorded, continuing));
    match SettingsError::differences(found) {
        Some(e) => Err(e),
        None => Ok(notes),
    }
}

/// Recorded settings the continuation neither takes from a record nor
/// compares by order (the seccomp filter, and keys this runner does not
/// know): a difference from what the continuation records itself.
fn not_its_own(recorded: &RecordedSettings, continuing: &RecordedSettings) -> Vec<Difference> {
    let pairs = |s: &RecordedSettings| -> Vec<(String, Value)> {
        let filter = json(&s.seccomp).map(|v| ("seccomp".to_string(), v));
        let unknown = s.other.iter().map(|(k, v)| (k.clone(), v.clone()));
        filter.into_iter().chain(unknown).collect()
    };
    let cur = pairs(continuing);
    let cur = |k: &str| {
        cur.iter()
            .find(|(c, _)| c == k)
            .map_or(Value::Null, |(_, v)| v.clone())
    };
    pairs(recorded)
        .into_iter()
        .filter(|(k, v)| !v.is_null() && cur(k) != *v)
        .map(|(k, v)| Difference {
            says: format!(
                "the run records {k} {v}, which runner continue does not take from a run directory \
                 (this continuation would use {})",
                cur(&k)
            ),
            flag: None,
        })
        .collect()
}

/// Whether the recorded value `rec` is as strict as `cur` or stricter.
fn no_looser(order: Order, rec: &Value, cur: &Value) -> bool {
    if rec == cur {
        return true;
    }
    match order {
        Order::Equal => false,
        Order::Rank(ranks) => {
            let at = |v: &Value| ranks.iter().position(|r| v.as_str() == Some(*r));
            matches!((at(rec), at(cur)), (Some(r), Some(c)) if r <= c)
        }
        Order::AtMost => match (rec.as_f64(), cur.as_f64()) {
            (Some(r), Some(c)) => r <= c,
            (Some(_), None) => cur.is_null(),
            _ => false,
        },
        Order::On => rec == &Value::Bool(false),
        Order::Off => rec == &Value::Bool(true),
        Order::User => {
            let root = |v: &Value| crate::exec::docker::user_is_root(v.as_str().unwrap_or(""));
            !root(rec) && root(cur)
        }
        Order::Hosts => {
            let hosts = |v: &Value| -> Vec<String> {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|h| h.as_str().map(str::to_string))
                    .collect()
            };
            let have = hosts(cur);
            hosts(rec).iter().all(|h| have.contains(h))
        }
    }
}

/// The flag (and value) that gives the recorded `rec`.
fn flag_text(flag: &str, order: Order, rec: &Value) -> String {
    match order {
        Order::On | Order::Off => flag.to_string(),
        Order::Hosts => rec
            .as_array()
            .into_iter()
            .flatten()
            .map(|h| format!("{flag} {}", h.as_str().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join(" "),
        _ if flag == "--disk" && rec.is_null() => "--disk unlimited".into(),
        _ => format!("{flag} {}", plain(rec)),
    }
}

/// The continuation's value `cur` of `key`, for a message.
fn shown(key: &str, order: Order, cur: &Value) -> String {
    match (key, order) {
        ("writable_rootfs", _) => "a read-only root filesystem".into(),
        ("keep_background", _) => "background processes killed after each command".into(),
        ("default_deny", _) => "the default deny list".into(),
        ("disk_bytes", _) if cur.is_null() => "unlimited".into(),
        ("runtime", _) if cur.is_null() => "the engine's default".into(),
        (_, Order::Hosts) => match cur.as_array().map(Vec::as_slice) {
            None | Some([]) => "none".into(),
            Some(hosts) => hosts.iter().map(plain).collect::<Vec<_>>().join(", "),
        },
        _ if cur.is_null() => "none".into(),
        _ => plain(cur),
    }
}

/// A JSON value as a flag's value: strings without their quotes.
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings(v: Value) -> RecordedSettings {
        *crate::runtime::RunHeader::read(&v)
            .expect("a header")
            .settings
    }

    fn refusal(rec: Value, cur: Value, given: &[&str]) -> Option<String> {
        match check(&settings(rec), &settings(cur), given, Vec::new()) {
            Ok(_) => None,
            Err(e) => Some(format!("{e} / {}", e.hint())),
        }
    }

    #[test]
    fn a_recorded_loosening_is_refused_and_a_stricter_one_is_no_difference() {
        let cur = json!({"executor": "docker", "network": "none", "user": "1000:1000",
            "disk_bytes": 100, "writable_rootfs": false, "allowed_hosts": [],
            "default_deny": true, "provider": "anthropic", "base_url": "http://a"});
        for (key, looser, stricter) in [
            ("executor", json!("local"), json!("docker")),
            ("network", json!("bridge"), json!("none")),
            ("user", json!("0:0"), json!("1000:1000")),
            ("disk_bytes", Value::Null, json!(50)),
            ("writable_rootfs", json!(true), json!(false)),
            ("default_deny", json!(false), json!(true)),
            ("allowed_hosts", json!(["x.example"]), json!([])),
            ("base_url", json!("http://b"), json!("http://a")),
        ] {
            let mut rec = cur.clone();
            rec[key] = looser;
            let why = refusal(rec.clone(), cur.clone(), &[]).unwrap_or_default();
            assert!(why.contains("the run was started with --"), "{key}: {why}");
            assert!(why.contains(" / pass --"), "{key}: {why}");
            // Given on the command line: a note, no refusal.
            assert_eq!(refusal(rec, cur.clone(), &[key]), None, "{key}");
            rec = cur.clone();
            rec[key] = stricter;
            assert_eq!(refusal(rec, cur.clone(), &[]), None, "{key}");
        }
        // The other API's URL is not compared; an unknown key is.
        let rec = json!({"provider": "openai", "base_url": "http://b"});
        assert_eq!(refusal(rec, cur.clone(), &[]), None);
        let rec = json!({"privileged": true});
        let why = refusal(rec, cur.clone(), &[]).unwrap_or_default();
        assert!(why.contains("the run records privileged true"), "{why}");
        assert_eq!(
            refusal(
                json!({"seccomp": "runner"}),
                json!({"seccomp": "runner"}),
                &[]
            ),
            None
        );
    }

    #[test]
    fn every_difference_is_in_the_hint() {
        let rec = json!({"executor": "local", "network": "bridge"});
        let cur = json!({"executor": "docker", "network": "none"});
        let why = refusal(rec, cur, &[]).unwrap_or_default();
        assert!(
            why.starts_with(
                "the run was started with --executor local; this continuation would use docker (and 1 more setting differs)"
            ),
            "{why}"
        );
        assert!(
            why.ends_with("pass --executor local --network bridge to continue with them"),
            "{why}"
        );
    }

    /// Every setting a header records has its rule here: a setting added
    /// to the header without one would be neither taken nor compared.
    #[test]
    fn every_recorded_setting_has_one_rule() {
        let config = crate::config::ConfigBuilder::default()
            .build()
            .expect("valid");
        let v = serde_json::to_value(RecordedSettings::of(&config)).expect("json");
        let keys: Vec<&String> = v.as_object().expect("an object").keys().collect();
        assert!(keys.len() > 30, "{keys:?}");
        for key in keys {
            let rules = [
                TRUSTED.iter().any(|t| t.key == key),
                FROM_RECORD.contains(&key.as_str()),
                OBSERVED.contains(&key.as_str()),
                SAME_OR_REFUSED.contains(&key.as_str()),
            ];
            assert_eq!(rules.iter().filter(|r| **r).count(), 1, "{key}: {rules:?}");
        }
        // And each rule reads the setting its key names.
        let rec = settings(v.clone());
        for t in TRUSTED {
            assert_eq!((t.value)(&rec).as_ref(), v.get(t.key), "{}", t.key);
        }
    }

    #[test]
    fn a_recorded_filter_other_than_the_continuations_is_refused() {
        let why = refusal(
            json!({"seccomp": "default"}),
            json!({"seccomp": "runner"}),
            &[],
        )
        .unwrap_or_default();
        assert!(
            why.starts_with(
                "the run records seccomp \"default\", which runner continue does not take from a \
                 run directory (this continuation would use \"runner\")"
            ),
            "{why}"
        );
    }
}
