//! The faults' task directories, `runner eval` command lines, and a look
//! at runner's temporary directories.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::binary::Dir;
use crate::support::docker::{TINY, runtime_args};
use crate::support::eval::{task, toml};

/// Passes when the solution wrote `right` to out.txt.
const TEST_SH: &str = "#!/bin/sh\nif grep -qx right out.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n";

/// Task `name` under `root` on the tiny image: its solution sleeps
/// `sleep` seconds and writes `answer` to out.txt; its test passes on
/// `right` only.
pub fn answer_task(root: &Path, name: &str, sleep: &str, answer: &str) {
    task(
        root,
        name,
        &[
            ("task.toml", &toml(TINY, 120, 60)),
            ("instruction.md", "Write right to out.txt."),
            (
                "solution/solve.sh",
                &format!("#!/bin/sh\nsleep {sleep}\necho {answer} > out.txt\n"),
            ),
            ("tests/test.sh", TEST_SH),
        ],
    );
}

/// Task `name` whose solution runs the hostile `body` (its agent phase
/// ends within 8 s at the latest); the test passes when out.txt says
/// `right`.
pub fn hostile_task(root: &Path, name: &str, body: &str) {
    task(
        root,
        name,
        &[
            ("task.toml", &toml(TINY, 8, 60)),
            ("instruction.md", "Survive."),
            ("solution/solve.sh", &format!("#!/bin/sh\n{body}\n")),
            ("tests/test.sh", TEST_SH),
        ],
    );
}

/// `runner eval suite --agent oracle -j JOBS` in `d`, with `flag`
/// (`--output-dir` or `--resume`) `out`, the JSON report at `report`,
/// and `extra` flags.
pub fn eval_oracle(
    d: &Dir,
    jobs: &str,
    (flag, out): (&str, &Path),
    report: &str,
    extra: &[&str],
) -> Command {
    let mut c = d.runner();
    c.args(["eval", "suite", "--agent", "oracle", "-j", jobs])
        .arg(flag)
        .arg(out)
        .args(["--json", report])
        .args(extra)
        .args(runtime_args());
    c
}

/// The entries of `base` whose names `keep` accepts (none when `base`
/// cannot be read).
pub fn entries(base: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    std::fs::read_dir(base)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(&keep))
        .collect()
}

/// What is in `now` but was not in `before`.
pub fn added(before: &[PathBuf], now: Vec<PathBuf>) -> Vec<PathBuf> {
    now.into_iter().filter(|p| !before.contains(p)).collect()
}
