//! The agent's environment as Harbor's is: the task's overrides, the
//! image's accounts, its services, the sandbox spec, the recorded header,
//! and each phase's network.

use super::*;

/// Makes the run directory and the workspace, seeds it from the image and
/// starts the agent's sandbox; `run_started` is recorded either way once
/// the run directory exists.
pub(super) async fn prepare(
    ctx: &AttemptCtx,
    task: &Task,
    image: &str,
    attempt: u32,
    run_path: &Path,
    rec: &mut Attempt,
) -> Result<Prepared, PhaseError> {
    let network = network_for(&task.effective_agent_network(), ctx.allow_internet);
    rec.network = network.note.clone();
    let mode = ctx.grading.or(task.grading).unwrap_or(GradingMode::Shared);
    rec.grading = Some(mode);
    let budget = ctx.disk_bytes.unwrap_or(u64::MAX);
    let run_dir = RunDir::create(run_path, ctx.redactor.clone(), budget)?;
    rec.trajectory = Some(run_dir.trajectory_path());
    let task = overridden(ctx, task);
    let run_id = format!("{}-{}-{}", ctx.suite_id, task.name, attempt);
    let workspace = Workspace::prepare(None).map_err(PhaseError::Workspace)?;
    // Recorded once the sandbox runs, with what the engine enforces on it.
    let eval = EvalPart {
        task: task.name.clone(),
        attempt,
        agent: ctx.agent.as_str().into(),
        network: rec.network.clone(),
        grading: mode.as_str().into(),
    };
    let started_event = |run| started(&run_id, &eval, run);
    let seeded = match ctx
        .seeds
        .seed_dir(image, task.workdir.as_deref(), workspace.path(), &run_id)
        .await
    {
        Ok(s) => s,
        Err(e) => {
            run_dir.record(&started_event(None));
            return Err(PhaseError::Seed(e));
        }
    };
    let workdir = task
        .workdir
        .clone()
        .unwrap_or_else(|| seeded.workdir.clone());
    let seed_config = crate::eval::workdir_config::seeded(workspace.path());
    let (agent, verifier) = accounts_of(ctx, &task, &seeded)?;
    let config = attempt_config(ctx, &task, image, &network, &agent)?;
    rec.runtime = config.sandbox.runtime.clone();
    let mut env = vec![("HOME".to_string(), agent.home.clone())];
    env.extend(task.env.iter().cloned());
    let compose = crate::eval::compose::load(&task.dir, &compose_vars(&task))?;
    if let Some(c) = &compose {
        env.extend(c.main_env().iter().cloned());
    }
    let services = match start_services(ctx, &task, &config, &run_id, compose.as_ref()).await {
        Ok(s) => s,
        Err(e) => {
            run_dir.record(&started_event(Some(RunHeader::of(&config))));
            return Err(PhaseError::Services(e));
        }
    };
    let mut spec = agent_spec(&config, &workspace, &run_id, ctx, &workdir, env, &agent);
    if let Some(s) = &services {
        spec.join_services(s.as_ref());
    }
    rec.loosenings = ctx.backend.loosenings(&spec);
    rec.loosenings
        .push("background processes keep running between commands (the agent's services)".into());
    let mut header = RunHeader::of(&config);
    let executor = match ctx.backend.start(spec).await {
        Ok(x) => x,
        Err(e) => {
            run_dir.record(&started_event(Some(header)));
            if let Some(s) = &services
                && let Err(e) = s.stop().await
            {
                tracing::warn!("cannot remove the task's services: {e}");
            }
            return Err(PhaseError::Start(e));
        }
    };
    header.sandbox_security = Enforced::of(executor.sandbox_security());
    let enforced = header.sandbox_security.clone().unwrap_or_default();
    run_dir.record(&started_event(Some(header)));
    note_sandbox(rec, services.as_deref(), enforced);
    Ok(Prepared {
        run_dir,
        task,
        config,
        workspace,
        workdir,
        run_id,
        attempt,
        executor,
        agent,
        verifier,
        mode,
        services,
        seed_config,
    })
}

/// The `run_started` of an eval attempt: its part, and its run's header
/// once it has a configuration.
pub(super) fn started(run_id: &str, eval: &EvalPart, run: Option<RunHeader>) -> Event {
    Event::RunStarted {
        run_id: run_id.to_string(),
        format_version: crate::event::TRAJECTORY_FORMAT_VERSION,
        config: StartedConfig::Eval {
            eval: eval.clone(),
            run,
        },
    }
}

/// Notes in the attempt's report the sidecars' network and what the
/// engine enforced on the started sandbox.
pub(super) fn note_sandbox(rec: &mut Attempt, services: Option<&dyn Services>, enforced: Enforced) {
    if let Some(s) = services
        && s.network().is_some()
    {
        rec.network = format!(
            "{}; sidecars on an internal network: {}",
            rec.network,
            s.names().join(", ")
        );
    }
    rec.runtime = enforced.runtime;
    rec.seccomp = enforced.seccomp;
    rec.seccomp_profile_sha256 = enforced.seccomp_profile_sha256;
}

/// The task with the suite's overrides applied.
pub(super) fn overridden(ctx: &AttemptCtx, task: &Task) -> Task {
    let mut task = task.clone();
    if let Some(t) = ctx.agent_timeout_secs {
        task.agent_timeout_secs = t;
    }
    if let Some(t) = ctx.verifier_timeout_secs {
        task.verifier_timeout_secs = t;
    }
    if let Some(c) = ctx.cpus {
        task.cpus = c;
    }
    if let Some(m) = ctx.memory_bytes {
        task.memory_bytes = m;
    }
    task
}

/// Who the agent and the verifier are, as Harbor decides: `--user`, else
/// `[agent] user`, else the image's USER (root when it has none); the
/// verifier `[verifier] user`, else the image's; HOME from passwd.
pub(super) fn accounts_of(
    ctx: &AttemptCtx,
    task: &Task,
    seeded: &Seeded,
) -> Result<(Account, Account), PhaseError> {
    let resolve = |user: &str| {
        accounts::resolve(user, seeded.passwd.as_deref(), seeded.group.as_deref())
            .map_err(PhaseError::User)
    };
    let image_user = seeded.image_user.clone().unwrap_or_default();
    let agent_user = ctx
        .user
        .clone()
        .or_else(|| task.agent_user.clone())
        .unwrap_or_else(|| image_user.clone());
    let agent = resolve(&agent_user)?;
    let verifier = resolve(task.verifier_user.as_deref().unwrap_or(&image_user))?;
    Ok((agent, verifier))
}

/// docker-compose tasks: the sidecars, on a network of their own, before
/// the agent's sandbox.
pub(super) async fn start_services(
    ctx: &AttemptCtx,
    task: &Task,
    config: &Config,
    run_id: &str,
    compose: Option<&crate::eval::compose::Compose>,
) -> Result<Option<Arc<dyn Services>>, ExecError> {
    let Some(c) = compose else {
        return Ok(None);
    };
    let base = ServicesSpec {
        cpus: task.cpus,
        memory_bytes: task.memory_bytes,
        pids_limit: config.sandbox.pids_limit,
        runtime: config.sandbox.runtime.clone(),
        seccomp: config.sandbox.seccomp.clone(),
        max_run_time: Duration::from_secs_f64(
            task.agent_timeout_secs + task.verifier_timeout_secs + 600.0,
        ),
        redactor: ctx.redactor.clone(),
        ..ServicesSpec::new(run_id, Vec::new())
    };
    let build_timeout = Duration::from_secs_f64(task.build_timeout_secs);
    crate::eval::compose::start(c, &task.dir, ctx.backend.as_ref(), base, build_timeout)
        .await
        .map(Some)
}

/// The agent's sandbox: it works where the task says, as Harbor's agents
/// do, with `env` over the configuration's, and what it starts in the
/// background keeps running (services the tests use).
pub(super) fn agent_spec(
    config: &Config,
    workspace: &Workspace,
    run_id: &str,
    ctx: &AttemptCtx,
    workdir: &str,
    env: Vec<(String, String)>,
    agent: &Account,
) -> SandboxSpec {
    let base = sandbox_spec(config, workspace, run_id, &ctx.redactor);
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

/// The variables a task's docker-compose.yaml may name, as Harbor sets
/// them, and the task's own environment.
pub(super) fn compose_vars(task: &Task) -> std::collections::BTreeMap<String, String> {
    let mut vars: std::collections::BTreeMap<String, String> = task.env.iter().cloned().collect();
    vars.insert(
        "CONTEXT_DIR".into(),
        task.environment_dir().display().to_string(),
    );
    vars.insert("MAIN_IMAGE_NAME".into(), "${MAIN_IMAGE_NAME}".into());
    vars.insert("CPUS".into(), task.cpus.to_string());
    vars.insert("MEMORY".into(), format!("{}M", task.memory_bytes >> 20));
    vars.insert("TEST_DIR".into(), "/tests".into());
    vars
}

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

/// The run configuration of this attempt: the shared flags with the task's
/// image, limits, network, disk and user.
pub(super) fn attempt_config(
    ctx: &AttemptCtx,
    task: &Task,
    image: &str,
    network: &PhaseNetwork,
    agent: &Account,
) -> Result<Config, ConfigError> {
    let mut b = ctx.base.clone();
    b.sandbox.image = image.to_string();
    b.sandbox.cpus = task.cpus;
    b.sandbox.memory = task.memory_bytes.to_string();
    b.sandbox.network = network.network;
    b.sandbox.allowed_hosts = network.allowed_hosts.clone();
    b.sandbox.egress_network = ctx
        .egress_network
        .clone()
        .filter(|_| network.network == Network::Allowlist);
    if !ctx.backend.capabilities().name.eq("local") {
        b.sandbox.user = format!("{}:{}", agent.uid, agent.gid);
    }
    // Harbor's environment: the root filesystem is the task's to change.
    b.sandbox.writable_rootfs = !ctx.read_only_rootfs;
    if let Some(bytes) = task.storage_bytes {
        b.sandbox.disk = bytes.to_string();
    }
    b.max_time_secs = Some(crate::convert::u64_from_f64(task.agent_timeout_secs.ceil()));
    b.build()
}
