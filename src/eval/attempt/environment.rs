//! The agent's environment as Harbor's is: the task's overrides, the
//! image's accounts, its configuration and services, and its sandbox
//! started in the attempt's run (see [`crate::eval::sandboxes`] for the
//! spec and each phase's network).

use super::*;

/// What the prepare phase makes before the agent's sandbox starts.
pub(super) struct Setup {
    run_dir: RunDir,
    /// The task with the suite's overrides applied.
    task: Task,
    workspace: Workspace,
    /// Where the agent works (the task's workdir or the image's).
    workdir: String,
    run_id: String,
    /// 1-based.
    attempt: u32,
    /// The attempt's part of its `run_started`.
    eval: EvalPart,
    agent: Account,
    verifier: Account,
    mode: GradingMode,
    seed_config: crate::eval::workdir_config::SeededConfig,
}

/// Makes the run directory and the workspace, seeds it from the image and
/// reads who the agent and the verifier are: the attempt's configuration
/// and what its run starts from. A seeding that fails is recorded as the
/// attempt's `run_started`, without a configuration.
pub(super) async fn prepare(
    ctx: &AttemptCtx,
    task: &Task,
    image: &str,
    attempt: u32,
    run_path: &Path,
    rec: &mut Attempt,
) -> Result<(Config, Setup), PhaseError> {
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
    let eval = EvalPart {
        task: task.name.clone(),
        attempt,
        agent: ctx.agent.as_str().into(),
        network: rec.network.clone(),
        grading: mode.as_str().into(),
    };
    let seeded = match ctx
        .seeds
        .seed_dir(image, task.workdir.as_deref(), workspace.path(), &run_id)
        .await
    {
        Ok(s) => s,
        Err(e) => {
            record_unstarted(&run_dir, &run_id, eval, None);
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
    let setup = Setup {
        run_dir,
        task,
        workspace,
        workdir,
        run_id,
        attempt,
        eval,
        agent,
        verifier,
        mode,
        seed_config,
    };
    Ok((config, setup))
}

/// Starts the task's sidecars, then the agent's sandbox in the attempt's
/// run, which records its `run_started` (also when either fails to start)
/// with what the engine enforces on the sandbox.
/// `ahead`: how long the sandbox may wait in the pool before it runs.
pub(super) async fn start<'a>(
    ctx: &'a AttemptCtx,
    config: &'a Config,
    setup: Setup,
    ahead: Duration,
    rec: &mut Attempt,
) -> Result<Prepared<'a>, PhaseError> {
    let s = setup;
    let compose = crate::eval::compose::load(&s.task.dir, &compose_vars(&s.task))?;
    let services = start_services(ctx, &s.task, config, &s.run_id, compose.as_ref()).await;
    let services = match services {
        Ok(services) => services,
        Err(e) => {
            record_unstarted(&s.run_dir, &s.run_id, s.eval, Some(config));
            return Err(PhaseError::Services(e));
        }
    };
    let compose_env = compose.as_ref().map_or(&[][..], |c| c.main_env());
    let env = sandboxes::agent_env(&s.task, &s.agent, compose_env);
    let (workspace, redactor) = (&s.workspace, &ctx.redactor);
    let mut spec = sandboxes::agent(
        config, workspace, &s.run_id, redactor, &s.workdir, env, &s.agent,
    );
    spec.max_run_time = agent_lifetime(&s.task, ahead);
    if let Some(services) = &services {
        spec.join_services(services.as_ref());
    }
    rec.loosenings = ctx.backend.loosenings(&spec);
    rec.loosenings
        .push("background processes keep running between commands (the agent's services)".into());
    let sandbox = AttemptSandbox {
        backend: ctx.backend.clone(),
        spec,
        watch: progress_of(ctx, &s.task.name, s.attempt, config.max_steps),
    };
    let run = Run::attempt(
        config,
        &ctx.human,
        s.run_id.clone(),
        s.run_dir,
        s.workspace,
        sandbox,
    );
    let live = match run.start(Beginning::Attempt(s.eval)).await.live() {
        Ok(live) => live,
        Err(e) => {
            if let Some(services) = &services
                && let Err(e) = services.stop().await
            {
                tracing::warn!("cannot remove the task's services: {e}");
            }
            return Err(PhaseError::Start(e));
        }
    };
    let executor = live.executor().clone();
    let enforced = Enforced::of(executor.sandbox_security()).unwrap_or_default();
    note_sandbox(rec, services.as_deref(), enforced);
    Ok(Prepared {
        run: live,
        task: s.task,
        config,
        workdir: s.workdir,
        run_id: s.run_id,
        executor,
        agent: s.agent,
        verifier: s.verifier,
        mode: s.mode,
        services,
        seed_config: s.seed_config,
    })
}

/// How long the agent's sandbox may live (past that its supervisor ends
/// it, the net under a runner that hangs): its wait in the pool, the agent
/// phase and its wind-down, then test.sh in it (shared grading).
pub(super) fn agent_lifetime(task: &Task, ahead: Duration) -> Duration {
    let secs = |s: f64| Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX);
    ahead
        .saturating_add(secs(task.agent_timeout_secs))
        .saturating_add(WIND_DOWN)
        .saturating_add(secs(task.verifier_timeout_secs))
}

/// Shows the agent's steps as the attempt's phase in the suite's progress.
fn progress_of<'a>(ctx: &'a AttemptCtx, task: &str, attempt: u32, max_steps: u32) -> Watch<'a> {
    let task = task.to_string();
    Box::new(move |ev: &Event| {
        if let Event::ModelRequest { step, .. } = ev {
            let phase = format!("agent step {step}/{max_steps}");
            ctx.progress.phase(&task, attempt, &phase);
        }
    })
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
    b.max_time_secs = Some(crate::convert::u64_from_f64(task.agent_timeout_secs.ceil()));
    // The task's sizes are bytes already: set typed, under the flags'
    // bounds, never written out as text to be parsed again.
    let mut config = b.build()?;
    config.sandbox.memory_bytes = crate::config::memory_bytes(task.memory_bytes)?;
    if let Some(bytes) = task.storage_bytes {
        config.sandbox.disk_bytes = crate::config::disk_bytes(bytes)?;
    }
    Ok(config)
}
