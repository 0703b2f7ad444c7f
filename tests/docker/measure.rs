//! Overhead numbers, printed, not asserted. Run with:
//! cargo test --test docker -- --ignored measure --nocapture

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::docker::TINY;
use crate::support::executor::*;
use crate::support::serial::serial;

fn mean(v: &[Duration]) -> f64 {
    v.iter().map(Duration::as_secs_f64).sum::<f64>() / v.len() as f64 * 1000.0
}

fn cli(args: &[&str]) {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
#[ignore = "measurement, run by hand"]
async fn measure_overhead() {
    let _s = serial();
    let d = docker().await;
    const CALLS: usize = 30;
    const LIVES: usize = 8;
    let c = cfg("measure");
    let id = c.run_id.clone();
    let ex = start(c).await;
    run(&ex, "true", 10.0).await;
    let mut ours = Vec::new();
    for _ in 0..CALLS {
        let t = Instant::now();
        run(&ex, "true", 10.0).await;
        ours.push(t.elapsed());
    }
    let mut theirs = Vec::new();
    for _ in 0..CALLS {
        let t = Instant::now();
        cli(&[
            "exec",
            "-u",
            "1000:1000",
            ex.container_id(),
            "bash",
            "-lc",
            "true",
        ]);
        theirs.push(t.elapsed());
    }
    finish(&d, ex, &id).await;
    let mut life = Vec::new();
    for _ in 0..LIVES {
        let c = cfg("measure-life");
        let id = c.run_id.clone();
        let t = Instant::now();
        let ex = start(c).await;
        run(&ex, "true", 10.0).await;
        use runner::exec::ExecutorExt;
        ex.shutdown().await.unwrap();
        life.push(t.elapsed());
        drop(ex);
        assert!(containers_of(&d, &id).await.is_empty());
    }
    let mut cli_life = Vec::new();
    for _ in 0..LIVES {
        let t = Instant::now();
        cli(&["run", "--rm", "--network", "none", TINY, "true"]);
        cli_life.push(t.elapsed());
    }
    eprintln!(
        "execute(\"true\")                      mean {:.1} ms over {CALLS}",
        mean(&ours)
    );
    eprintln!(
        "docker exec C bash -lc true (CLI)    mean {:.1} ms over {CALLS}",
        mean(&theirs)
    );
    eprintln!(
        "start+true+shutdown                  mean {:.1} ms over {LIVES}",
        mean(&life)
    );
    eprintln!(
        "docker run --rm --network none true  mean {:.1} ms over {LIVES}",
        mean(&cli_life)
    );
}
