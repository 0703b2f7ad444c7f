//! Finding 1: nothing runner writes on the host can be redirected by what
//! the sandbox creates. The exact attack: `cd proj && runner --workspace .`
//! used to put `./runs/<id>/` inside the workspace, so a command could plant
//! a link at the next command's output file and have runner write through
//! it into any host file.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::support::binary::{Dir, Exec, of_type, run};

/// A root-owned, mode-600 host file outside everything the run may write.
fn canary(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("secret");
    std::fs::write(&p, "host secret\n").expect("write canary");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    p
}

fn script(dir: &Dir, canary: &Path) -> String {
    let c = canary.display();
    let plant = format!(
        "for d in runs/*/outputs /workspace/runs/*/outputs; do [ -d \"$d\" ] || continue; \
         for s in 1 2 3 4; do ln -sf {c} \"$d/step-000$s-call-0.txt\"; done; \
         ln -sf {c} \"$d/../trajectory.jsonl.new\"; echo planted in $d; done; echo scan done"
    );
    let turns = serde_json::json!({"turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": plant}}]},
        {"tool_calls": [{"name": "bash", "input": {"command": "echo OVERWRITTEN-BY-THE-SANDBOX"}}]},
        {"text": "done"}
    ]});
    dir.write("script.json", &turns.to_string())
        .display()
        .to_string()
}

#[test]
fn a_link_planted_in_the_run_directory_never_redirects_a_write() {
    let ws = Dir::new();
    let elsewhere = Dir::new();
    let home = Dir::new();
    let canary = canary(elsewhere.path());
    let script = script(&elsewhere, &canary);
    let mut cmd = ws.scripted(&script);
    cmd.env("HOME", home.path())
        .args(Exec::Docker.args())
        .args(["--workspace", ".", "attack the run directory"]);
    let ran = run(&mut cmd);
    ran.expect_code(0);
    assert_eq!(
        std::fs::read_to_string(&canary).expect("read canary"),
        "host secret\n",
        "the host file was written through a planted link{}",
        ran.explain()
    );
    let stderr = ran.stderr();
    assert!(
        stderr.contains("run directory:") && stderr.contains("inside the workspace"),
        "the moved run directory is not named{}",
        ran.explain()
    );
    assert!(
        !ws.path().join("runs").exists(),
        "the run directory is still inside the workspace{}",
        ran.explain()
    );
    // The second command's output went to its own file, in a run directory
    // the sandbox never saw.
    let events = ran.events();
    let outputs: Vec<String> = of_type(&events, "tool_result")
        .iter()
        .filter_map(|e| e["full_output"].as_str().map(str::to_string))
        .collect();
    assert_eq!(outputs.len(), 2, "{}", ran.explain());
    assert!(!outputs[1].starts_with(&ws.path().display().to_string()));
    let text = std::fs::read_to_string(&outputs[1]).expect("output file");
    assert!(text.contains("OVERWRITTEN-BY-THE-SANDBOX"), "{text}");
    assert!(
        std::fs::symlink_metadata(&outputs[1])
            .expect("stat")
            .is_file(),
        "the output file is a link"
    );
}

#[test]
fn an_explicit_run_directory_inside_the_workspace_is_refused() {
    let ws = Dir::new();
    let home = Dir::new();
    let script = ws.write("script.json", r#"{"turns": [{"text": "hi"}]}"#);
    let mut cmd = ws.scripted(&script.display().to_string());
    cmd.env("HOME", home.path())
        .args(Exec::Docker.args())
        .args(["--workspace", ".", "--run-dir", "runs/mine", "x"]);
    let ran = run(&mut cmd);
    ran.expect_code(2);
    let stderr = ran.stderr();
    assert!(
        stderr.contains("error: the run directory") && stderr.contains("inside the workspace"),
        "{}",
        ran.explain()
    );
    assert!(
        stderr.contains("hint: pass a --run-dir outside"),
        "{}",
        ran.explain()
    );
    assert!(!ws.path().join("runs").exists(), "{}", ran.explain());
}

#[test]
fn links_and_setuid_bits_the_sandbox_leaves_come_back_inert() {
    let ws = Dir::new();
    let elsewhere = Dir::new();
    let home = Dir::new();
    let canary = canary(elsewhere.path());
    let c = canary.display();
    let cmd_text = format!(
        "ln -s {c} link-to-host; ln -s / root-link; echo x > tool; chmod 4755 tool; \
         mkdir d; ln -s {c} d/deep-link; echo planted"
    );
    let turns = serde_json::json!({"turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": cmd_text}}]},
        {"text": "done"}
    ]});
    let script = elsewhere.write("script.json", &turns.to_string());
    let mut cmd = ws.scripted(&script.display().to_string());
    cmd.env("HOME", home.path())
        .args(Exec::Docker.args())
        .args(["--workspace", ".", "x"]);
    let ran = run(&mut cmd);
    ran.expect_code(0);
    for l in ["link-to-host", "root-link", "d/deep-link"] {
        let m = std::fs::symlink_metadata(ws.path().join(l)).expect("entry came back");
        assert!(m.file_type().is_symlink(), "{l} is no longer a link");
    }
    let mode = std::fs::metadata(ws.path().join("tool"))
        .expect("tool")
        .permissions()
        .mode();
    assert_eq!(mode & 0o7000, 0, "setuid came back: {mode:o}");
    assert_eq!(
        std::fs::read_to_string(&canary).expect("canary"),
        "host secret\n"
    );
}
