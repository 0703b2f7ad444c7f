//! Issue 24: the filesystem changes read from a sandbox's overlay upper
//! directory are the engine's own diff, change kind by change kind, on
//! both images and on the runtime under test; and how much faster.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use runner::eval::evidence::from_fs_changes;
use runner::exec::docker::{DockerExecutor, engine_changes, upper_changes};
use runner::exec::{ChangeKind, FsChanges, FsChangesOf};

use crate::support::docker::{BOOKWORM, TINY, require_images};
use crate::support::executor::*;
use crate::support::serial::serial;

/// Paths of an image that exist in its layers, for the changes that need
/// something to change.
struct Victims {
    image: &'static str,
    delete_file: &'static str,
    delete_tree: &'static str,
    /// A directory with content, removed and made again (opaque).
    reopen: &'static str,
    /// A name inside `reopen` made again as a directory.
    reopen_child: &'static str,
    link_src: &'static str,
    to_symlink: &'static str,
    chown_file: &'static str,
    chown_dir: &'static str,
}

const TINY_VICTIMS: Victims = Victims {
    image: TINY,
    delete_file: "/usr/bin/cal",
    delete_tree: "/usr/sbin",
    reopen: "/sbin",
    // A link below, a directory now.
    reopen_child: "arp",
    link_src: "/etc/passwd",
    to_symlink: "/usr/bin/cut",
    chown_file: "/bin/busybox",
    chown_dir: "/home",
};

const BOOKWORM_VICTIMS: Victims = Victims {
    image: BOOKWORM,
    delete_file: "/etc/debian_version",
    delete_tree: "/etc/cron.daily",
    reopen: "/etc/apt",
    reopen_child: "apt.conf.d",
    link_src: "/usr/bin/ls",
    to_symlink: "/usr/bin/cut",
    chown_file: "/etc/issue.net",
    chown_dir: "/usr/sbin",
};

/// Every kind of change, as root and as uid 1000.
fn script(v: &Victims) -> String {
    format!(
        r#"set -e
echo a > /etc/runner-added
mkdir -p /usr/runner-new/a/b && echo b > /usr/runner-new/a/b/f
echo 'runnertest:x:4242:' >> /etc/group
chmod 600 /etc/passwd
chown 1000:1000 {chown_dir} {chown_file}
chown -h 1000:1000 /etc/mtab
rm {delete_file}
rm -rf {delete_tree}
rm -rf {reopen} && mkdir {reopen} && mkdir {reopen}/{reopen_child} && echo n > {reopen}/new
rm {to_symlink} && ln -s /etc/shadow {to_symlink}
ln -s /etc/shadow /etc/runner-shadow-link
ln {link_src} /usr/runner-hardlink
mkfifo /etc/runner-fifo
# gVisor refuses device nodes; runc makes one.
mknod /etc/runner-null c 1 3 2>/dev/null || true
touch "$(printf '/etc/runner-nl\nx')" "$(printf '/etc/runner-\377\376x')"
echo t > /tmp/runner-tmp
echo h > "$HOME/runner-home"
mkdir /usr/runner-user && chown 1000:1000 /usr/runner-user
su -s /bin/sh sandbox -c '
  set -e
  echo u > /usr/runner-user/f
  mkdir -p /usr/runner-user/d/e && echo e > /usr/runner-user/d/e/g
  ln -s / /usr/runner-user/root-link
  mkfifo /usr/runner-user/p
  touch /usr/runner-user/f2 && rm /usr/runner-user/f2
  chmod 700 /usr/runner-user/d
  echo mine > /tmp/runner-user-tmp
'
echo done"#,
        delete_file = v.delete_file,
        delete_tree = v.delete_tree,
        reopen = v.reopen,
        reopen_child = v.reopen_child,
        link_src = v.link_src,
        to_symlink = v.to_symlink,
        chown_file = v.chown_file,
        chown_dir = v.chown_dir,
    )
}

/// A diff as a set of (kind, path).
fn set_of(c: &FsChanges) -> BTreeSet<(String, String)> {
    c.iter()
        .map(|c| (format!("{:?}", c.kind), c.path.clone()))
        .collect()
}

/// A root sandbox of `image` with a writable root filesystem.
async fn root_sandbox(test: &str, image: &str) -> (DockerExecutor, String) {
    let mut c = cfg(test);
    c.image = image.into();
    c.writable_rootfs = true;
    c.user = "0:0".into();
    // A root that can chown, make devices and become uid 1000.
    c.cap_add = [
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "MKNOD",
        "SETUID",
        "SETGID",
    ]
    .map(String::from)
    .to_vec();
    let id = c.run_id.clone();
    (start(c).await, id)
}

async fn same_as_the_engine(v: &Victims) {
    let d = docker().await;
    let (ex, run_id) = root_sandbox("upperdir-kinds", v.image).await;
    let out = run(&ex, &script(v), 30.0).await;
    assert!(out.output.trim_end().ends_with("done"), "{out:?}");
    let cid = ex.container_id().to_string();
    let upper = upper_changes(&d, &cid)
        .await
        .unwrap_or_else(|why| panic!("the upper directory was not read: {why}"));
    let engine = engine_changes(&d, &cid).await.expect("engine diff");
    let through = ex.changes().await.expect("changes");
    assert_eq!((upper.omitted, engine.omitted), (0, 0));
    let (mine, theirs) = (set_of(&upper), set_of(&engine));
    assert_eq!(
        mine.len(),
        upper.len(),
        "no path is listed twice: {upper:?}"
    );
    let only_mine: Vec<_> = mine.difference(&theirs).collect();
    let only_theirs: Vec<_> = theirs.difference(&mine).collect();
    assert!(
        only_mine.is_empty() && only_theirs.is_empty(),
        "{}: only in the upper walk: {only_mine:?}\nonly in the engine's diff: {only_theirs:?}",
        v.image
    );
    assert_eq!(
        set_of(&through),
        mine,
        "changes() reads the upper directory"
    );
    // What the script must have produced, so an empty diff cannot pass.
    let has = |k: ChangeKind, p: &str| upper.iter().any(|c| c.kind == k && c.path == p);
    let reopened = format!("{}/{}", v.reopen, v.reopen_child);
    for (k, p) in [
        (ChangeKind::Added, "/etc/runner-added"),
        (ChangeKind::Added, "/usr/runner-new/a/b/f"),
        (ChangeKind::Modified, "/etc/group"),
        (ChangeKind::Modified, "/etc/passwd"),
        (ChangeKind::Modified, v.chown_dir),
        (ChangeKind::Modified, v.chown_file),
        (ChangeKind::Deleted, v.delete_file),
        (ChangeKind::Deleted, v.delete_tree),
        (ChangeKind::Modified, v.to_symlink),
        (ChangeKind::Added, "/usr/runner-hardlink"),
        (ChangeKind::Added, "/etc/runner-nl\nx"),
        (ChangeKind::Added, "/etc/runner-\u{fffd}\u{fffd}x"),
        (ChangeKind::Added, "/usr/runner-user/d/e/g"),
        (ChangeKind::Added, "/usr/runner-user/root-link"),
        (ChangeKind::Modified, reopened.as_str()),
    ] {
        assert!(has(k, p), "{}: no {k:?} {p:?} in {upper:?}", v.image);
    }
    // gVisor keeps a named pipe in its own memory: no layer on the host
    // has it, so neither list does.
    assert_eq!(
        has(ChangeKind::Added, "/etc/runner-fifo"),
        !on_gvisor(&ex),
        "{upper:?}"
    );
    assert!(
        upper.iter().all(|c| !c.path.contains("-home")),
        "HOME is a mount: {upper:?}"
    );
    // The engine lists in no fixed order (Go map iteration), and the
    // evidence names the first few of a kind in list order: the same list
    // in the same order gives the same signals.
    let sorted = |c: &FsChanges| {
        let mut c = c.clone();
        c.changes
            .sort_by(|a, b| (&a.path, a.kind as u8).cmp(&(&b.path, b.kind as u8)));
        from_fs_changes(&c, Default::default())
    };
    assert_eq!(sorted(&upper), sorted(&engine), "the same signals");
    finish(&d, ex, &run_id).await;
}

#[tokio::test]
async fn the_upper_walk_lists_what_the_engine_lists_on_tiny() {
    let _s = serial();
    same_as_the_engine(&TINY_VICTIMS).await;
}

#[tokio::test]
async fn the_upper_walk_lists_what_the_engine_lists_on_bookworm() {
    let _s = serial();
    require_images(&[BOOKWORM]);
    same_as_the_engine(&BOOKWORM_VICTIMS).await;
}

/// Issue 24's measurement: `changes()` of a bookworm sandbox with a few
/// changes, the engine's diff against the upper walk, 5 runs each.
/// `cargo test --test docker upperdir_timing -- --ignored --nocapture`
#[tokio::test]
#[ignore = "a measurement, not a check"]
async fn upperdir_timing() {
    let _s = serial();
    require_images(&[BOOKWORM]);
    let d = docker().await;
    let (ex, run_id) = root_sandbox("upperdir-timing", BOOKWORM).await;
    let out = run(
        &ex,
        "echo a > /etc/x && mkdir -p /opt/a/b && echo b > /opt/a/b/c && \
         echo m >> /etc/group && rm /etc/debian_version && echo ok",
        10.0,
    )
    .await;
    assert!(out.output.contains("ok"), "{out:?}");
    let cid = ex.container_id().to_string();
    let mut engine = Vec::new();
    let mut upper = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let e = engine_changes(&d, &cid).await.expect("engine");
        engine.push(t.elapsed());
        let t = Instant::now();
        let u = upper_changes(&d, &cid).await.expect("upper");
        upper.push(t.elapsed());
        assert_eq!(set_of(&e), set_of(&u));
    }
    let ms = |v: &[Duration]| {
        v.iter()
            .map(|d| format!("{:.1}", d.as_secs_f64() * 1000.0))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!("engine diff (ms): {}", ms(&engine));
    println!("upper walk  (ms): {}", ms(&upper));
    finish(&d, ex, &run_id).await;
}
