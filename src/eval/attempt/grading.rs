//! After the agent: the tamper signals, the grading in the attempt's mode
//! (shared, separate, isolated), stopping the agent's processes and
//! collecting its artifacts.

use super::*;

/// What the agent changed on the verifier's path, and what it left
/// running, read before grading starts (a backend that cannot tell gives
/// none). Runner's own mount points and the oracle's /solution are not
/// the agent's changes.
pub(super) async fn collect_signals(p: &Prepared<'_>, agent: AgentKind) -> Vec<evidence::Signal> {
    let executor = p.executor.as_ref();
    let watched = evidence::Watched {
        home: Some(&p.agent.home),
        workdir: Some(&p.workdir),
    };
    let mut signals = Vec::new();
    let extras = executor.extras();
    let changes = match extras.changes {
        Some(c) => Some(c.changes().await),
        None => None,
    };
    match changes {
        None => {}
        Some(Ok(mut changes)) => {
            let mut own = vec![
                crate::exec::supervisor::binary::DIR_IN_SANDBOX,
                crate::exec::docker::CHANNEL_DIR_IN_SANDBOX,
            ];
            if agent == AgentKind::Oracle {
                own.push(crate::eval::oracle::SOLUTION_DIR);
            }
            changes.changes.retain(|c| {
                !own.iter()
                    .any(|o| c.path == *o || c.path.starts_with(&format!("{o}/")))
            });
            signals.extend(evidence::from_fs_changes(&changes, watched));
        }
        Some(Err(e)) => tracing::warn!("cannot list the agent sandbox's changes: {e}"),
    }
    signals
        .extend(crate::eval::workdir_config::signals(executor, &p.workdir, &p.seed_config).await);
    let procs = match extras.processes {
        Some(p) => Some(p.processes().await),
        None => None,
    };
    match procs {
        None => {}
        Some(Ok(procs)) => {
            let procs: Vec<(u32, u32, String)> = procs
                .into_iter()
                .map(|p| (p.pid, p.uid, p.cmdline))
                .collect();
            signals.extend(evidence::from_processes(&procs));
        }
        Some(Err(e)) => tracing::warn!("cannot list the agent sandbox's processes: {e}"),
    }
    signals
}

/// Grades as `p.mode` says; the agent's sandbox is removed on every path.
pub(super) async fn grade(
    ctx: &AttemptCtx,
    p: &Prepared<'_>,
    image: &str,
    run_path: &Path,
    cancel: &CancellationToken,
) -> Result<Verdict, PhaseError> {
    let fresh = |image| fresh_spec(ctx, p, image);
    match p.mode {
        GradingMode::Shared => {
            let verdict = crate::eval::grade::shared::grade(
                p.executor.as_ref(),
                &p.task,
                (p.agent.uid, p.agent.gid),
                (p.verifier.uid, p.verifier.gid),
                &p.verifier.home,
                p.run_dir(),
                cancel,
            )
            .await;
            let removed = p.executor.shutdown().await;
            let verdict = verdict.map_err(PhaseError::Verify)?;
            removed.map_err(PhaseError::Teardown)?;
            Ok(verdict)
        }
        GradingMode::Isolated => {
            stop_agent_processes(p).await;
            p.executor.shutdown().await.map_err(PhaseError::Teardown)?;
            crate::eval::grade::fresh::grade(fresh(image), cancel)
                .await
                .map_err(PhaseError::Verify)
        }
        GradingMode::Snapshot => {
            stop_agent_processes(p).await;
            let snap = snapshot(p.executor.as_ref()).await;
            let removed = p.executor.shutdown().await;
            let snap = snap.map_err(PhaseError::Snapshot)?;
            if let Err(e) = removed {
                if let Err(e) = ctx.backend.remove_image(&snap).await {
                    tracing::warn!("cannot remove the snapshot {snap}: {e}");
                }
                return Err(PhaseError::Teardown(e));
            }
            let spec = GradeSpec {
                agent_files_here: true,
                ..fresh(&snap)
            };
            let verdict = crate::eval::grade::fresh::grade(spec, cancel).await;
            if let Err(e) = ctx.backend.remove_image(&snap).await {
                tracing::warn!("cannot remove the snapshot {snap}: {e}");
            }
            verdict.map_err(PhaseError::Verify)
        }
        GradingMode::Separate => {
            stop_agent_processes(p).await;
            let staged = collect_artifacts(p, run_path).await;
            p.executor.shutdown().await.map_err(PhaseError::Teardown)?;
            let uploads = staged.map_err(PhaseError::Artifacts)?;
            // Harbor's precedence: `[verifier.environment] docker_image`,
            // else an image built from tests/ (which then bundles the
            // tests), else a fresh copy of the task's own environment.
            let tests_dir = p.task.tests_dir();
            let bundled = p.task.verifier_image.is_none() && tests_dir.join("Dockerfile").is_file();
            let source = match &p.task.verifier_image {
                Some(img) => Some(ImageSource::Named(img)),
                None if bundled => Some(ImageSource::Build {
                    context: &tests_dir,
                    timeout: Duration::from_secs_f64(p.task.build_timeout_secs),
                    label: &p.task.name,
                    log: None,
                }),
                None => None,
            };
            let verifier_image = match source {
                Some(src) => ctx
                    .backend
                    .prepare_image(src)
                    .await
                    .map_err(|e| PhaseError::Image(format!("verifier image: {e}")))?,
                None => image.to_string(),
            };
            let mut spec = GradeSpec {
                uploads,
                upload_tests: !bundled,
                ..fresh(&verifier_image)
            };
            spec.sandbox.workspace = None;
            spec.sandbox.hardened = false;
            crate::eval::grade::fresh::grade(spec, cancel)
                .await
                .map_err(PhaseError::Verify)
        }
    }
}

/// The agent's sandbox saved as an image, on a backend that can.
async fn snapshot(sandbox: &dyn Executor) -> Result<String, ExecError> {
    match sandbox.extras().snapshots {
        Some(s) => s.snapshot().await,
        None => Err(ExecError::Incapable {
            backend: sandbox.kind(),
            what: "save a sandbox's filesystem as an image",
            hint: "grade with --grading shared, separate or isolated on this executor",
        }),
    }
}

/// Before the agent's sandbox is copied, committed or removed: nothing of
/// the agent's may keep writing, nor outlive a sandbox kept for its work.
pub(super) async fn stop_agent_processes(p: &Prepared<'_>) {
    let Some(procs) = p.executor.extras().processes else {
        return;
    };
    if let Err(e) = procs.kill_all().await {
        tracing::warn!("cannot stop the agent's processes: {e}");
    }
}

/// Grading in a fresh sandbox of `image`, with the workspace copied in.
pub(super) fn fresh_spec<'a>(
    ctx: &'a AttemptCtx,
    p: &'a Prepared<'_>,
    image: &'a str,
) -> GradeSpec<'a> {
    GradeSpec {
        sandbox: VerifierSandbox {
            task: &p.task,
            image,
            workspace: Some(p.workspace()),
            workdir: &p.workdir,
            // The verifier's own network (`[verifier] network_mode`),
            // given only with --allow-internet, as the agent's.
            network: network_for(&p.task.effective_verifier_network(), ctx.allow_internet),
            egress_network: ctx.egress_network.clone(),
            runtime: p.config.sandbox.runtime.clone(),
            seccomp: p.config.sandbox.seccomp.clone(),
            run_id: format!("{}-verify", p.run_id),
            redactor: &ctx.redactor,
            services: p.services.as_deref(),
            hardened: true,
            verifier_home: &p.verifier.home,
        },
        uploads: Vec::new(),
        backend: ctx.backend.as_ref(),
        run_dir: p.run_dir(),
        agent_files_here: false,
        upload_tests: true,
        verifier_user: Some((p.verifier.uid, p.verifier.gid)),
    }
}

/// Copies the task's artifacts (and the conventional /logs/artifacts) out
/// of the agent's sandbox into the run directory, for a separate verifier:
/// each a directory uploaded back to its own path.
pub(super) async fn collect_artifacts(
    p: &Prepared<'_>,
    run_path: &Path,
) -> Result<Vec<(PathBuf, String)>, ExecError> {
    let root = run_path.join("artifacts");
    let mut sources: Vec<String> = vec![ARTIFACTS_DIR.to_string()];
    for a in &p.task.artifacts {
        if a.service.as_deref().is_some_and(|s| s != "main") {
            continue;
        }
        let src = if a.source.starts_with('/') {
            a.source.clone()
        } else {
            format!("{}/{}", p.workdir, a.source)
        };
        if !sources.contains(&src) {
            sources.push(src);
        }
    }
    let mut uploads = Vec::new();
    for (i, src) in sources.into_iter().enumerate() {
        let host = root.join(i.to_string());
        std::fs::create_dir_all(&host)?;
        match p
            .executor
            .download_dir(&p.executor.path(&src), &host, MAX_ARTIFACT_BYTES)
            .await
        {
            Ok(()) => uploads.push((host, src)),
            // An artifact the agent did not make is not handed over.
            Err(e) if !e.is_fatal() || matches!(e, ExecError::Refused(_)) => {
                tracing::info!("artifact {src} not collected: {e}");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(uploads)
}
