//! Usage messages that lead to the cause: a negative number gets the
//! flag's rule (not clap's tip to write `-- -3`, which then fails), and
//! `--help` shows `--model`'s default per provider. Needs no Docker: every
//! case stops before a sandbox.

use std::path::PathBuf;

use crate::support::binary::{Dir, run};
use crate::support::serial::shared;

/// The example suite: `runner eval` checks its flags after finding tasks.
fn example_tasks() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples/tasks")
        .display()
        .to_string()
}

/// `args` exit 2 with `rule` in stderr and none of clap's tip.
fn refused(d: &Dir, args: &[&str], rule: &str) {
    let r = run(d.runner().args(args));
    r.expect_code(2);
    let err = r.stderr();
    assert!(err.starts_with("error: "), "{args:?}{}", r.explain());
    assert!(
        err.contains(rule),
        "{args:?}: expected {rule:?}{}",
        r.explain()
    );
    assert!(
        !err.contains("tip:") && !err.contains("invalid digit"),
        "{args:?}{}",
        r.explain()
    );
}

#[test]
fn negative_numbers_get_the_flags_rule_in_both_spellings() {
    let _s = shared();
    let d = Dir::new();
    let script = d.write("s.json", "[]");
    let script = script.to_str().unwrap();
    let base = ["--provider", "scripted", "--script", script];
    for (flag, rule) in [
        ("--timeout", "must be greater than 0"),
        ("--max-command-timeout", "must be greater than 0"),
        ("--model-timeout", "must be greater than 0"),
        ("--max-steps", "must be greater than 0"),
        ("--max-tokens", "must be greater than 0"),
        ("--context-window", "must be greater than 0"),
        ("--max-time", "must be greater than 0"),
        ("--output-limit", "must be at least 100"),
        ("--cpus", "--cpus must be greater than 0, got -3"),
        (
            "--pids-limit",
            "--pids-limit must be greater than 0, got -3",
        ),
        ("--max-cost", "--max-cost must be greater than 0, got -3"),
    ] {
        let joined = format!("{flag}=-3");
        let mut args: Vec<&str> = base.to_vec();
        args.extend([joined.as_str(), "x"]);
        refused(&d, &args, rule);
        let mut args: Vec<&str> = base.to_vec();
        args.extend([flag, "-3", "x"]);
        refused(&d, &args, rule);
    }
    // The clap-parsed ones name the flag and the value too.
    let r = run(d.runner().args(base).args(["--timeout", "-3", "x"]));
    assert!(
        r.stderr().starts_with(
            "error: invalid value '-3' for '--timeout <TIMEOUT>': must be greater than 0"
        ),
        "{}",
        r.explain()
    );
    // Zero is refused by the same rule, and a word is not a number.
    refused(
        &d,
        &[&base[..], &["--max-steps", "0", "x"]].concat(),
        "must be greater than 0",
    );
    refused(
        &d,
        &[&base[..], &["--timeout", "soon", "x"]].concat(),
        "not a whole number: must be greater than 0",
    );
    // The environment variable goes through the same parser.
    let r = run(d.runner().args(base).arg("x").env("RUNNER_TIMEOUT", "-3"));
    r.expect_code(2);
    assert!(
        r.stderr().contains("must be greater than 0"),
        "{}",
        r.explain()
    );
}

#[test]
fn eval_negative_numbers_get_the_flags_rule_in_both_spellings() {
    let _s = shared();
    let d = Dir::new();
    let tasks = example_tasks();
    for (flag, rule) in [
        ("--jobs", "must be greater than 0"),
        ("--attempts", "must be greater than 0"),
        ("--retry-errors", "must be 0 or more"),
        ("--timeout", "must be greater than 0"),
        ("--cpus", "--cpus must be greater than 0"),
        ("--agent-timeout", "--agent-timeout must be greater than 0"),
        (
            "--verifier-timeout",
            "--verifier-timeout must be greater than 0",
        ),
        ("--pids-limit", "--pids-limit must be greater than 0"),
        ("--suite-max-cost", "--suite-max-cost must be 0 or more"),
        ("--min-pass-rate", "--min-pass-rate must be between 0 and 1"),
    ] {
        let joined = format!("{flag}=-3");
        refused(&d, &["eval", joined.as_str(), tasks.as_str()], rule);
        refused(&d, &["eval", flag, "-3", tasks.as_str()], rule);
    }
}

#[test]
fn help_shows_the_model_default_of_each_provider() {
    let _s = shared();
    let d = Dir::new();
    for args in [vec!["--help"], vec!["eval", "--help"]] {
        let r = run(d.runner().args(&args));
        r.expect_code(0);
        let out = r.stdout();
        let line = out
            .lines()
            .skip_while(|l| !l.contains("--model <MODEL>"))
            .take(3)
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            line.contains("[default: claude-sonnet-4-5 for anthropic, gpt-4o for openai]"),
            "{args:?}: {line}{}",
            r.explain()
        );
    }
}

/// Needs the Docker engine (and FAILS without it): the image is looked up
/// there. The pull goes to a closed port on loopback, never outside.
mod docker {
    use super::*;

    #[test]
    fn a_missing_image_that_is_not_runners_says_how_to_make_it_available() {
        let _s = shared();
        let d = Dir::new();
        let script = d.write("s.json", "[]");
        let image = "127.0.0.1:9/runner-missing:nope";
        let r = run(d.runner().args([
            "--provider",
            "scripted",
            "--script",
            script.to_str().unwrap(),
            "--image",
            image,
            "x",
        ]));
        r.expect_code(2);
        let err = r.stderr();
        let error = err.lines().find(|l| l.starts_with("error: ")).unwrap_or("");
        assert!(
            error.starts_with(&format!(
                "error: image '{image}' is not available: it is not on this engine and pulling it failed"
            )),
            "{}",
            r.explain()
        );
        let hint = err.lines().find(|l| l.starts_with("hint: ")).unwrap_or("");
        assert!(
            hint.contains(&format!("`docker pull {image}`"))
                && hint.contains("`docker load -i FILE.tar`")
                && !hint.contains("sandbox-image"),
            "{}",
            r.explain()
        );
    }
}
