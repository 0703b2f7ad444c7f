//! Finding 6: OOM kills were checked only when the command itself exited
//! 137, so the OOM kill of a pipeline member or of a child was reported as
//! a normal exit. Every command now compares the container's OOM-kill
//! count before and after.

use runner::exec::Executor;
use serde_json::json;

use crate::support::binary::{Dir, of_type, run as run_cli};
use crate::support::docker::{BOOKWORM, require_images};
use crate::support::executor::*;
use crate::support::serial::serial;
use runner::exec::ExecutorExt;

/// Allocates (and touches) 1 GiB: far over a 256 MiB limit.
const HOG: &str = "python3 -c 'b=bytearray(1<<30)'";

#[tokio::test]
async fn oom_of_a_pipeline_member_or_a_child_is_reported() {
    let _s = serial();
    let d = docker().await;
    require_images(&[BOOKWORM]);
    let mut c = cfg("sec-oom");
    c.image = BOOKWORM.into();
    c.memory_bytes = 256 << 20;
    let id = c.run_id.clone();
    let ex = start(c).await;
    if on_gvisor(&ex) {
        // The sandbox's memory is gVisor's kernel's on the host: over the
        // limit the whole sandbox ends, and that is what must be said.
        let err = ex
            .execute(req(&format!("{HOG} | cat"), 60.0))
            .await
            .expect_err("under gVisor the sandbox ends at its memory limit");
        let msg = err.to_string();
        assert!(
            msg.contains("sandbox died") && msg.contains("memory limit"),
            "{msg}"
        );
        let _ = ex.shutdown().await;
        drop(ex);
        assert!(containers_of(&d, &id).await.is_empty(), "containers left");
        return;
    }

    // The pipeline's exit code is cat's: 0.
    let pipe = run(&ex, &format!("{HOG} | cat"), 60.0).await;
    eprintln!("pipeline: {pipe:?}");
    assert!(pipe.oom_killed, "pipeline member OOM-killed: {pipe:?}");
    assert_eq!(
        pipe.exit_code,
        Some(0),
        "the pipeline's own exit code is kept"
    );
    assert!(pipe.output.contains("out of memory"), "{pipe:?}");

    let fine = run(&ex, "echo fine", 10.0).await;
    assert!(!fine.oom_killed, "{fine:?}");
    assert_eq!(fine.output, "fine\n");

    // A child killed while the shell goes on and exits 0.
    let child = run(&ex, &format!("{HOG} || echo child=$?"), 60.0).await;
    eprintln!("child: {child:?}");
    assert!(child.oom_killed, "{child:?}");
    assert_eq!(child.exit_code, Some(0));
    assert!(child.output.contains("child=137"), "{child:?}");

    // A plain `exit 137` is still not mistaken for an OOM kill.
    let fake = run(&ex, "exit 137", 10.0).await;
    assert!(!fake.oom_killed && fake.exit_code == Some(137), "{fake:?}");
    finish(&d, ex, &id).await;
}

#[test]
fn oom_of_a_pipeline_member_reaches_the_trajectory() {
    let _s = serial();
    require_images(&[BOOKWORM]);
    let d = Dir::new();
    let s = d
        .write(
            "script.json",
            &json!([
                {"tool_calls": [{"name": "bash", "input": {"command": format!("{HOG} | cat")}}]},
                {"text": "done", "expect": "out of memory"}
            ])
            .to_string(),
        )
        .display()
        .to_string();
    let r = run_cli(d.scripted(&s).args([
        "--executor",
        "docker",
        "--image",
        BOOKWORM,
        "--memory",
        "256m",
        "go",
    ]));
    r.expect_code(0);
    let events = r.events();
    let results = of_type(&events, "tool_result");
    eprintln!("tool_result: {}", results[0]);
    assert_eq!(results[0]["oom_killed"], true, "{}", r.explain());
    assert_eq!(results[0]["exit_code"], 0, "{}", r.explain());
}
