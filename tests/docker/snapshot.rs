//! What a sandbox changed and keeping it: the engine's diff, a snapshot a
//! new sandbox starts from (the whole filesystem, none of the processes),
//! its removal, `runner gc` of a dead run's snapshot; and an executable
//! /tmp on a read-only root.

use std::collections::HashMap;

use bollard::models::{ContainerConfig, ContainerCreateBody};
use bollard::query_parameters::{CommitContainerOptionsBuilder, CreateContainerOptionsBuilder};
use runner::exec::ChangeKind;
use runner::exec::backend::Backend;
use runner::exec::docker::{
    DockerBackend, LABEL_CREATED, LABEL_EXPIRES, LABEL_MANAGED, LABEL_OWNER_HOST, LABEL_OWNER_PID,
    LABEL_OWNER_START, LABEL_RUN_ID, LABEL_SNAPSHOT, MANAGED_VALUE, SNAPSHOT_REPO,
};

use crate::support::docker::TINY;
use crate::support::executor::*;
use crate::support::serial::serial;
use runner::exec::FsChangesOf;
use runner::exec::Snapshots;

async fn image_exists(d: &bollard::Docker, image: &str) -> bool {
    d.inspect_image(image).await.is_ok()
}

#[tokio::test]
async fn a_snapshot_keeps_the_filesystem_and_none_of_the_processes() {
    let _s = serial();
    let d = docker().await;
    let mut c = cfg("snapshot");
    c.writable_rootfs = true;
    c.user = "0:0".into();
    c.keep_background = true;
    let id = c.run_id.clone();
    let ex = start(c).await;
    let out = run(
        &ex,
        "echo kept > /etc/runner-snapshot-test; \
         (sleep 300 >/dev/null 2>&1 &) ; echo ok",
        10.0,
    )
    .await;
    assert!(out.output.contains("ok"), "{out:?}");
    let changes = ex.changes().await.unwrap();
    assert_eq!(changes.omitted, 0);
    assert!(
        changes
            .iter()
            .any(|c| c.path == "/etc/runner-snapshot-test" && c.kind == ChangeKind::Added),
        "{changes:?}"
    );
    let signals = runner::eval::evidence::from_changes(&changes, Default::default());
    assert!(
        signals
            .iter()
            .all(|s| !s.detail.contains("runner-snapshot-test")),
        "a config file in /etc is no tamper signal: {signals:?}"
    );
    assert!(
        !stray_processes(&ex).await.is_empty(),
        "the background sleep runs in the first sandbox"
    );

    let image = ex.snapshot().await.unwrap();
    let info = d.inspect_image(&image).await.unwrap();
    // The original image's start-up, not the sandbox's supervisor.
    let base = d.inspect_image(TINY).await.unwrap().config.unwrap();
    let config = info.config.clone().unwrap();
    let shown = format!("{config:?}");
    assert_eq!(
        (
            config.entrypoint.unwrap_or_default(),
            &config.cmd,
            &config.working_dir
        ),
        (
            base.entrypoint.clone().unwrap_or_default(),
            &base.cmd,
            &base.working_dir
        ),
        "{shown}"
    );
    let labels = info.config.and_then(|c| c.labels).unwrap_or_default();
    assert_eq!(labels.get(LABEL_RUN_ID), Some(&id), "{labels:?}");
    assert_eq!(labels.get(LABEL_SNAPSHOT), Some(&id));
    assert!(
        info.repo_tags
            .unwrap_or_default()
            .iter()
            .any(|t| t.starts_with(&format!("{SNAPSHOT_REPO}:"))),
    );
    // The run is alive: gc leaves its snapshot alone.
    let report = runner::exec::docker::gc(&d).await.unwrap();
    assert!(!report.images_removed.contains(&image), "{report:?}");
    assert!(image_exists(&d, &image).await);

    let mut c2 = cfg("snapshot-from");
    c2.image = image.clone();
    let id2 = c2.run_id.clone();
    let from = start(c2).await;
    let out = run(&from, "cat /etc/runner-snapshot-test; id -u", 10.0).await;
    assert_eq!(out.output, "kept\n1000\n", "{out:?}");
    assert_eq!(
        stray_processes(&from).await,
        Vec::<String>::new(),
        "no process of the first sandbox"
    );
    // A file written in the new sandbox's /tmp runs (exec tmpfs).
    let out = run(
        &from,
        "printf '#!/bin/sh\\necho ran\\n' > /tmp/x.sh && chmod +x /tmp/x.sh && /tmp/x.sh",
        10.0,
    )
    .await;
    assert_eq!(out.output, "ran\n", "{out:?}");
    finish(&d, from, &id2).await;
    finish(&d, ex, &id).await;

    DockerBackend.remove_image(&image).await.unwrap();
    assert!(!image_exists(&d, &image).await, "the snapshot is removed");
    DockerBackend
        .remove_image(&image)
        .await
        .expect("an image already gone counts as removed");
}

#[tokio::test]
async fn gc_removes_the_snapshot_of_a_dead_run() {
    let _s = serial();
    let d = docker().await;
    let run = run_id("snapshot-gc");
    let name = format!("runner-{run}-commitsrc");
    let created = d
        .create_container(
            Some(CreateContainerOptionsBuilder::new().name(&name).build()),
            ContainerCreateBody {
                image: Some(TINY.into()),
                entrypoint: Some(vec!["true".into()]),
                network_disabled: Some(true),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    // Labels of a run whose runner is gone (no such pid here).
    let labels: HashMap<String, String> = [
        (LABEL_MANAGED, MANAGED_VALUE.to_string()),
        (LABEL_RUN_ID, run.clone()),
        (LABEL_OWNER_PID, "4194303".into()),
        (LABEL_OWNER_START, "1".into()),
        (
            LABEL_OWNER_HOST,
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .unwrap()
                .trim()
                .to_string(),
        ),
        (LABEL_CREATED, "1".into()),
        (LABEL_EXPIRES, "9999999999".into()),
        (LABEL_SNAPSHOT, run.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let commit = |tag: String, labels: HashMap<String, String>| {
        let d = d.clone();
        let id = created.id.clone();
        async move {
            d.commit_container(
                CommitContainerOptionsBuilder::new()
                    .container(&id)
                    .repo(SNAPSHOT_REPO)
                    .tag(&tag)
                    .pause(false)
                    .build(),
                ContainerConfig {
                    labels: Some(labels),
                    ..Default::default()
                },
            )
            .await
            .unwrap()
            .id
        }
    };
    let dead = commit(format!("{run}-dead"), labels.clone()).await;
    // Not a snapshot: the same labels without runner's snapshot label
    // (say, an image someone built from a snapshot) stays.
    let mut other_labels = labels.clone();
    other_labels.remove(LABEL_SNAPSHOT);
    other_labels.insert("test.marker".into(), run.clone());
    let other = commit(format!("{run}-other"), other_labels).await;
    assert_ne!(dead, other);
    d.remove_container(&created.id, None).await.unwrap();

    let report = runner::exec::docker::gc(&d).await.unwrap();
    let gone = !image_exists(&d, &dead).await;
    let kept = image_exists(&d, &other).await;
    let _ = d
        .remove_image(
            &other,
            None::<bollard::query_parameters::RemoveImageOptions>,
            None,
        )
        .await;
    let _ = d
        .remove_image(
            &dead,
            None::<bollard::query_parameters::RemoveImageOptions>,
            None,
        )
        .await;
    assert!(gone, "the dead run's snapshot is removed: {report:?}");
    assert!(kept, "an image without the snapshot label stays");
}
