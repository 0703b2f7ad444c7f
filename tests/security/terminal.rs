//! Finding 3, terminal injection: command output, model text, tool names
//! and verifier output full of escape sequences reach stderr only in a
//! visible form (`\x1b`, `\u{9b}`), and nothing on stderr carries colour
//! codes when it is not a terminal, tracing's WARN lines included.

use serde_json::json;

use crate::support::binary::{Dir, Exec, of_type, outcome, run};
use crate::support::docker::TINY;
use crate::support::eval::{prelude, report, statuses, task, toml};

/// Control characters a terminal acts on: C0 but newline and tab, DEL,
/// and C1. None may reach stderr raw.
fn raw_controls(text: &str) -> Vec<String> {
    text.chars()
        .filter(|&c| {
            (c.is_control() && c != '\n' && c != '\t') || ('\u{80}'..='\u{9f}').contains(&c)
        })
        .map(|c| format!("U+{:04X}", c as u32))
        .collect()
}

/// Asserts stderr is UTF-8 with no raw control character and no SGR
/// colour code, and returns it.
fn clean_stderr(bytes: &[u8], explain: &str) -> String {
    let text = String::from_utf8(bytes.to_vec())
        .unwrap_or_else(|e| panic!("stderr is not UTF-8 ({e}){explain}"));
    let raw = raw_controls(&text);
    assert!(
        raw.is_empty(),
        "raw control characters on stderr: {raw:?}{explain}"
    );
    assert!(!text.contains("\x1b["), "colour codes on stderr{explain}");
    text
}

#[test]
fn escape_sequences_from_commands_and_the_model_are_shown_not_obeyed() {
    let d = Dir::new();
    // The command line itself carries a raw ESC, its output clears the
    // screen, sets the window title, returns the carriage to fake
    // runner's own summary line, and prints C1 CSI (U+009B in UTF-8, then
    // a lone 0x9b byte).
    let command = "echo '\u{1b}[1mbold-cmd'; \
                   printf '\\033[2J\\033]0;pwned-title\\007\\rcompleted after 1 step\\n'; \
                   printf '\\302\\23331mC1-utf8 \\233lone\\n'";
    let script = json!([
        {"text": "model says \u{1b}]0;model-title\u{7} and \u{9b}2J then\u{8}\u{8}xx\r\n",
         "tool_calls": [{"name": "bash", "input": {"command": command}}]},
        {"tool_calls": [{"name": "bash\u{1b}[2J", "input": {}}],
         "expect": "completed after 1 step"},
        {"text": "done \u{1b}[0m\u{7f}"}
    ]);
    let script = d.write("script.json", &script.to_string());
    let ran = run(d
        .scripted(script.to_str().expect("utf-8"))
        .args(Exec::Docker.args())
        .env_remove("NO_COLOR")
        .arg("show me"));
    ran.expect_code(0);
    let explain = ran.explain();
    let err = clean_stderr(&ran.out.stderr, &explain);
    for shown in [
        // the command as echoed, its output, the model's text, the tool name
        "$ echo '\\x1b[1mbold-cmd'",
        "\\x1b[2J\\x1b]0;pwned-title\\x07\\x0dcompleted after 1 step",
        "\\u{9b}31mC1-utf8",
        "model says \\x1b]0;model-title\\x07 and \\u{9b}2J then\\x08\\x08xx",
        "bash\\x1b[2J",
        "done \\x1b[0m\\x7f",
    ] {
        assert!(err.contains(shown), "stderr lacks {shown:?}{explain}");
    }
    // A lone 0x9b byte is not UTF-8: it is shown as U+FFFD, never passed on.
    assert!(err.contains("\u{fffd}lone"), "{explain}");
    // No line can pass for runner's summary except runner's own.
    let fakes: Vec<&str> = err
        .lines()
        .filter(|l| l.trim_start().starts_with("completed after 1 step"))
        .collect();
    assert!(fakes.is_empty(), "fake status line {fakes:?}{explain}");

    // --json stays JSON: serde's escapes on stdout, the real bytes inside.
    assert!(
        !ran.out.stdout.contains(&0x1b),
        "raw ESC on stdout{explain}"
    );
    let events = ran.events();
    assert_eq!(outcome(&events), "completed");
    let results = of_type(&events, "tool_result");
    let first = results[0]["output"].as_str().unwrap_or_default();
    assert!(
        first.contains("\u{1b}[2J\u{1b}]0;pwned-title\u{7}\rcompleted"),
        "the trajectory keeps the real output: {first:?}"
    );
}

#[test]
fn eval_task_names_and_verifier_output_are_shown_not_obeyed_and_warnings_carry_no_colour() {
    let _g = prelude();
    let d = Dir::new();
    // The verifier writes escapes where the reward should be; the error
    // row of the table quotes it.
    let suite = d.path().join("suite");
    task(
        &suite,
        "evil-reward",
        &[
            ("instruction.md", "nothing\n"),
            ("task.toml", &toml(TINY, 30, 30)),
            (
                "tests/test.sh",
                "printf '\\033[2J\\033]0;verifier-title\\007\\r1\\n' > /logs/verifier/reward.txt\n",
            ),
        ],
    );
    // A hostile suite names a task with escapes.
    task(
        &suite,
        "name\u{1b}[2Jx",
        &[
            ("instruction.md", "nothing\n"),
            ("task.toml", &toml(TINY, 30, 30)),
            ("tests/test.sh", "echo 1 > /logs/verifier/reward.txt\n"),
        ],
    );
    // The summary cannot be written under a regular file: a tracing WARN.
    d.write("blocker", "a file, not a directory\n");
    let mut cmd = d.runner();
    cmd.env_remove("NO_COLOR").args([
        "eval",
        "suite",
        "--agent",
        "nop",
        "--fail-on-error=false",
        "--output-dir",
        "runs/eval",
        "--json",
        "report.json",
        "--summary",
        "blocker/summary.md",
    ]);
    let ran = run(&mut cmd);
    let explain = ran.explain();
    let err = clean_stderr(&ran.out.stderr, &explain);
    assert!(
        err.contains("WARN"),
        "a tracing warning was printed{explain}"
    );
    assert!(
        err.contains("\\x1b[2J\\x1b]0;verifier-title\\x07"),
        "the verifier's text, visible{explain}"
    );
    assert!(
        err.contains("name\\x1b[2Jx#1"),
        "the task name, visible{explain}"
    );
    let r = report(&d, &ran);
    let st = statuses(&r);
    assert_eq!(st.len(), 2, "{st:?}");
}
