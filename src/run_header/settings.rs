//! The settings a run's header records: the effective configuration with
//! its secrets left out, typed. Every field is `None` when a header does
//! not record it (one of an older runner); one the runner writes as
//! `null` when unset is an `Option<Option<_>>`, so that `null` reads back
//! as recorded. Keys this runner does not know are kept in
//! [`RecordedSettings::other`]: `runner continue` refuses a record it
//! cannot account for.
//!
//! The fields are in the order of their names: a header is written in
//! field order, and the runner before the typed header wrote these keys
//! sorted, so trajectories of both are the same byte for byte.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::names::{by_name, nullable, nullable_by_name};
use crate::approve::ApproveMode;
use crate::backend_kind::BackendKind;
use crate::config::Config;
use crate::exec::backend::{Network, WorkspaceMode};
use crate::exec::shell::ShellMode;
use crate::model::provider::Provider;
use crate::model::tool_choice::ToolChoice;

/// The configuration a header records, each setting under its own name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RecordedSettings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_hosts: Option<Vec<String>>,
    /// Whether an API key was set (never the key).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_set: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none", with = "by_name")]
    pub approve: Option<ApproveMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The names of the variables commands got (never their values).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_env: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window_auto: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_deny: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deny: Option<Vec<String>>,
    /// `Some(None)`: unlimited.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "nullable")]
    pub disk_bytes: Option<Option<u64>>,
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "nullable")]
    pub egress_network: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none", with = "by_name")]
    pub executor: Option<BackendKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_background: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_command_timeout_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "nullable")]
    pub max_cost_usd: Option<Option<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "nullable")]
    pub max_time_secs: Option<Option<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_timeout_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", with = "by_name")]
    pub network: Option<Network>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_limit_bytes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids_limit: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none", with = "by_name")]
    pub provider: Option<Provider>,
    /// `Some(None)`: the engine's default.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "nullable")]
    pub runtime: Option<Option<String>>,
    /// The script's absolute path.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "nullable")]
    pub script: Option<Option<PathBuf>>,
    /// The filter's label (`runner`, `default`, `file <path>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", with = "by_name")]
    pub shell: Option<ShellMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "nullable")]
    pub system_prompt: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", with = "nullable_by_name")]
    pub tool_choice: Option<Option<ToolChoice>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", with = "by_name")]
    pub workspace_mode: Option<WorkspaceMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writable_rootfs: Option<bool>,
    /// Recorded keys this runner does not know, as recorded (none in a
    /// header of its own).
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl RecordedSettings {
    /// The settings of `config`, every one recorded.
    pub fn of(config: &Config) -> RecordedSettings {
        let sb = &config.sandbox;
        let secs = |d: std::time::Duration| Some(d.as_secs());
        let script = config.script.as_ref().map(|p| {
            // Absolute, so `runner continue` finds it from anywhere.
            std::path::absolute(p).unwrap_or_else(|_| p.clone())
        });
        RecordedSettings {
            allowed_hosts: Some(sb.allowed_hosts.clone()),
            api_key_set: Some(config.api_key.is_some()),
            approve: Some(config.approve),
            base_url: Some(config.base_url.clone()),
            command_env: Some(config.effective_env().into_iter().map(|(k, _)| k).collect()),
            context_window_auto: Some(config.context_window_auto),
            context_window_tokens: Some(config.context_window_tokens),
            cpus: Some(sb.cpus),
            default_deny: Some(config.default_deny),
            deny: Some(config.deny.clone()),
            disk_bytes: Some(sb.disk_bytes),
            egress_network: Some(sb.egress_network.clone()),
            executor: Some(config.executor),
            image: Some(sb.image.clone()),
            keep_background: Some(config.keep_background),
            max_command_timeout_secs: secs(config.max_command_timeout),
            max_cost_usd: Some(config.max_cost_usd),
            max_steps: Some(config.max_steps),
            max_time_secs: Some(config.max_time.map(|d| d.as_secs())),
            max_tokens: Some(config.max_tokens),
            memory_bytes: Some(sb.memory_bytes),
            model: Some(config.model.clone()),
            model_timeout_secs: secs(config.model_timeout),
            network: Some(sb.network),
            output_limit_bytes: Some(config.output_limit_bytes),
            pids_limit: Some(sb.pids_limit),
            provider: Some(config.provider),
            runtime: Some(sb.runtime.clone()),
            script: Some(script),
            seccomp: Some(sb.seccomp.label()),
            shell: Some(config.shell),
            stream: Some(config.stream),
            system_prompt: Some(config.system_prompt.clone()),
            timeout_secs: secs(config.timeout),
            tool_choice: Some(config.tool_choice.clone()),
            tools: Some(
                config
                    .tools
                    .iter()
                    .map(|t| t.as_str().to_string())
                    .collect(),
            ),
            user: Some(sb.user.clone()),
            workspace_mode: Some(sb.workspace_mode),
            writable_rootfs: Some(sb.writable_rootfs),
            other: Map::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigBuilder;
    use crate::model::tool_choice::ToolChoice;
    use crate::run_header::RunHeader;
    use serde_json::json;

    /// `Config::public_json` as the runner before the typed header had it,
    /// word for word: what `run_started.config` held.
    fn before(c: &Config) -> Value {
        let env: Vec<String> = c.effective_env().into_iter().map(|(k, _)| k).collect();
        json!({
            "provider": c.provider.as_str(),
            "model": c.model,
            "base_url": c.base_url,
            "api_key_set": c.api_key.is_some(),
            "executor": format!("{:?}", c.executor).to_lowercase(),
            "image": c.sandbox.image,
            "network": format!("{:?}", c.sandbox.network).to_lowercase(),
            "allowed_hosts": c.sandbox.allowed_hosts,
            "egress_network": c.sandbox.egress_network,
            "cpus": c.sandbox.cpus,
            "memory_bytes": c.sandbox.memory_bytes,
            "pids_limit": c.sandbox.pids_limit,
            "user": c.sandbox.user,
            "writable_rootfs": c.sandbox.writable_rootfs,
            "disk_bytes": c.sandbox.disk_bytes,
            "runtime": c.sandbox.runtime,
            "seccomp": c.sandbox.seccomp.label(),
            "keep_background": c.keep_background,
            "shell": c.shell.as_str(),
            "timeout_secs": c.timeout.as_secs(),
            "max_command_timeout_secs": c.max_command_timeout.as_secs(),
            "model_timeout_secs": c.model_timeout.as_secs(),
            "max_steps": c.max_steps,
            "max_time_secs": c.max_time.map(|d| d.as_secs()),
            "max_cost_usd": c.max_cost_usd,
            "max_tokens": c.max_tokens,
            "context_window_tokens": c.context_window_tokens,
            "context_window_auto": c.context_window_auto,
            "tool_choice": c.tool_choice.as_ref().map(ToolChoice::as_str),
            "stream": c.stream,
            "output_limit_bytes": c.output_limit_bytes,
            "command_env": env,
            "default_deny": c.default_deny,
            "deny": c.deny,
            "tools": c.tools.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
            "workspace_mode": format!("{:?}", c.sandbox.workspace_mode).to_lowercase(),
            "script": c.script.as_ref().map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone())),
            "system_prompt": c.system_prompt,
            "approve": c.approve.as_str(),
        })
    }

    /// Configurations that set every setting away from its default, and
    /// the default one.
    fn configs() -> Vec<Config> {
        let mut b = ConfigBuilder::default();
        let plain = b.build().expect("valid");
        b.agent.provider = Provider::Scripted;
        b.agent.script = Some(PathBuf::from("rel/s.json"));
        b.agent.model = Some("m1".into());
        b.agent.base_url = Some("http://127.0.0.1:9".into());
        b.agent.max_cost_usd = Some(0.25);
        b.agent.tool_choice = Some("bash".into());
        b.agent.system = Some("be brief".into());
        b.agent.deny = vec!["curl".into()];
        b.agent.tools = "bash,edit".into();
        b.agent.shell = ShellMode::Persistent;
        b.agent.env = vec!["A=1".into()];
        b.approve = ApproveMode::Risky;
        b.sandbox.backend = BackendKind::Local;
        b.sandbox.network = Network::Allowlist;
        b.sandbox.allowed_hosts = vec!["example.com".into()];
        b.sandbox.workspace_mode = WorkspaceMode::Copy;
        b.sandbox.disk = "unlimited".into();
        b.sandbox.cpus = 1.5;
        b.sandbox.runtime = Some("runsc".into());
        b.sandbox.seccomp = "default".into();
        b.max_time_secs = Some(60);
        vec![plain, b.build().expect("valid")]
    }

    /// (a) Trajectories written before and after are the same in `config`,
    /// byte for byte: the same keys, values and order.
    #[test]
    fn the_typed_settings_are_written_as_before() {
        for c in configs() {
            let typed = serde_json::to_string(&RecordedSettings::of(&c)).expect("json");
            assert_eq!(typed, before(&c).to_string());
            let header = serde_json::to_string(&RunHeader::of(&c)).expect("json");
            assert_eq!(header, typed);
        }
    }

    /// A header the runner before wrote, as it was in its trajectory.
    const RECORDED: &str = concat!(
        r#"{"allowed_hosts":[],"api_key_set":false,"approve":"never","base_url":"","#,
        r#""command_env":["LANG"],"context_window_auto":false,"context_window_tokens":200000,"#,
        r#""cpus":2.0,"default_deny":true,"deny":[],"disk_bytes":10737418240,"#,
        r#""egress_network":null,"executor":"docker","image":"runner-sandbox:tiny","#,
        r#""keep_background":false,"max_command_timeout_secs":600,"max_cost_usd":null,"#,
        r#""max_steps":100,"max_time_secs":null,"max_tokens":8192,"memory_bytes":1073741824,"#,
        r#""model":"scripted","model_timeout_secs":300,"network":"none","#,
        r#""output_limit_bytes":10000,"pids_limit":256,"provider":"scripted","runtime":null,"#,
        r#""script":"/tmp/s.json","seccomp":"runner","shell":"fresh","stream":true,"#,
        r#""system_prompt":null,"timeout_secs":120,"tool_choice":null,"tools":["bash"],"#,
        r#""user":"1000:1000","workspace_mode":"auto","writable_rootfs":false,"#,
        r#""workspace":"/tmp/ws","scratch_workspace":true,"loosenings":[],"#,
        r#""sandbox_security":{"runtime":"runc","seccomp":"runner","seccomp_profile_sha256":null}}"#
    );

    #[test]
    fn a_recorded_header_reads_typed_and_is_written_back_as_it_was() {
        let v: Value = serde_json::from_str(RECORDED).expect("json");
        let h = RunHeader::read(&v).expect("reads");
        let s = &h.settings;
        assert_eq!(s.executor, Some(BackendKind::Docker));
        assert_eq!(s.network, Some(Network::None));
        assert_eq!(s.provider, Some(Provider::Scripted));
        assert_eq!(s.disk_bytes, Some(Some(10737418240)));
        assert_eq!(
            (s.runtime.clone(), s.tool_choice.clone()),
            (Some(None), Some(None))
        );
        assert!(s.other.is_empty(), "{:?}", s.other);
        assert_eq!(serde_json::to_string(&h).expect("json"), RECORDED);
    }

    /// (b) An older header, missing settings, reads: each is `None`, and
    /// it is written back without them. A key this runner does not know
    /// is kept as it was.
    #[test]
    fn an_older_header_missing_settings_reads() {
        let v = json!({"provider": "anthropic", "model": "claude-x", "runtime": null,
            "privileged": true});
        let h = RunHeader::read(&v).expect("reads");
        let s = &h.settings;
        assert_eq!(s.provider, Some(Provider::Anthropic));
        assert_eq!((s.executor, s.network, s.max_steps), (None, None, None));
        assert_eq!((s.disk_bytes, s.runtime.clone()), (None, Some(None)));
        assert_eq!(s.other["privileged"], true);
        assert_eq!(h.to_value(), v);
    }
}
