//! Finding 9: system directories, homes, credential directories and
//! anything holding runner's own files are refused as a workspace, and a
//! user's directory is never chowned behind their back.

use std::os::unix::fs::MetadataExt;

use crate::support::binary::{Dir, Exec, Ran, of_type, run};

#[test]
fn system_and_credential_directories_are_refused() {
    let home = Dir::new();
    let own_bin = std::path::Path::new(env!("CARGO_BIN_EXE_runner"))
        .parent()
        .expect("bin dir")
        .to_path_buf();
    let ssh = home.path().join(".ssh");
    std::fs::create_dir(&ssh).expect("mkdir");
    let cases = [
        "/etc".to_string(),
        "/etc/cron.d".into(),
        "/root/.ssh".into(),
        "/home".into(),
        "/var/lib/docker".into(),
        "/usr/local/bin".into(),
        home.path().display().to_string(),
        ssh.display().to_string(),
        own_bin.display().to_string(),
    ];
    let before: Vec<_> = ["/etc", "/var/lib/docker"]
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| (m.uid(), m.gid())).ok())
        .collect();
    for ws in &cases {
        let d = Dir::new();
        let script = d.write("s.json", r#"{"turns": [{"text": "hi"}]}"#);
        let mut cmd = d.scripted(&script.display().to_string());
        cmd.env("HOME", home.path())
            .args(Exec::Docker.args())
            .args(["--workspace", ws, "x"]);
        let ran = run(&mut cmd);
        ran.expect_code(2);
        let stderr = ran.stderr();
        assert!(
            stderr.contains("error: refusing the workspace") && stderr.contains("hint:"),
            "{ws}: {}",
            ran.explain()
        );
    }
    let after: Vec<_> = ["/etc", "/var/lib/docker"]
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| (m.uid(), m.gid())).ok())
        .collect();
    assert_eq!(before, after, "a refused directory changed owner");
}

/// The user's tree keeps its owner during and after the run: the sandbox
/// works on a copy, and what it made comes back owned by the directory's
/// owner. The user is the one `sudo` says runs runner (a directory of
/// someone else is refused: see `homes`).
#[test]
fn a_users_directory_is_never_chowned() {
    let ws = Dir::new();
    let home = Dir::new();
    let file = ws.write("mine.txt", "mine\n");
    let (uid, gid) = (4242, 4343);
    for p in [ws.path(), file.as_path()] {
        std::os::unix::fs::chown(p, Some(uid), Some(gid)).expect("chown");
    }
    let probe = ws.path().display().to_string();
    let turns = serde_json::json!({"turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": "id -u; stat -c '%u' mine.txt; echo made > new.txt"}}]},
        {"text": "done"}
    ]});
    let script = home.write("s.json", &turns.to_string());
    let mut cmd = ws.scripted(&script.display().to_string());
    cmd.env("HOME", home.path())
        .env("SUDO_UID", uid.to_string())
        .args(Exec::Docker.args())
        .args(["--workspace", &probe, "x"]);
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // While the run is going, the host tree is untouched.
    let mut owners = Vec::new();
    for _ in 0..20 {
        owners.push(std::fs::metadata(&file).map(|m| m.uid()).unwrap_or(0));
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    let out = child.wait_with_output().expect("wait");
    let ran = Ran {
        out,
        desc: format!("{cmd:?}"),
        elapsed: std::time::Duration::ZERO,
    };
    ran.expect_code(0);
    assert!(
        owners.iter().all(|u| *u == uid),
        "owner changed mid-run: {owners:?}"
    );
    for p in [ws.path().to_path_buf(), file, ws.path().join("new.txt")] {
        let m = std::fs::metadata(&p).expect("stat");
        assert_eq!((m.uid(), m.gid()), (uid, gid), "{}", p.display());
    }
    // With --disk unlimited the directory is bind-mounted as it is and
    // commands run as its owner.
    let turns = serde_json::json!({"turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": "id -u; id -g; echo more > more.txt"}}]},
        {"text": "done"}
    ]});
    let script = home.write("s2.json", &turns.to_string());
    let mut cmd = ws.scripted(&script.display().to_string());
    cmd.env("HOME", home.path())
        .env("SUDO_UID", uid.to_string())
        .args(Exec::Docker.args())
        .args(["--workspace", &probe, "--disk", "unlimited", "x"]);
    let ran = run(&mut cmd);
    ran.expect_code(0);
    let events = ran.events();
    let res = of_type(&events, "tool_result");
    let text = res[0]["output"].as_str().unwrap_or_default();
    assert!(text.starts_with("4242\n4343\n"), "{text}");
    assert!(
        ran.stderr().contains("workspace size not bounded"),
        "{}",
        ran.explain()
    );
    let m = std::fs::metadata(ws.path().join("mine.txt")).expect("stat");
    assert_eq!((m.uid(), m.gid()), (uid, gid));
}
