//! The keys of Harbor's current task.toml schema (0.26,
//! `harbor/models/task/config.py`), to find the keys a task sets that are
//! not in it: Harbor ignores them; runner warns about each.

use toml::{Table, Value};

const ROOT: &[&str] = &[
    "schema_version",
    "version",
    "source",
    "task",
    "metadata",
    "agent",
    "verifier",
    "environment",
    "solution",
    "multi_step_reward_strategy",
    "steps",
    "artifacts",
];
const AGENT: &[&str] = &["timeout_sec", "user", "network_mode", "allowed_hosts"];
const VERIFIER: &[&str] = &[
    "timeout_sec",
    "env",
    "user",
    "network_mode",
    "allowed_hosts",
    "environment_mode",
    "environment",
    "collect",
];
/// `[environment]` and `[verifier.environment]`.
pub const ENVIRONMENT: &[&str] = &[
    "build_timeout_sec",
    "docker_image",
    "os",
    "cpus",
    "memory_mb",
    "memory",
    "storage_mb",
    "storage",
    "gpus",
    "gpu_types",
    "tpu",
    "mcp_servers",
    "env",
    "skills_dir",
    "healthcheck",
    "workdir",
    "allow_internet",
    "network_mode",
    "allowed_hosts",
];
const HEALTHCHECK: &[&str] = &[
    "command",
    "interval_sec",
    "timeout_sec",
    "start_period_sec",
    "start_interval_sec",
    "retries",
];
const SOLUTION: &[&str] = &["env"];
const ARTIFACT: &[&str] = &["source", "destination", "exclude", "service"];

/// The dotted paths (`environment.foo`, `artifacts[1].bar`) of the keys in
/// `raw` that Harbor's schema does not have. Free-form tables (`[task]`,
/// `[metadata]`, the `env` tables) and sections refused as a whole
/// (`[[steps]]`, `[[verifier.collect]]`, `mcp_servers`, `tpu`) are not
/// looked into.
pub fn unknown_keys(raw: &Table) -> Vec<String> {
    let mut out = Vec::new();
    unknown(raw, "", ROOT, &mut out);
    let sub = |key: &str| raw.get(key).and_then(Value::as_table);
    if let Some(t) = sub("agent") {
        unknown(t, "agent.", AGENT, &mut out);
    }
    if let Some(t) = sub("solution") {
        unknown(t, "solution.", SOLUTION, &mut out);
    }
    if let Some(t) = sub("environment") {
        environment(t, "environment.", &mut out);
    }
    if let Some(t) = sub("verifier") {
        unknown(t, "verifier.", VERIFIER, &mut out);
        if let Some(e) = t.get("environment").and_then(Value::as_table) {
            environment(e, "verifier.environment.", &mut out);
        }
    }
    if let Some(list) = raw.get("artifacts").and_then(Value::as_array) {
        for (i, a) in list.iter().enumerate() {
            if let Some(t) = a.as_table() {
                unknown(t, &format!("artifacts[{i}]."), ARTIFACT, &mut out);
            }
        }
    }
    out
}

fn environment(t: &Table, prefix: &str, out: &mut Vec<String>) {
    unknown(t, prefix, ENVIRONMENT, out);
    if let Some(h) = t.get("healthcheck").and_then(Value::as_table) {
        unknown(h, &format!("{prefix}healthcheck."), HEALTHCHECK, out);
    }
}

fn unknown(t: &Table, prefix: &str, known: &[&str], out: &mut Vec<String>) {
    out.extend(
        t.keys()
            .filter(|k| !known.contains(&k.as_str()))
            .map(|k| format!("{prefix}{k}")),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_named_by_path_and_free_form_tables_are_not() {
        let raw: Table = "foo = 1\n\
             artifacts = [\"/a\", { source = \"/b\", color = 1 }]\n\
             [task]\nanything = 1\n[metadata]\nx = 1\n\
             [agent]\ntimeout_sec = 1\nmodel = \"m\"\n\
             [solution]\nenv = { A = \"1\" }\nextra = 2\n\
             [environment]\ncpus = 1\nfoo = 2\nenv = { B = \"2\" }\n\
             [environment.healthcheck]\ncommand = \"true\"\nperiod = 1\n\
             [verifier]\nenv = { C = \"3\" }\nretries = 1\n\
             [verifier.environment]\ndocker_image = \"x\"\nbar = 1\n"
            .parse()
            .expect("toml");
        let mut got = unknown_keys(&raw);
        got.sort();
        assert_eq!(
            got,
            [
                "agent.model",
                "artifacts[1].color",
                "environment.foo",
                "environment.healthcheck.period",
                "foo",
                "solution.extra",
                "verifier.environment.bar",
                "verifier.retries",
            ]
        );
    }
}
