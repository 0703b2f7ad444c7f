//! Issue 24: a sandbox's filesystem changes are read from its overlay
//! upper directory on the host, which the sandbox writes. A root command
//! plants links there pointing at the host's files and directories (and
//! swaps a directory for a link while the walk runs): each is reported as
//! the entry it is, and nothing of the host behind it ever shows up.

use std::collections::BTreeSet;

use runner::exec::ChangeKind;
use runner::exec::docker::{engine_changes, upper_changes};

use crate::support::executor::*;
use crate::support::serial::serial;

/// The links, and a lower directory (`/usr/sbin`) made a link to `/`.
fn plant(canary_dir: &str) -> String {
    format!(
        r#"set -e
ln -s /etc/shadow /x
ln -s / /y
ln -s {canary_dir} /canary-link
mkdir -p /d && ln -s {canary_dir} /d/sub && ln -s /var/lib/docker /d/docker
rm -rf /usr/sbin && ln -s / /usr/sbin
echo under > /etc/runner-under-y
echo done"#
    )
}

#[tokio::test]
async fn links_planted_in_the_upper_directory_are_listed_never_followed() {
    let _s = serial();
    let d = docker().await;
    // A host directory the links name, with a file only the host has.
    let canary = tempfile::Builder::new()
        .prefix("runner-upperdir-canary")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    std::fs::write(canary.path().join("host-only-canary"), "host").expect("write");
    let mut c = cfg("upperdir-links");
    c.writable_rootfs = true;
    c.user = "0:0".into();
    let run_id = c.run_id.clone();
    let ex = start(c).await;
    let out = run(&ex, &plant(&canary.path().display().to_string()), 10.0).await;
    assert!(out.output.trim_end().ends_with("done"), "{out:?}");
    let cid = ex.container_id().to_string();
    let upper = upper_changes(&d, &cid)
        .await
        .unwrap_or_else(|why| panic!("the upper directory was not read: {why}"));
    let has = |k: ChangeKind, p: &str| upper.iter().any(|c| c.kind == k && c.path == p);
    for (k, p) in [
        (ChangeKind::Added, "/x"),
        (ChangeKind::Added, "/y"),
        (ChangeKind::Added, "/canary-link"),
        (ChangeKind::Added, "/d/sub"),
        (ChangeKind::Added, "/d/docker"),
        (ChangeKind::Modified, "/usr/sbin"),
        // A file of the container's own / that /y names.
        (ChangeKind::Added, "/etc/runner-under-y"),
    ] {
        assert!(has(k, p), "no {k:?} {p}: {upper:?}");
    }
    for c in upper.iter() {
        for link in [
            "/x/",
            "/y/",
            "/canary-link/",
            "/d/sub/",
            "/d/docker/",
            "/usr/sbin/",
        ] {
            assert!(!c.path.starts_with(link), "{} is behind a link", c.path);
        }
        assert!(!c.path.contains("host-only-canary"), "{}", c.path);
    }
    // The engine reads the container's merged view: the same list.
    let engine = engine_changes(&d, &cid).await.expect("engine diff");
    let set = |c: &runner::exec::FsChanges| -> BTreeSet<(String, String)> {
        c.iter()
            .map(|c| (format!("{:?}", c.kind), c.path.clone()))
            .collect()
    };
    assert_eq!(set(&upper), set(&engine));
    finish(&d, ex, &run_id).await;
}

#[tokio::test]
async fn a_directory_swapped_for_a_link_during_the_walk_is_never_entered() {
    let _s = serial();
    let d = docker().await;
    let mut c = cfg("upperdir-race");
    c.writable_rootfs = true;
    c.user = "0:0".into();
    c.keep_background = true;
    let run_id = c.run_id.clone();
    let ex = start(c).await;
    // Fills a directory, then swaps it for a link to / and back, forever.
    let out = run(
        &ex,
        "mkdir -p /race && (while :; do \
           rm -rf /race; mkdir /race; : > /race/f; rm -rf /race; ln -s / /race; \
         done >/dev/null 2>&1 &) ; echo started",
        10.0,
    )
    .await;
    assert!(out.output.contains("started"), "{out:?}");
    let cid = ex.container_id().to_string();
    let (mut read, mut gave_up) = (0, 0);
    for _ in 0..100 {
        match upper_changes(&d, &cid).await {
            Ok(found) => {
                read += 1;
                for c in found.iter() {
                    assert!(
                        !c.path.starts_with("/race/") || c.path == "/race/f",
                        "{} is behind a link",
                        c.path
                    );
                }
            }
            // A directory gone or become a link mid-walk: the engine is
            // asked instead.
            Err(_) => gave_up += 1,
        }
    }
    eprintln!("walks: {read} read, {gave_up} gave up");
    assert!(read > 0, "every walk gave up ({gave_up})");
    finish(&d, ex, &run_id).await;
}

#[tokio::test]
async fn a_forged_whiteout_neither_hides_a_change_nor_denies_the_evidence() {
    let _s = serial();
    let d = docker().await;
    let mut c = cfg("upperdir-forge");
    c.writable_rootfs = true;
    c.user = "0:0".into();
    c.cap_add = vec!["MKNOD".into()];
    let run_id = c.run_id.clone();
    let ex = start(c).await;
    // fuse-overlayfs refuses each (a 0:0 device is its whiteout, `.wh.`
    // names its markers); the failed mknod has been seen to leave /etc
    // unlistable through the merged view, so the engine's diff fails
    // ("readdirent: no such file or directory") while the upper
    // directory still reads.
    let out = run(
        &ex,
        "mknod /etc/runner-forged c 0 0; touch /etc/.wh.passwd /usr/.wh..wh..opq; \
         echo planted > /usr/runner-after-forge; echo done",
        10.0,
    )
    .await;
    assert!(out.output.trim_end().ends_with("done"), "{out:?}");
    let cid = ex.container_id().to_string();
    let upper = upper_changes(&d, &cid)
        .await
        .unwrap_or_else(|why| panic!("the upper directory was not read: {why}"));
    let found: Vec<(ChangeKind, &str)> = upper.iter().map(|c| (c.kind, c.path.as_str())).collect();
    assert!(
        found.contains(&(ChangeKind::Added, "/usr/runner-after-forge")),
        "{found:?}"
    );
    // Nothing of the image is reported gone: no marker was made.
    assert!(
        found.iter().all(|(k, _)| *k != ChangeKind::Deleted),
        "{found:?}"
    );
    let through = runner::exec::FsChangesOf::changes(&ex)
        .await
        .expect("changes()");
    assert_eq!(through, upper);
    finish(&d, ex, &run_id).await;
}
