//! The sandboxes of an attempt, specified from its task in one place: the
//! agent's (as Harbor's environment is: the task's workdir and env, what
//! it starts in the background kept running) and a fresh verifier's (the
//! task's limits, a fixed environment or Harbor's separate one), and the
//! network each phase gets. Nothing here starts a sandbox: the agent's is
//! started by its run ([`crate::runtime::Run::attempt`]), a verifier's by
//! its grading.

use std::path::Path;
use std::time::Duration;

use super::task::{Task, TaskNetwork};
use crate::config::Config;
use crate::exec::accounts::Account;
use crate::exec::backend::{Network, SandboxSpec, Services, WorkspaceMode, WorkspaceSpec};
use crate::exec::seccomp::Seccomp;
use crate::redact::Redactor;
use crate::workspace::Workspace;

/// The verifier's PATH in a fresh sandbox, whatever the image set.
pub const VERIFIER_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// How long a verifier's sandbox may outlive its test.sh's timeout.
const VERIFIER_SANDBOX_MARGIN: Duration = Duration::from_secs(300);

/// A phase's network as runner gives it, with the attempt's note on it.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseNetwork {
    pub network: Network,
    /// With [`Network::Allowlist`]: the task's host patterns.
    pub allowed_hosts: Vec<String>,
    /// What the attempt records as its `network`.
    pub note: String,
}

/// Network is opt-in twice: the task allows it AND runner was told
/// `--allow-internet`; a `public` task then gets the bridge, an
/// `allowlist` task only its hosts (through the filtering proxy).
pub fn network_for(task: &TaskNetwork, flag: bool) -> PhaseNetwork {
    let none = |note: String| PhaseNetwork {
        network: Network::None,
        allowed_hosts: Vec::new(),
        note,
    };
    match (task, flag) {
        (TaskNetwork::Public, true) => PhaseNetwork {
            network: Network::Bridge,
            allowed_hosts: Vec::new(),
            note: "bridge".into(),
        },
        (TaskNetwork::Public, false) => {
            none("none (the task allows internet; pass --allow-internet to give it)".into())
        }
        (TaskNetwork::Allowlist(h), _) if h.is_empty() => {
            none("none (the task's allowlist names no host)".into())
        }
        (TaskNetwork::Allowlist(h), true) => PhaseNetwork {
            network: Network::Allowlist,
            allowed_hosts: h.clone(),
            note: format!("allowlist: only {} through a filtering proxy", h.join(", ")),
        },
        (TaskNetwork::Allowlist(h), false) => none(format!(
            "none (the task allows {}; pass --allow-internet to give them)",
            h.join(", ")
        )),
        (TaskNetwork::NoNetwork, _) => none("none (task.allow_internet = false)".into()),
    }
}

/// The agent's environment beside the configuration's: HOME from the
/// agent's passwd entry, the task's `[environment] env`, then what the
/// task's docker-compose.yaml gives its main service (`compose`).
pub fn agent_env(
    task: &Task,
    agent: &Account,
    compose: &[(String, String)],
) -> Vec<(String, String)> {
    let mut env = vec![("HOME".to_string(), agent.home.clone())];
    env.extend(task.env.iter().cloned());
    env.extend(compose.iter().cloned());
    env
}

/// The agent's sandbox: the sandbox of the attempt's configuration (its
/// image, limits, network and user) with the workspace mounted, working
/// where the task says as Harbor's agents do, with `env` over the
/// configuration's, and what it starts in the background kept running
/// (services the tests use). The attempt's run starts it.
pub fn agent(
    config: &Config,
    workspace: &Workspace,
    run_id: &str,
    redactor: &Redactor,
    workdir: &str,
    env: Vec<(String, String)>,
    agent: &Account,
) -> SandboxSpec {
    let base = crate::runtime::sandbox_spec(config, workspace, run_id, redactor);
    let mut spec_env = base.env.clone();
    for (k, v) in env {
        spec_env.retain(|(e, _)| *e != k);
        spec_env.push((k, v));
    }
    SandboxSpec {
        workdir: Some(workdir.to_string()),
        env: spec_env,
        keep_background: true,
        // A root agent may chown, bind port 80... as Harbor's root may
        // (never the capabilities that reach runner's supervisor).
        root_caps: agent.uid == 0,
        ..base
    }
}

/// A fresh verifier's sandbox, as its grading mode has it.
pub struct VerifierSandbox<'a> {
    pub task: &'a Task,
    /// The pristine image (isolated), the agent's snapshot (snapshot) or
    /// the verifier's image (separate).
    pub image: &'a str,
    /// The agent's final workspace on the host, copied in at `workdir`;
    /// `None`: none (separate mode hands over artifacts instead).
    pub workspace: Option<&'a Path>,
    /// Where it goes in the container (the agent's working directory).
    pub workdir: &'a str,
    /// The verifier's network (and its allowlist).
    pub network: PhaseNetwork,
    /// `--egress-network`, for an allowlisted verifier.
    pub egress_network: Option<String>,
    /// The container runtime, as for the agent's sandbox.
    pub runtime: Option<String>,
    /// The system-call filter, as for the agent's sandbox.
    pub seccomp: Seccomp,
    pub run_id: String,
    /// Secrets kept out of the verifier's messages.
    pub redactor: &'a Redactor,
    /// The task's sidecars, still running: the verifier joins their network.
    pub services: Option<&'a dyn Services>,
    /// A fixed, hardened environment (isolated, snapshot); else Harbor's
    /// separate verifier's: the image's own with `[environment] env`,
    /// HOME from passwd, then `[verifier] env`.
    pub hardened: bool,
    /// The verifier user's HOME (from the image's passwd).
    pub verifier_home: &'a str,
}

/// How long test.sh of `task` may run.
pub fn verifier_timeout(task: &Task) -> Duration {
    Duration::from_secs_f64(task.verifier_timeout_secs)
}

/// The verifier's sandbox `v` describes: runner's own commands in it run
/// as root without capabilities; test.sh alone may switch users.
pub fn verifier(v: &VerifierSandbox<'_>) -> SandboxSpec {
    let task = v.task;
    let mut spec = SandboxSpec {
        cpus: task.cpus,
        memory_bytes: task.memory_bytes,
        network: v.network.network,
        allowed_hosts: v.network.allowed_hosts.clone(),
        egress_network: v
            .egress_network
            .clone()
            .filter(|_| v.network.network == Network::Allowlist),
        user: "0:0".into(),
        // A fresh sandbox: writable so /tests and /logs can be made;
        // capabilities stay dropped.
        writable_rootfs: true,
        workspace: v.workspace.map(|w| WorkspaceSpec {
            host: w.to_path_buf(),
            mode: WorkspaceMode::Copy,
            exact: true,
        }),
        workdir: Some(v.workdir.to_string()),
        // No capabilities for runner's own commands: test.sh alone may
        // switch users (see `execute_final`), so it can run the agent's
        // code unprivileged (`setpriv --reuid=1000 ...`), which then
        // cannot touch /tests or /logs.
        switch_user: false,
        env: verifier_env(v),
        redactor: v.redactor.clone(),
        max_run_time: verifier_timeout(task) + VERIFIER_SANDBOX_MARGIN,
        runtime: v.runtime.clone(),
        seccomp: v.seccomp.clone(),
        ..SandboxSpec::new(v.image, &v.run_id)
    };
    if let Some(s) = v.services {
        spec.join_services(s);
    }
    spec
}

/// The verifier's environment: fixed and hardened (a standard PATH, no
/// user site, no bytecode), or Harbor's separate one; the task's
/// `[verifier] env` on top.
fn verifier_env(v: &VerifierSandbox<'_>) -> Vec<(String, String)> {
    let task = v.task;
    let mut env: Vec<(String, String)> = if !v.hardened {
        let mut env = vec![("HOME".to_string(), v.verifier_home.to_string())];
        env.extend(task.env.iter().cloned());
        env
    } else {
        [
            ("PATH", VERIFIER_PATH),
            ("HOME", "/root"),
            ("LANG", "C.UTF-8"),
            ("PYTHONNOUSERSITE", "1"),
            ("PYTHONSAFEPATH", "1"),
            ("PYTHONDONTWRITEBYTECODE", "1"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    };
    for (k, val) in &task.verifier_env {
        env.retain(|(e, _)| e != k);
        env.push((k.clone(), val.clone()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_needs_the_task_and_the_flag() {
        assert_eq!(
            network_for(&TaskNetwork::Public, true).network,
            Network::Bridge
        );
        let n = network_for(&TaskNetwork::Public, false);
        assert_eq!(n.network, Network::None);
        assert!(n.note.contains("--allow-internet"), "{}", n.note);
        assert_eq!(
            network_for(&TaskNetwork::NoNetwork, true).network,
            Network::None
        );
        assert_eq!(
            network_for(&TaskNetwork::NoNetwork, false).network,
            Network::None
        );
        let hosts = vec!["pypi.org".to_string(), "*.example.com".to_string()];
        let list = TaskNetwork::Allowlist(hosts.clone());
        let n = network_for(&list, true);
        assert_eq!(n.network, Network::Allowlist);
        assert_eq!(n.allowed_hosts, hosts);
        assert!(n.note.contains("pypi.org, *.example.com"), "{}", n.note);
        let n = network_for(&list, false);
        assert_eq!(n.network, Network::None);
        assert!(n.allowed_hosts.is_empty());
        assert!(
            n.note.contains("pypi.org") && n.note.contains("--allow-internet"),
            "{}",
            n.note
        );
        let n = network_for(&TaskNetwork::Allowlist(Vec::new()), true);
        assert_eq!(n.network, Network::None);
    }
}
