//! The reports of `runner eval`, `runner eval merge` and `runner view`
//! hold whatever a run directory's records say without letting it act:
//! a forged `attempt.json` or `suite.json` puts no raw escape byte into
//! any report, a task directory of a shard that is a link is not read,
//! and no report is written through a link at its path (refused before
//! anything runs, the link's target unchanged). The suites run on the real
//! engine; the forging is done to what they left, as an attacker who can
//! write into a shard's directory (a CI artifact) would.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::binary::{Dir, Ran, run};
use crate::support::docker::TINY;
use crate::support::eval::{prelude, task, toml};

const PASS: &str = "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\n";
const FAIL: &str = "mkdir -p /logs/verifier; echo 0 > /logs/verifier/reward.txt\n";

/// Runs the suite `a` (passes) and `b` (fails) with `--agent nop` into
/// `runs/s`.
fn whole_suite(d: &Dir) {
    let root = d.path().join("suite");
    for (name, test) in [("a", PASS), ("b", FAIL)] {
        task(
            &root,
            name,
            &[
                ("instruction.md", "nothing to do\n"),
                ("task.toml", &toml(TINY, 60, 30)),
                ("tests/test.sh", test),
            ],
        );
    }
    let ran = run(d
        .runner()
        .args(["eval", "suite", "--agent", "nop", "--output-dir", "runs/s"]));
    ran.expect_code(1);
}

fn edit_json(p: &Path, f: impl FnOnce(&mut Value)) {
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(p).expect("read")).expect("json");
    f(&mut v);
    std::fs::write(p, serde_json::to_string_pretty(&v).expect("json")).expect("write");
}

fn merge(d: &Dir, extra: &[&str]) -> Ran {
    run(d.runner().args(["eval", "merge", "runs/s"]).args(extra))
}

#[test]
fn a_forged_record_puts_no_raw_escape_into_any_report_of_merge() {
    let _g = prelude();
    let d = Dir::new();
    whole_suite(&d);
    let esc = "\x1b]0;owned\x07\x1b[2J";
    edit_json(&d.path().join("runs/s/a/1/attempt.json"), |a| {
        a["error"] = json!(format!("boom {esc}"));
        a["signals"] = json!([{"kind": format!("kind{esc}"), "detail": format!("detail{esc}")}]);
    });
    edit_json(&d.path().join("runs/s/suite.json"), |m| {
        m["settings"]["agent"] = json!(format!("nop{esc}"));
    });
    let ran = merge(
        &d,
        &["--json", "m.json", "--junit", "m.xml", "--summary", "m.md"],
    );
    assert!(!ran.stderr().contains('\x1b'), "{}", ran.explain());
    for f in ["m.json", "m.xml", "m.md"] {
        let bytes =
            std::fs::read(d.path().join(f)).unwrap_or_else(|e| panic!("{f}: {e}{}", ran.explain()));
        assert!(
            !bytes.contains(&0x1b),
            "a raw ESC in {f}:\n{}",
            String::from_utf8_lossy(&bytes)
        );
    }
    let md = std::fs::read_to_string(d.path().join("m.md")).expect("read");
    assert!(md.contains("\\x1b]0;owned"), "{md}");
}

#[test]
fn a_task_dir_of_a_shard_that_is_a_link_is_not_read() {
    let _g = prelude();
    let d = Dir::new();
    whole_suite(&d);
    // The real b failed; a forged copy elsewhere says it passed.
    let forged = d.path().join("forged");
    std::fs::create_dir_all(forged.join("1")).expect("mkdir");
    let real = d.path().join("runs/s/b");
    std::fs::copy(real.join("1/attempt.json"), forged.join("1/attempt.json")).expect("copy");
    edit_json(&forged.join("1/attempt.json"), |a| {
        a["status"] = json!("pass");
        a["reward"] = json!(1.0);
    });
    std::fs::remove_dir_all(&real).expect("rm");
    std::os::unix::fs::symlink(&forged, &real).expect("link");
    let ran = merge(&d, &["--json", "m.json"]);
    let r: Value = serde_json::from_str(
        &std::fs::read_to_string(d.path().join("m.json"))
            .unwrap_or_else(|e| panic!("{e}{}", ran.explain())),
    )
    .expect("json");
    let b = r["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .find(|a| a["task"] == "b")
        .expect("b");
    assert_eq!(b["status"], "error", "{b:#}{}", ran.explain());
    assert!(ran.stderr().contains("is a link"), "{}", ran.explain());
}

/// Exit 2 before anything runs, an `error:` line naming `flag`, a hint;
/// the canary untouched.
fn assert_refused(ran: &Ran, flag: &str, canary: &Path) {
    assert_eq!(ran.code(), 2, "{flag}{}", ran.explain());
    let err = ran.stderr();
    assert!(
        err.lines()
            .any(|l| l.starts_with("error:") && l.contains(flag) && l.contains("is a link")),
        "{flag}{}",
        ran.explain()
    );
    assert!(
        err.lines().any(|l| l.starts_with("hint: ")),
        "{}",
        ran.explain()
    );
    if canary.is_dir() {
        let names: Vec<_> = std::fs::read_dir(canary)
            .expect("ls")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            names.len(),
            1,
            "{flag}: the canary directory changed: {names:?}"
        );
    } else {
        assert_eq!(
            std::fs::read_to_string(canary).expect("read"),
            "canary\n",
            "{flag}"
        );
    }
}

#[test]
fn no_report_of_eval_merge_or_view_is_written_through_a_link() {
    let _g = prelude();
    let d = Dir::new();
    whole_suite(&d);
    let canary = d.write("canary", "canary\n");
    let canary_dir = d.path().join("canary-dir");
    std::fs::create_dir_all(&canary_dir).expect("mkdir");
    std::fs::write(canary_dir.join("keep"), "x").expect("write");
    let link = |name: &str, to: &Path| {
        let p = d.path().join(name);
        let _ = std::fs::remove_file(&p);
        std::os::unix::fs::symlink(to, &p).expect("link");
    };
    for flag in ["--json", "--junit", "--summary", "--html", "--harbor-job"] {
        let to = if flag == "--harbor-job" {
            &canary_dir
        } else {
            &canary
        };
        link("out", to);
        let ran = run(d.runner().args([
            "eval",
            "suite",
            "--agent",
            "nop",
            "--output-dir",
            &format!("runs/e-{}", flag.trim_start_matches("--")),
            flag,
            "out",
        ]));
        assert_refused(&ran, flag, to);
    }
    for flag in ["--json", "--junit", "--summary"] {
        link("out", &canary);
        assert_refused(&merge(&d, &[flag, "out"]), flag, &canary);
    }
    link("out", &canary);
    let ran = run(d.runner().args(["view", "runs/s", "--output", "out"]));
    assert_refused(&ran, "--output", &canary);
}
