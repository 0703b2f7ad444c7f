use super::*;
use crate::exec::backend::{Backend, SandboxSpec};
use std::os::unix::fs::PermissionsExt;

fn os(k: &str, v: &str) -> (OsString, OsString) {
    (k.into(), v.into())
}

#[test]
fn only_allowlisted_host_variables_pass() {
    let host = vec![
        os("PATH", "/usr/bin"),
        os("ANTHROPIC_API_KEY", "sk-ant-canary"),
        os("HOME", "/home/u"),
        os("OPENAI_API_KEY", "sk-canary"),
        os("LANG", "C.UTF-8"),
        os("LD_PRELOAD", "/evil.so"),
    ];
    let env = child_env(host.into_iter(), &[]);
    let names: Vec<_> = env.iter().map(|(k, _)| k.to_string_lossy()).collect();
    assert_eq!(names, ["PATH", "HOME", "LANG"]);
}

#[test]
fn explicit_pairs_are_added_and_override() {
    let host = vec![os("PATH", "/usr/bin"), os("TERM", "xterm")];
    let extra = [
        ("PATH".to_string(), "/opt/bin".to_string()),
        ("FOO".to_string(), "bar".to_string()),
    ];
    let env = child_env(host.into_iter(), &extra);
    assert_eq!(
        env,
        [
            os("TERM", "xterm"),
            os("PATH", "/opt/bin"),
            os("FOO", "bar")
        ]
    );
}

#[test]
fn shell_prefers_bash_then_sh_then_bin_sh() {
    let dir = tempfile::tempdir().unwrap();
    let make = |name: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, "").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    let path = dir.path().as_os_str();
    assert_eq!(find_shell(Some(path)), PathBuf::from("/bin/sh"));
    make("sh");
    assert_eq!(find_shell(Some(path)), dir.path().join("sh"));
    make("bash");
    assert_eq!(find_shell(Some(path)), dir.path().join("bash"));
    assert_eq!(find_shell(None), PathBuf::from("/bin/sh"));
}

#[tokio::test]
async fn a_persistent_shell_without_bash_is_refused_at_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink("/bin/sh", bin.join("sh")).unwrap();
    let spec = |shell| SandboxSpec {
        workdir: Some(dir.path().display().to_string()),
        env: vec![("PATH".into(), bin.display().to_string())],
        shell,
        ..SandboxSpec::new("local", "test")
    };
    let err = LocalBackend
        .start(spec(ShellMode::Persistent))
        .await
        .err()
        .unwrap();
    assert!(matches!(err, ExecError::ShellUnavailable { .. }), "{err}");
    assert!(err.is_fatal());
    assert!(err.hint().unwrap().contains("--shell fresh"));
    // A fresh shell runs with sh.
    let ex = LocalBackend.start(spec(ShellMode::Fresh)).await.unwrap();
    let shell = ex
        .extras()
        .shell
        .expect("a local sandbox has a shell to restart");
    shell.restart_shell().await.unwrap();
}
