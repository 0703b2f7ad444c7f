//! The settings of a continuation: the model, limits and tools are the
//! run's own, read back from the typed settings of the [`RunHeader`] its
//! trajectory records ([`RecordedSettings`]), with the flags of `runner
//! continue` over them; what bounds the sandbox or decides where the API
//! key goes comes from those flags alone ([`super::trust`]).

use super::trust::Difference;
use crate::cli::ContinueArgs;
use crate::config::{AgentOptions, ConfigBuilder, SandboxOptions};
use crate::model::provider::Provider;
use crate::runtime::RunHeader;
use crate::runtime::header::RecordedSettings;

/// The environment variable that names a run's provider.
pub const PROVIDER_VAR: &str = "RUNNER_PROVIDER";

/// Recorded settings that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("the trajectory records {key} as {value}, which this runner cannot use")]
    Bad { key: &'static str, value: String },
    #[error("{PROVIDER_VAR} is '{0}', which is not a provider")]
    BadProviderVar(String),
    #[error(
        "the run used the provider {recorded}, and {PROVIDER_VAR} asks for {asked}: its conversation was made by another model API"
    )]
    OtherProvider {
        recorded: &'static str,
        asked: &'static str,
    },
    #[error("{}{}", first.says, more_text(*more))]
    Differs {
        first: Difference,
        more: usize,
        flags: Vec<String>,
    },
}

/// " (and N more settings differ)", or nothing.
fn more_text(more: usize) -> String {
    match more {
        0 => String::new(),
        1 => " (and 1 more setting differs)".into(),
        n => format!(" (and {n} more settings differ)"),
    }
}

impl SettingsError {
    pub fn hint(&self) -> String {
        match self {
            SettingsError::Bad { .. } => {
                "the trajectory was changed or written by another program; start a new run".into()
            }
            SettingsError::BadProviderVar(_) => {
                "set it to anthropic, openai or scripted, or unset it".into()
            }
            SettingsError::OtherProvider { recorded, asked } => format!(
                "pass --provider {asked} to continue with it anyway, or unset {PROVIDER_VAR} to continue with {recorded}"
            ),
            SettingsError::Differs { flags, .. } if flags.is_empty() => {
                "start a new run with the settings you want: runner continue takes them \
                 only from its own command line"
                    .into()
            }
            SettingsError::Differs { flags, more, .. } => format!(
                "pass {} to continue with {}",
                flags.join(" "),
                if *more == 0 && flags.len() == 1 {
                    "it"
                } else {
                    "them"
                }
            ),
        }
    }

    /// The refusal of `found`, when it holds any difference.
    pub fn differences(found: Vec<Difference>) -> Option<SettingsError> {
        let flags = found.iter().filter_map(|d| d.flag.clone()).collect();
        let more = found.len().saturating_sub(1);
        let first = found.into_iter().next()?;
        Some(SettingsError::Differs { first, more, flags })
    }
}

/// The provider `RUNNER_PROVIDER` asks for, when set.
fn provider_from_env() -> Result<Option<Provider>, SettingsError> {
    match std::env::var(PROVIDER_VAR) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse::<Provider>()
            .map(Some)
            .map_err(|_| SettingsError::BadProviderVar(v)),
        _ => Ok(None),
    }
}

/// The continuation's configuration, not yet validated: `recorded` (the
/// run's latest configuration) under `args`. With another `--provider`
/// than the run's, the run's model, base URL and script are not used.
/// A provider asked for by `RUNNER_PROVIDER` that is not the run's is
/// refused unless `--provider` says it.
pub fn builder(recorded: &RunHeader, args: &ContinueArgs) -> Result<ConfigBuilder, SettingsError> {
    let r = &recorded.settings;
    let mut b = ConfigBuilder::default();
    let ran_with = r.provider.ok_or(SettingsError::Bad {
        key: "provider",
        value: "nothing".into(),
    })?;
    let provider = match (args.provider, provider_from_env()?) {
        (Some(p), _) => p,
        (None, Some(asked)) if asked != ran_with => {
            return Err(SettingsError::OtherProvider {
                recorded: ran_with.as_str(),
                asked: asked.as_str(),
            });
        }
        (None, _) => ran_with,
    };
    let same = provider == ran_with;

    // A run that asked a person keeps asking unless told otherwise.
    b.approve = match args.approve {
        Some(m) => m,
        None => r.approve.unwrap_or_default(),
    };
    agent_options(r, args, provider, same, &mut b.agent);

    // What bounds the sandbox: the command line's alone (see `trust`).
    sandbox_options(r, args, &mut b.sandbox);
    b.keep_background = args.keep_background;

    b.max_time_secs = args.max_time.or(r.max_time_secs.flatten());
    b.json = args.json;
    Ok(b)
}

/// The model, limits and tools: the run's own under the flags of `args`
/// (the run's model, URL and script only when `same` provider).
fn agent_options(
    r: &RecordedSettings,
    args: &ContinueArgs,
    provider: Provider,
    same: bool,
    a: &mut AgentOptions,
) {
    a.provider = provider;
    a.model = args.model.clone().or(r.model.clone().filter(|_| same));
    // The key goes only where this command line (or the user's
    // environment, or the vendor) says.
    a.base_url = args.base_url.clone();
    let script = r.script.clone().flatten().filter(|_| same);
    a.script = args.script.clone().or(script);
    a.timeout_secs = r.timeout_secs.unwrap_or(a.timeout_secs);
    a.max_command_timeout_secs = r
        .max_command_timeout_secs
        .unwrap_or(a.max_command_timeout_secs);
    a.model_timeout_secs = r.model_timeout_secs.unwrap_or(a.model_timeout_secs);
    a.max_steps = args.max_steps.or(r.max_steps).unwrap_or(a.max_steps);
    a.max_cost_usd = args.max_cost.or(r.max_cost_usd.flatten());
    a.price = args.price.clone();
    a.max_tokens = r.max_tokens.unwrap_or(a.max_tokens);
    a.context_window_tokens = r.context_window_tokens.unwrap_or(a.context_window_tokens);
    a.context_window_auto = r.context_window_auto.unwrap_or(false);
    a.tool_choice = r
        .tool_choice
        .clone()
        .flatten()
        .map(|c| c.as_str().to_string());
    a.stream = r.stream.unwrap_or(true);
    a.output_limit_bytes = r.output_limit_bytes.unwrap_or(a.output_limit_bytes);
    a.system = r.system_prompt.clone().flatten();
    a.env = args.env.clone();
    a.deny = r.deny.clone().unwrap_or_default();
    a.default_deny = !args.no_default_deny;
    if let Some(tools) = &r.tools {
        a.tools = tools.join(",");
    }
    a.shell = r.shell.unwrap_or(a.shell);
}

/// What bounds the sandbox, from `args` alone (the image may be the
/// run's).
fn sandbox_options(r: &RecordedSettings, args: &ContinueArgs, s: &mut SandboxOptions) {
    s.backend = args.executor.unwrap_or(s.backend);
    s.image = match &args.image {
        Some(i) => i.clone(),
        None => r.image.clone().unwrap_or_else(|| s.image.clone()),
    };
    s.network = args.network.unwrap_or(s.network);
    s.allowed_hosts = args.allow_host.clone();
    s.egress_network = args.egress_network.clone();
    s.cpus = args.cpus.unwrap_or(s.cpus);
    if let Some(m) = &args.memory {
        s.memory = m.clone();
    }
    s.pids_limit = args.pids_limit.unwrap_or(s.pids_limit);
    // The filter comes from the command line alone: a run directory is the
    // inside's to write, never a setting.
    s.seccomp = args.seccomp.clone();
    if let Some(u) = &args.user {
        s.user = u.clone();
    }
    s.writable_rootfs = args.writable_rootfs;
    s.workspace_mode = args.workspace_mode.unwrap_or(s.workspace_mode);
    if let Some(d) = &args.disk {
        s.disk = d.clone();
    }
    s.runtime = args.runtime.clone();
}

/// The recorded keys whose value the command line `args` gave (a flag,
/// or its environment variable), so their differences are the user's.
pub fn given(args: &ContinueArgs) -> Vec<&'static str> {
    let mut keys = Vec::new();
    let mut when = |on: bool, key: &'static [&'static str]| {
        if on {
            keys.extend_from_slice(key);
        }
    };
    when(args.executor.is_some(), &["executor"]);
    when(args.base_url.is_some(), &["base_url"]);
    when(args.network.is_some(), &["network"]);
    when(!args.allow_host.is_empty(), &["allowed_hosts", "network"]);
    when(args.egress_network.is_some(), &["egress_network"]);
    when(args.user.is_some(), &["user"]);
    when(args.writable_rootfs, &["writable_rootfs"]);
    when(args.disk.is_some(), &["disk_bytes"]);
    when(args.memory.is_some(), &["memory_bytes"]);
    when(args.cpus.is_some(), &["cpus"]);
    when(args.pids_limit.is_some(), &["pids_limit"]);
    when(args.workspace_mode.is_some(), &["workspace_mode"]);
    when(args.runtime.is_some(), &["runtime"]);
    when(args.keep_background, &["keep_background"]);
    when(args.no_default_deny, &["default_deny"]);
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;
    use std::path::PathBuf;

    /// The settings `config` records, as the JSON a trajectory holds.
    fn public(config: &crate::config::Config) -> serde_json::Value {
        serde_json::to_value(RecordedSettings::of(config)).expect("json")
    }

    fn header(v: serde_json::Value) -> RunHeader {
        RunHeader::read(&v).expect("a header")
    }

    fn args(argv: &[&str]) -> ContinueArgs {
        let mut full = vec!["runner", "continue", "runs/x"];
        full.extend_from_slice(argv);
        match Cli::try_parse_from(full).expect("parses").command {
            Some(Command::Continue(a)) => *a,
            other => panic!("not continue: {other:?}"),
        }
    }

    #[test]
    fn the_model_and_limits_come_back_and_the_sandbox_is_the_command_lines() {
        let mut run = ConfigBuilder::default();
        run.agent.provider = Provider::Scripted;
        run.agent.script = Some(PathBuf::from("/tmp/s.json"));
        run.agent.model = Some("m1".into());
        run.agent.max_steps = 7;
        run.agent.max_cost_usd = Some(0.5);
        run.agent.tools = "bash,edit".into();
        run.agent.system = Some("be brief".into());
        run.agent.deny = vec!["curl".into()];
        run.agent.base_url = Some("http://127.0.0.1:9".into());
        run.sandbox.backend = crate::backend_kind::BackendKind::Local;
        run.sandbox.memory = "512m".into();
        run.sandbox.disk = "unlimited".into();
        run.sandbox.allowed_hosts = vec!["example.com".into()];
        run.max_time_secs = Some(60);
        let recorded = public(&run.build().expect("valid"));
        let header = RunHeader::read(&recorded).expect("a header");
        let again = builder(&header, &args(&[])).expect("reads back");
        let again = public(&again.build().expect("valid"));
        for key in super::super::trust::FROM_RECORD {
            assert_eq!(again[key], recorded[key], "{key}");
        }
        let defaults = public(&ConfigBuilder::default().build().expect("valid"));
        for key in [
            "executor",
            "disk_bytes",
            "memory_bytes",
            "allowed_hosts",
            "network",
        ] {
            assert_eq!(again[key], defaults[key], "{key}");
        }
        assert_ne!(again["base_url"], recorded["base_url"]);

        // Flags win; limits are the run's unless given.
        let b = builder(&header, &args(&["--max-steps", "3", "--model", "m2"])).expect("ok");
        assert_eq!(
            (b.agent.max_steps, b.agent.model.as_deref()),
            (3, Some("m2"))
        );
        assert_eq!(b.max_time_secs, Some(60));
        let a = args(&[
            "--executor",
            "local",
            "--disk",
            "unlimited",
            "--writable-rootfs",
        ]);
        assert_eq!(given(&a), ["executor", "writable_rootfs", "disk_bytes"]);
    }

    #[test]
    fn the_seccomp_profile_comes_from_the_command_line_only() {
        let recorded = header(
            serde_json::json!({"provider": "scripted", "script": "/tmp/s.json", "seccomp": "default"}),
        );
        let b = builder(&recorded, &args(&[])).expect("ok");
        assert_eq!(
            b.sandbox.seccomp, "runner",
            "a recorded loosening is not taken"
        );
        let b = builder(&recorded, &args(&["--seccomp", "default"])).expect("ok");
        assert_eq!(b.sandbox.seccomp, "default");
        let config = b.build().expect("valid");
        assert_eq!(public(&config)["seccomp"], "default");
    }

    #[test]
    fn another_provider_drops_the_runs_model_and_url() {
        let recorded = header(
            serde_json::json!({"provider": "anthropic", "model": "claude-x",
            "base_url": "http://127.0.0.1:1"}),
        );
        let b = builder(&recorded, &args(&["--provider", "openai"])).expect("ok");
        assert_eq!(b.agent.provider, Provider::Openai);
        assert_eq!((b.agent.model, b.agent.base_url), (None, None));
        // A recorded value no runner writes is refused when the header is
        // read; a header without a provider, here.
        let bad = serde_json::json!({"provider": "anthropic", "max_steps": "many"});
        assert!(RunHeader::read(&bad).is_err());
        let none = header(serde_json::json!({"model": "m"}));
        assert!(matches!(
            builder(&none, &args(&[])),
            Err(SettingsError::Bad {
                key: "provider",
                ..
            })
        ));
    }
}
