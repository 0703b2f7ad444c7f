//! What runs in a sandbox, and killing all of it: `processes` lists every
//! process (of any uid) but runner's supervisor and its own helper,
//! `kill_all` leaves nothing else running, and the sandbox serves on.

use runner::exec::ProcessInfo;

use crate::support::executor::{cfg, docker, finish, req, run, start};
use crate::support::serial::serial;
use runner::exec::Processes;
use runner::exec::Users;

fn sleeps(procs: &[ProcessInfo]) -> Vec<(u32, String)> {
    let mut v: Vec<(u32, String)> = procs
        .iter()
        .filter(|p| p.cmdline == "sleep 301" || p.cmdline == "sleep 302")
        .map(|p| (p.uid, p.cmdline.clone()))
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn processes_of_every_uid_are_listed_and_kill_all_ends_them() {
    let _s = serial();
    let d = docker().await;
    let mut c = cfg("procs-killall");
    c.keep_background = true;
    let id = c.run_id.clone();
    let ex = start(c).await;
    assert!(ex.processes().await.unwrap().is_empty());
    run(&ex, "sleep 301 >/dev/null 2>&1 &", 10.0).await;
    ex.execute_as((0, 0), req("sleep 302 >/dev/null 2>&1 &", 10.0))
        .await
        .unwrap();
    // A command line chosen to break a line-based listing.
    run(
        &ex,
        "sh -c 'sleep 303; true' 'x\ny\\z' >/dev/null 2>&1 &",
        10.0,
    )
    .await;
    // Until the background processes have started their programs.
    let want = "sh -c sleep 303; true x\\x0ay\\x5cz";
    let mut procs = ex.processes().await.unwrap();
    for _ in 0..50 {
        if sleeps(&procs).len() == 2 && procs.iter().any(|p| p.cmdline == want) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        procs = ex.processes().await.unwrap();
    }
    eprintln!("{procs:?}");
    assert_eq!(
        sleeps(&procs),
        vec![
            (0, "sleep 302".to_string()),
            (1000, "sleep 301".to_string()),
        ],
        "{procs:?}"
    );
    assert!(
        procs.iter().any(|p| p.uid == 1000 && p.cmdline == want),
        "{procs:?}"
    );
    assert!(
        !procs.iter().any(|p| p.pid == 1
            || p.cmdline
                .starts_with(runner::exec::supervisor::binary::IN_SANDBOX)
            || p.cmdline.contains("--procs")),
        "the supervisor and the helper are left out: {procs:?}"
    );
    ex.kill_all().await.unwrap();
    let left = ex.processes().await.unwrap();
    assert!(left.is_empty(), "left running: {left:?}");
    assert_eq!(run(&ex, "echo next", 10.0).await.output, "next\n");
    // Twice is fine, with nothing to kill.
    ex.kill_all().await.unwrap();
    assert_eq!(run(&ex, "id -u", 10.0).await.output, "1000\n");
    finish(&d, ex, &id).await;
}
