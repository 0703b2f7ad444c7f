//! Persistent shells through the supervisor, where they differ from the
//! local backend's (which `tests/local/shell.rs` covers).

use runner::exec::shell::ShellMode;

use crate::support::executor::{cfg, docker, finish, run, start};
use crate::support::serial::serial;

/// A job kept in the background inherits the state descriptor and never
/// closes it: the state still arrives, whole, and is kept.
#[tokio::test]
async fn a_kept_background_job_holding_the_state_descriptor_does_not_lose_the_state() {
    let _s = serial();
    let d = docker().await;
    let mut c = cfg("shell-keep");
    c.shell = ShellMode::Persistent;
    c.keep_background = true;
    let id = c.run_id.clone();
    let ex = start(c).await;
    let out = run(
        &ex,
        "sleep 1000 >/dev/null 2>&1 & cd /tmp; export Y=2; echo ok",
        10.0,
    )
    .await;
    assert_eq!(out.output, "ok\n", "{out:?}");
    let out = run(&ex, "pwd; echo \"Y=$Y\"", 10.0).await;
    assert_eq!(out.output, "/tmp\nY=2\n", "{out:?}");
    finish(&d, ex, &id).await;
}
