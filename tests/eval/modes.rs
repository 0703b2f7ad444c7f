//! The grading modes, told apart by what each hands the verifier: `shared`
//! the agent's own container (files anywhere, its services running),
//! `snapshot` a commit of it (files, no processes), `isolated` the
//! pristine image plus the working directory, `separate` a fresh verifier
//! with only the task's artifacts. Each attempt's report names its mode,
//! and what the agent left running shows among its tamper signals.

use crate::support::binary::Dir;
use crate::support::docker::TINY;
use crate::support::eval::{assert_clean, eval_cmd, prelude, report, run_with_pid, task, toml};

/// reward 1 when `cond` (a shell test) holds.
fn reward_if(cond: &str) -> String {
    format!("if {cond}; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n")
}

/// Three tasks: state in /etc, a process the test needs alive, and a
/// result handed over as an artifact.
fn suite(d: &Dir) {
    task(
        d.path(),
        "etc",
        &[
            ("instruction.md", "write 42 to /etc/answer.txt\n"),
            ("task.toml", &toml(TINY, 60, 30)),
            ("solution/solve.sh", "echo 42 > /etc/answer.txt\n"),
            (
                "tests/test.sh",
                &reward_if("[ \"$(cat /etc/answer.txt 2>/dev/null)\" = 42 ]"),
            ),
        ],
    );
    task(
        d.path(),
        "service",
        &[
            ("instruction.md", "keep /tmp/beat fresh\n"),
            ("task.toml", &toml(TINY, 60, 30)),
            (
                "solution/solve.sh",
                "setsid sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/beat; sleep 0.1; done' >/dev/null 2>&1 &\nsleep 0.5\n",
            ),
            (
                "tests/test.sh",
                &reward_if(
                    "a=$(cat /tmp/beat 2>/dev/null) && sleep 1 && [ \"$a\" != \"$(cat /tmp/beat)\" ]",
                ),
            ),
        ],
    );
    // `artifacts` is a top-level key: before the tables.
    let separate = format!(
        "artifacts = [\"/srv/out\"]\n{}",
        toml(TINY, 60, 30).replace(
            "[verifier]\n",
            "[verifier]\nenvironment_mode = \"separate\"\n"
        )
    );
    task(
        d.path(),
        "handover",
        &[
            ("instruction.md", "write ok to /srv/out/r.txt\n"),
            ("task.toml", &separate),
            (
                "solution/solve.sh",
                "mkdir -p /srv/out && echo ok > /srv/out/r.txt && echo x > /etc/not-handed-over\n",
            ),
            (
                "tests/test.sh",
                &reward_if("grep -qx ok /srv/out/r.txt && [ ! -e /etc/not-handed-over ]"),
            ),
        ],
    );
}

/// (task, status, grading) per attempt, in task order, and the report.
fn verdicts(d: &Dir, extra: &[&str]) -> (Vec<(String, String, String)>, serde_json::Value) {
    let mut args = vec!["etc", "service", "handover", "--agent", "oracle", "-j", "2"];
    args.extend_from_slice(extra);
    let (ran, pid) = run_with_pid(eval_cmd(d, &args));
    assert_clean(pid, &ran.desc);
    let r = report(d, &ran);
    // The next run writes its own run directories.
    let kept = d.path().join(format!("runs-{}", extra.join("-")));
    std::fs::rename(d.path().join("runs"), kept).expect("move the run directories aside");
    let rows = r["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| {
            (
                a["task"].as_str().unwrap_or_default().to_string(),
                a["status"].as_str().unwrap_or_default().to_string(),
                a["grading"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    (rows, r)
}

fn row(task: &str, status: &str, grading: &str) -> (String, String, String) {
    (task.into(), status.into(), grading.into())
}

#[test]
fn each_mode_hands_the_verifier_what_it_says() {
    let _g = prelude();
    let d = Dir::new();
    suite(&d);
    // Each task's own mode: shared by default, separate where it says so.
    let (rows, r) = verdicts(&d, &[]);
    assert_eq!(
        rows,
        vec![
            row("etc", "pass", "shared"),
            row("handover", "pass", "separate"),
            row("service", "pass", "shared"),
        ]
    );
    let service = r["attempts"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["task"] == "service"))
        .expect("service attempt")
        .clone();
    let signals = service["signals"].to_string();
    assert!(
        signals.contains("process") && signals.contains("while true"),
        "the loop the agent left running is a tamper signal: {service}"
    );
    // A commit of the agent's container: its files, none of its processes;
    // the artifacts task now sees everything the agent wrote.
    assert_eq!(
        verdicts(&d, &["--grading", "snapshot"]).0,
        vec![
            row("etc", "pass", "snapshot"),
            row("handover", "fail", "snapshot"),
            row("service", "fail", "snapshot"),
        ]
    );
    // The pristine image plus the working directory only.
    assert_eq!(
        verdicts(&d, &["--grading", "isolated"]).0,
        vec![
            row("etc", "fail", "isolated"),
            row("handover", "fail", "isolated"),
            row("service", "fail", "isolated"),
        ]
    );
}

/// The separate mode's handover reads the agent's artifacts with the
/// agent's own `tar` (a root agent may replace it): a stream that climbs
/// out of the artifacts directory, or writes through a link it just made,
/// must land nowhere on the host.
#[test]
fn a_hostile_tar_in_the_agents_sandbox_writes_nothing_outside_the_run() {
    let _g = prelude();
    let d = Dir::new();
    let tag = format!("runner-escape-{}-{}", std::process::id(), fastrand_suffix());
    let toml = toml(crate::support::docker::BOOKWORM, 60, 30).replace(
        "[verifier]\n",
        "[verifier]\nenvironment_mode = \"separate\"\n",
    );
    let evil_tar = format!(
        "import io, sys, tarfile\n\
         b = io.BytesIO()\n\
         t = tarfile.open(fileobj=b, mode='w')\n\
         def add(name, data=b'pwned', link=None):\n\
         \x20   i = tarfile.TarInfo(name)\n\
         \x20   if link is not None:\n\
         \x20       i.type = tarfile.SYMTYPE; i.linkname = link\n\
         \x20       t.addfile(i)\n\
         \x20   else:\n\
         \x20       i.size = len(data); t.addfile(i, io.BytesIO(data))\n\
         add('artifacts/../../../../../../../../tmp/{tag}-climb')\n\
         add('/tmp/{tag}-absolute')\n\
         add('artifacts/lnk', link='/tmp')\n\
         add('artifacts/lnk/{tag}-through-link')\n\
         t.close()\n\
         sys.stdout.buffer.write(b.getvalue())\n"
    );
    task(
        d.path(),
        "hostile",
        &[
            ("instruction.md", "x\n"),
            ("task.toml", &toml),
            (
                "solution/solve.sh",
                &format!(
                    "mkdir -p /logs/artifacts && echo ok > /logs/artifacts/r.txt\n\
                     cat > /usr/local/lib/evil_tar.py <<'PY'\n{evil_tar}PY\n\
                     for t in /bin/tar /usr/bin/tar; do\n\
                     [ -e \"$t\" ] && printf '#!/bin/sh\\nexec python3 /usr/local/lib/evil_tar.py\\n' > \"$t\" && chmod +x \"$t\"\n\
                     done\ntrue\n"
                ),
            ),
            ("tests/test.sh", &reward_if("false")),
        ],
    );
    let (ran, pid) = run_with_pid(eval_cmd(&d, &["hostile", "--agent", "oracle"]));
    assert_clean(pid, &ran.desc);
    for name in ["climb", "absolute", "through-link"] {
        let p = std::path::Path::new("/tmp").join(format!("{tag}-{name}"));
        let exists = p.symlink_metadata().is_ok();
        let _ = std::fs::remove_file(&p);
        assert!(
            !exists,
            "the agent's tar stream wrote {p:?} on the host{}",
            ran.explain()
        );
    }
    // Whatever came back stays a plain file or an inert link under the
    // attempt's own artifacts directory.
    let r = report(&d, &ran);
    let a = &r["attempts"][0];
    assert_ne!(a["status"], "pass", "{a}");
    // The hostile tar was in place when the artifacts were read.
    assert!(
        a["signals"].to_string().contains("/usr/bin/tar"),
        "the tar was not replaced, the test proves nothing: {a}"
    );
    assert_ne!(
        a["error_kind"], "infrastructure",
        "the agent's hostile tar is its own fail, not an infrastructure error: {a}"
    );
}

/// A suffix no other run shares.
fn fastrand_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}
