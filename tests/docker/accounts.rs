//! Seeding reads an image's accounts: its configured user and its
//! /etc/passwd and /etc/group, a link among them refused (never followed),
//! which `exec::accounts` resolves as Docker would.

use std::process::Command;

use runner::exec::accounts::resolve;

use crate::support::docker::TINY;
use crate::support::executor::{docker, run_id};
use crate::support::serial::serial;

#[tokio::test]
async fn seeding_returns_the_image_user_and_its_accounts_but_no_link() {
    let _s = serial();
    let _d = docker().await;
    let id = run_id("seed-accounts");
    let tag = format!("runner-test-{}:accounts", id.to_lowercase());
    let ctx = tempfile::tempdir().unwrap();
    std::fs::write(
        ctx.path().join("Dockerfile"),
        format!(
            "FROM {TINY}\n\
             RUN echo 'agent:x:1234:2345:Agent:/home/agent:/bin/sh' >> /etc/passwd \
             && mv /etc/group /etc/group.real && ln -s /etc/group.real /etc/group \
             && mkdir -p /app && echo start > /app/state.txt\n\
             USER agent\n\
             WORKDIR /app\n"
        ),
    )
    .unwrap();
    let built = Command::new("docker")
        .env("DOCKER_BUILDKIT", "0")
        .args(["build", "-q", "-t", &tag, "."])
        .current_dir(ctx.path())
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let host = tempfile::tempdir().unwrap();
    let seeded = runner::exec::docker::seed_workspace(&tag, None, host.path(), &id).await;
    let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
    let seeded = seeded.unwrap();
    assert_eq!(seeded.workdir, "/app");
    assert_eq!(
        std::fs::read_to_string(host.path().join("state.txt")).unwrap(),
        "start\n"
    );
    assert_eq!(seeded.image_user.as_deref(), Some("agent"));
    let passwd = seeded.passwd.as_deref().unwrap();
    assert!(passwd.starts_with("root:"), "{passwd}");
    assert!(passwd.contains("agent:x:1234:2345:"), "{passwd}");
    assert_eq!(seeded.group, None, "a link is not followed");
    let a = resolve("agent", seeded.passwd.as_deref(), seeded.group.as_deref()).unwrap();
    assert_eq!((a.uid, a.gid, a.home.as_str()), (1234, 2345, "/home/agent"));
    // The tiny image itself sets no user: root.
    let host = tempfile::tempdir().unwrap();
    let plain = runner::exec::docker::seed_workspace(TINY, None, host.path(), &id)
        .await
        .unwrap();
    assert_eq!(plain.image_user, None);
    assert!(plain.group.as_deref().unwrap().starts_with("root:"));
}
