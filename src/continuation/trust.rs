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
//! ([`FROM_RECORD`]): the sandbox holds whatever runs in it. A recorded key
//! this runner does not know is refused unless the continuation would
//! record the same value itself.

use serde_json::Value;

use super::settings::SettingsError;

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

/// The settings a continuation takes only from its command line: the
/// recorded key, its flag, and how the two are compared.
const TRUSTED: &[(&str, &str, Order)] = &[
    ("executor", "--executor", Order::Rank(&["docker", "local"])),
    ("base_url", "--base-url", Order::Equal),
    (
        "network",
        "--network",
        Order::Rank(&["none", "allowlist", "bridge"]),
    ),
    ("allowed_hosts", "--allow-host", Order::Hosts),
    ("egress_network", "--egress-network", Order::Equal),
    ("user", "--user", Order::User),
    ("writable_rootfs", "--writable-rootfs", Order::On),
    ("disk_bytes", "--disk", Order::AtMost),
    ("memory_bytes", "--memory", Order::AtMost),
    ("cpus", "--cpus", Order::AtMost),
    ("pids_limit", "--pids-limit", Order::AtMost),
    (
        "workspace_mode",
        "--workspace-mode",
        Order::Rank(&["copy", "auto", "bind"]),
    ),
    ("runtime", "--runtime", Order::Equal),
    ("keep_background", "--keep-background", Order::On),
    ("default_deny", "--no-default-deny", Order::Off),
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

/// What a run records about itself rather than a setting it applied (the
/// workspace is compared by the caller, see [`workspace`]).
const OBSERVED: &[&str] = &[
    "api_key_set",
    "command_env",
    "workspace",
    "scratch_workspace",
    "loosenings",
    "sandbox_security",
];

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

/// Compares the run's `recorded` configuration with `continuing` (the
/// continuation's own [`Config::public_json`]); `given` are the recorded
/// keys whose flag the command line gave, and `found` differences already
/// seen (the workspace). The differences a given flag settles come back
/// as notes to show; any other refuses the continuation.
///
/// [`Config::public_json`]: crate::config::Config::public_json
pub fn check(
    recorded: &Value,
    continuing: &Value,
    given: &[&str],
    mut found: Vec<Difference>,
) -> Result<Vec<String>, SettingsError> {
    let mut notes = Vec::new();
    let same_api = recorded.get("provider") == continuing.get("provider");
    let on_host = continuing["executor"] == "local";
    for &(key, flag, order) in TRUSTED {
        let Some(rec) = recorded.get(key) else {
            continue;
        };
        let cur = continuing.get(key).unwrap_or(&Value::Null);
        // Another API has its own URL; an allowlist is its hosts; on the
        // host (--executor local, given) no sandbox setting applies.
        let moot = (key == "base_url" && !same_api)
            || (on_host && SANDBOX_ONLY.contains(&key))
            || (key == "network" && rec == "allowlist")
            || (key == "allowed_hosts" && continuing["network"] == "bridge");
        if moot || no_looser(order, rec, cur) {
            continue;
        }
        let was = flag_text(flag, order, rec);
        if given.contains(&key) {
            notes.push(format!(
                "note: the run was started with {was}; this continuation uses {} (given)",
                shown(key, order, cur)
            ));
            continue;
        }
        found.push(Difference {
            says: format!(
                "the run was started with {was}; this continuation would use {}",
                shown(key, order, cur)
            ),
            flag: Some(was),
        });
    }
    found.extend(unknown(recorded, continuing));
    match SettingsError::differences(found) {
        Some(e) => Err(e),
        None => Ok(notes),
    }
}

/// Recorded keys this runner neither applies from a record nor compares:
/// a difference from what the continuation records itself.
fn unknown(recorded: &Value, continuing: &Value) -> Vec<Difference> {
    let Some(rec) = recorded.as_object() else {
        return Vec::new();
    };
    let known = |k: &str| {
        TRUSTED.iter().any(|(t, _, _)| *t == k) || FROM_RECORD.contains(&k) || OBSERVED.contains(&k)
    };
    rec.iter()
        .filter(|(k, v)| !known(k) && !v.is_null())
        .filter(|(k, v)| continuing.get(k.as_str()) != Some(v))
        .map(|(k, v)| Difference {
            says: format!(
                "the run records {k} {v}, which runner continue does not take from a run directory \
                 (this continuation would use {})",
                continuing.get(k.as_str()).unwrap_or(&Value::Null)
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

    fn refusal(rec: Value, cur: Value, given: &[&str]) -> Option<String> {
        match check(&rec, &cur, given, Vec::new()) {
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
}
