//! The suite page of a failed example suite, an attempt whose every
//! string is hostile, and a single run's page, each as Chromium sees it.

use std::path::Path;

use serde_json::json;

use crate::browser::{dom, screenshot};
use crate::support::binary::{Dir, Ran, bash, run};
use crate::support::docker::TINY;
use crate::support::eval::{eval, prelude, task, toml};

const HOSTILE: &str = "</script><script>alert(1)</script><img src=x onerror=alert(1)>";
/// The hostile string as the DOM serializes text holding it.
const HOSTILE_TEXT: &str =
    "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;";
/// Markup that would mark the page if it ever ran as such.
const CANARY: &str = "<img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">";
/// A task name that can be a directory name (no `/`), hostile too.
const HOSTILE_TASK: &str = "h<img src=x onerror=alert(1)>";

/// Checks every page shares: its script ran and nothing was injected.
fn assert_inert(dom: &str) {
    assert!(
        dom.contains("data-js=\"ready\""),
        "the page's script did not run:\n{dom}"
    );
    assert!(
        !dom.contains("<img"),
        "an <img> element was injected:\n{dom}"
    );
    assert!(!dom.contains("data-pwned=\"1\""), "injected markup ran");
    assert_eq!(
        dom.matches("<script").count(),
        2,
        "a script element was injected"
    );
    for bad in ["<iframe", "<object", "<embed", "<link"] {
        assert!(!dom.contains(bad), "{bad} in the DOM");
    }
}

/// `runner eval TASKS` with the scripted model's `script`, the suite's
/// page written to `html`.
fn scripted_eval(d: &Dir, tasks: &Path, script: &serde_json::Value, html: &str) -> Ran {
    let s = d.write("script.json", &script.to_string());
    eval(
        d,
        &[
            tasks.to_str().unwrap(),
            "--agent",
            "model",
            "--provider",
            "scripted",
            "--script",
            s.to_str().unwrap(),
            "--html",
            html,
        ],
    )
}

fn examples() -> String {
    format!("{}/examples/tasks", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_failed_example_suite_reads_in_chromium() {
    let _guard = prelude();
    let d = Dir::new();
    let ex = examples();
    let ran = eval(
        &d,
        &[
            &ex,
            "--filter",
            "csv-total",
            "--filter",
            "fizzbuzz-script",
            "--agent",
            "nop",
            "--html",
            "suite.html",
        ],
    );
    ran.expect_code(1);
    let page = d.path().join("suite.html");
    let dom = dom(&page);
    assert_inert(&dom);
    // The table was built by the script: one row per attempt, both fails.
    assert!(dom.contains("data-rows=\"2\""), "{dom}");
    assert_eq!(dom.matches("<tr data-status=\"fail\"").count(), 2, "{dom}");
    assert!(dom.contains("2 of 2 shown"));
    assert!(
        dom.contains(">2</div><div class=\"k\">attempts<"),
        "the attempts card"
    );
    assert!(
        dom.contains(">2</div><div class=\"k\">failed<"),
        "the failed card"
    );
    // The failures' full reasons, and the verifier's log of csv-total.
    assert_eq!(
        dom.matches("reward 0 below 1 (reward.txt); agent: completed")
            .count(),
        8,
        "2 each: the failures list, the rows, the sections, the data block"
    );
    assert!(
        dom.contains("total.txt: '', want 20.55"),
        "the verifier log"
    );
    assert!(dom.contains("id=\"a0\"") && dom.contains("id=\"a1\""));
    screenshot(&page, "", "failed-example-suite.png");
    screenshot(&page, "#a0", "failed-example-attempt.png");

    // `runner view` on the output directory writes the same page.
    let again = run(d
        .runner()
        .args(["view", "runs/eval", "--output", "again.html"]));
    again.expect_code(0);
    assert!(
        again.stdout().trim_end().ends_with("again.html"),
        "{}",
        again.explain()
    );
    assert_eq!(
        std::fs::read_to_string(&page).unwrap(),
        std::fs::read_to_string(d.path().join("again.html")).unwrap()
    );
    // And by default into the directory itself.
    run(d.runner().args(["view", "runs/eval"])).expect_code(0);
    assert!(d.path().join("runs/eval/view.html").is_file());
}

#[test]
fn a_hostile_attempt_stays_text_in_chromium() {
    let _guard = prelude();
    let d = Dir::new();
    let tasks = d.path().join("tasks");
    let test_sh = format!(
        "#!/bin/sh\nmkdir -p /logs/verifier\necho 'verifier saw {HOSTILE}'\necho '{HOSTILE}' > /logs/verifier/reward.txt\n"
    );
    task(
        &tasks,
        HOSTILE_TASK,
        &[
            ("instruction.md", &format!("Print {HOSTILE}\n")),
            ("task.toml", &toml(TINY, 60, 60)),
            ("tests/test.sh", &test_sh),
        ],
    );
    let script = json!({"turns": [
        {"text": format!("I will print {HOSTILE}"),
         "tool_calls": [bash(&format!("printf '%s\\n' '{HOSTILE}' '{CANARY}'; seq 1 3000"))]},
        {"text": format!("done {HOSTILE}")}
    ]});
    let ran = scripted_eval(&d, &tasks, &script, "hostile.html");
    // The reward file holds the hostile string: an error of the task.
    ran.expect_code(2);
    let page = d.path().join("hostile.html");
    let dom = dom(&page);
    assert_inert(&dom);
    assert!(dom.contains("data-rows=\"1\""), "{dom}");
    assert_eq!(dom.matches("<tr data-status=\"error\"").count(), 1);
    // The task name (put in by the script and by runner), the model's
    // text, the command and its output, the reason and the verifier's log
    // are all there as text.
    let name = "h&lt;img src=x onerror=alert(1)&gt; #1";
    assert!(
        dom.contains(&format!("<a href=\"#a0\">{name}</a>")),
        "the table's link"
    );
    assert!(
        dom.contains(&format!("I will print {HOSTILE_TEXT}")),
        "model text"
    );
    assert!(dom.contains(&format!("done {HOSTILE_TEXT}")), "model text");
    assert!(
        dom.contains(&format!(
            "bad reward file reward.txt: '{HOSTILE_TEXT}' is not a number"
        )),
        "the reason"
    );
    assert!(
        dom.contains(&format!("verifier saw {HOSTILE_TEXT}")),
        "the verifier log"
    );
    assert!(
        dom.contains(&format!(
            "{HOSTILE_TEXT}\n&lt;img src=x onerror=\"document.body"
        )),
        "the output"
    );
    // A long output is folded with its size.
    assert!(
        dom.contains("<details class=\"out\"><summary>output shown to the model ("),
        "{dom}"
    );
    screenshot(&page, "#a0", "hostile-attempt.png");
}

/// A task whose name holds a newline, and an agent that plants a program
/// on the verifier's path: the table shows the attempt's tamper signals
/// and its loosenings in their own column, the name on one line (`\n`),
/// and the attempt's section lists both; the terminal's table too keeps
/// the name on one row.
#[test]
fn the_table_shows_tamper_signals_and_loosenings_and_names_stay_on_one_line() {
    let _guard = prelude();
    let d = Dir::new();
    let tasks = d.path().join("tasks");
    task(
        &tasks,
        "plant\nhere",
        &[
            ("instruction.md", "Make the test pass.\n"),
            ("task.toml", &toml(TINY, 60, 60)),
            (
                "tests/test.sh",
                "#!/bin/sh\nmkdir -p /logs/verifier\necho 0 > /logs/verifier/reward.txt\n",
            ),
        ],
    );
    let script = json!({"turns": [
        {"tool_calls": [bash("mkdir -p /usr/local/bin && printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3")]},
        {"text": "done"}
    ]});
    let ran = scripted_eval(&d, &tasks, &script, "tamper.html");
    ran.expect_code(1);
    let row = ran
        .stderr()
        .lines()
        .find(|l| l.starts_with("plant\\nhere#1 "))
        .map(str::to_string);
    assert!(
        row.as_deref()
            .is_some_and(|r| r.contains("tamper signals]")),
        "the terminal's row keeps the name on one line: {row:?}{}",
        ran.explain()
    );
    let page = d.path().join("tamper.html");
    let dom = dom(&page);
    assert_inert(&dom);
    assert!(
        dom.contains("<th data-key=\"signals\">signals</th>"),
        "{dom}"
    );
    let cell_start = dom
        .find("<td class=\"signals-cell tamper\">")
        .unwrap_or_else(|| panic!("no tamper signals cell: {dom}"));
    let cell = &dom[cell_start..dom[cell_start..].find("</td>").unwrap() + cell_start];
    assert!(
        cell.contains("tamper signal") && cell.contains("loosening"),
        "the cell counts both: {cell}"
    );
    assert!(
        dom.contains("<a href=\"#a0\">plant\\nhere #1</a>"),
        "the name on one line in the table: {dom}"
    );
    assert!(dom.contains("<h3>Tamper signals</h3>") && dom.contains("/usr/local/bin/python3"));
    assert!(dom.contains("<h3>Loosenings of the sandbox</h3>"));
    screenshot(&page, "", "tamper-suite.png");
}

#[test]
fn a_single_run_reads_in_chromium_and_wrong_dirs_are_refused() {
    // No Docker: a run on the local executor, then its page.
    let d = Dir::new();
    let script = json!({"turns": [
        {"text": format!("running {HOSTILE}"), "tool_calls": [bash("echo out-line; exit 3")]},
        {"text": "done"}
    ]});
    let s = d.write("script.json", &script.to_string());
    let r =
        run(d
            .scripted(s.to_str().unwrap())
            .args(["--executor", "local", "--run-dir", "rd", "go"]));
    r.expect_code(0);
    let v = run(d.runner().args(["view", "rd"]));
    v.expect_code(0);
    let page = d.path().join("rd/view.html");
    assert_eq!(
        Path::new(v.stdout().trim_end()),
        page.as_path(),
        "{}",
        v.explain()
    );
    let dom = dom(&page);
    assert_inert(&dom);
    assert!(dom.contains(&format!("running {HOSTILE_TEXT}")));
    assert!(dom.contains("exit 3") && dom.contains("out-line"), "{dom}");
    assert!(dom.contains("run finished: completed"));

    // --open with no xdg-open on PATH: the page is written and the user
    // told how to open it.
    let empty = tempfile::tempdir().unwrap();
    let o = run(d
        .runner()
        .env("PATH", empty.path())
        .args(["view", "rd", "--open", "-o", "o.html"]));
    o.expect_code(0);
    assert!(d.path().join("o.html").is_file());
    assert!(
        o.stderr()
            .contains("xdg-open is not installed; open file://"),
        "{}",
        o.explain()
    );

    for (dir, want) in [
        ("missing", "cannot open"),
        (
            ".",
            "holds neither a trajectory (trajectory.jsonl) nor an eval suite (suite.json)",
        ),
    ] {
        let r = run(d.runner().args(["view", dir]));
        r.expect_code(2);
        let err = r.stderr();
        assert!(
            err.contains("error: ") && err.contains(want),
            "{}",
            r.explain()
        );
        assert!(err.contains("\nhint: "), "{}", r.explain());
    }
}
