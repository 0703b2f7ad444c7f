//! The faults' task directories and `runner eval` command lines.

use std::path::Path;
use std::process::Command;

use crate::support::binary::Dir;
use crate::support::docker::{TINY, runtime_args};
use crate::support::eval::{task, toml};

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
            (
                "tests/test.sh",
                "#!/bin/sh\nif grep -qx right out.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
            ),
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
