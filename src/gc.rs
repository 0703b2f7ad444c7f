//! `runner gc`: removes containers and volumes left by runs whose runner
//! is gone or whose expiry has passed.

use crate::exec::docker;
use crate::terminal::visible;

/// Runs the sweep, prints what it removed, and returns the exit code.
pub async fn run() -> i32 {
    let client = match docker::connect().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {}", visible(&e.to_string()));
            eprintln!("hint: start the Docker daemon, or set DOCKER_HOST");
            return 2;
        }
    };
    match docker::gc(&client).await {
        Ok(report) => {
            // After the sandboxes are gone, their work can come back.
            let disks = docker::recover_disks(&client).await;
            for ws in &disks.restored {
                println!("gave a dead run's work back to {}", ws.display());
            }
            for c in &report.containers_removed {
                println!("removed container {}", visible(c));
            }
            for v in &report.volumes_removed {
                println!("removed volume {}", visible(v));
            }
            for e in &report.errors {
                eprintln!("warning: {}", visible(e));
            }
            eprintln!(
                "gc: removed {} containers and {} volumes",
                report.containers_removed.len(),
                report.volumes_removed.len()
            );
            if report.errors.is_empty() && disks.errors.is_empty() {
                0
            } else {
                2
            }
        }
        Err(e) => {
            eprintln!("error: {}", visible(&e.to_string()));
            2
        }
    }
}
