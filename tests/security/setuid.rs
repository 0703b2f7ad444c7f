//! Issue 21, finding 3: with `--disk unlimited` the workspace is the
//! user's own directory, bind-mounted; a root sandbox that leaves a
//! setuid-root copy of bash there (or a file capability, or a device node)
//! would give any user of the host root through it. runner mounts the
//! workspace nosuid and nodev, and strips what the sandbox made after
//! every command and at the end: on the host, the files keep no setuid or
//! setgid bit, no `security.capability`, no device; a uid 1000 running
//! the copy stays uid 1000.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use crate::support::binary::{Dir, of_type, run};
use crate::support::docker::{BOOKWORM, require_images, runtime_args, test_runtime};

/// Made as root in the sandbox: a setuid and a setgid copy of bash, one
/// with CAP_SETUID as a file capability, and /dev/mem as a node.
const MAKE: &str = "cp /bin/bash rootsh && chmod 4755 rootsh && cp /bin/bash gidsh && chmod 2755 gidsh \
    && cp /bin/bash capsh && python3 -c \"import os,struct; os.setxattr('capsh','security.capability',struct.pack('<IIIII',0x02000001,0x80,0,0,0))\" \
    ; mknod -m 666 mem c 1 1; mkdir -p deep/er && cp -p rootsh deep/er/rootsh && chmod 4755 deep/er/rootsh; echo made";
/// Then, still in the sandbox: what the host's copy looks like now, and
/// how the workspace is mounted.
const LOOK: &str = "python3 -c \"import os; [print(oct(os.stat(f).st_mode & 0o7777)[2:], f) for f in ['rootsh', 'gidsh', 'deep/er/rootsh']]; print('caps', os.listxattr('capsh'))\"; \
    grep ' /workspace ' /proc/self/mountinfo";

/// The setuid, setgid and capability marks left on `path`.
fn marks(path: &Path) -> (u32, bool) {
    let m = std::fs::symlink_metadata(path).expect("stat");
    let cap = xattr::get(path, "security.capability")
        .ok()
        .flatten()
        .is_some();
    (m.mode() & 0o6000, cap)
}

#[test]
fn a_setuid_root_copy_made_in_a_bind_workspace_is_stripped_on_the_host() {
    require_images(&[BOOKWORM]);
    let d = Dir::new();
    let ws = tempfile::tempdir().expect("tempdir");
    // A host user may walk to the files, as to any project directory.
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let turns = serde_json::json!({"turns": [
        {"tool_calls": [{"name": "bash", "input": {"command": MAKE}}]},
        {"tool_calls": [{"name": "bash", "input": {"command": LOOK}}]},
        {"text": "done"}
    ]});
    let script = d.write("s.json", &turns.to_string());
    let mut cmd = d.scripted(&script.display().to_string());
    cmd.args(["--executor", "docker", "--image", BOOKWORM])
        .args(runtime_args())
        .args(["--user", "0:0", "--disk", "unlimited", "--workspace"])
        .arg(ws.path())
        .arg("x");
    let r = run(&mut cmd);
    r.expect_code(0);
    let events = r.events();
    let results = of_type(&events, "tool_result");
    let made = results[0]["output"].as_str().unwrap_or_default();
    assert!(made.contains("made"), "{}", r.explain());
    // After the first command, before the second: stripped already.
    let look = results[1]["output"].as_str().unwrap_or_default();
    for f in ["rootsh", "gidsh", "deep/er/rootsh"] {
        assert!(
            look.lines().any(|l| l == format!("755 {f}")),
            "{f} not stripped after the command: {look}"
        );
    }
    assert!(look.contains("caps []"), "{look}");
    // gVisor's /proc shows its own 9p mount, not the host's flags (a
    // setuid file there gives no other uid either: checked by hand).
    if test_runtime().as_deref() != Some("runsc") {
        assert!(
            look.lines()
                .any(|l| l.contains(" /workspace ") && l.contains("nosuid") && l.contains("nodev")),
            "the workspace is not mounted nosuid,nodev: {look}"
        );
    }

    // After the run, on the host.
    for f in ["rootsh", "gidsh", "capsh", "deep/er/rootsh"] {
        assert_eq!(marks(&ws.path().join(f)), (0, false), "{f}");
    }
    let mem = ws.path().join("mem");
    assert!(
        std::fs::symlink_metadata(&mem).map_or(true, |m| !m.file_type().is_char_device()),
        "a device node made by the sandbox is left on the host"
    );
    // And the proof: a uid 1000 of the host running the copy stays 1000.
    let out = Command::new("setpriv")
        .args(["--reuid", "1000", "--regid", "1000", "--clear-groups"])
        .arg(ws.path().join("rootsh"))
        .args(["-p", "-c", "id -u"])
        .output()
        .expect("setpriv");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "1000",
        "uid 1000 got another euid from the workspace: {out:?}"
    );
}
