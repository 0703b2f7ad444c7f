//! `runner eval --resume DIR` alone: the suite goes on with the task paths
//! and the flags its `suite.json` recorded. The record is data (anyone who
//! can write the directory can edit it): only the task paths and flags
//! that neither loosen a sandbox, nor decide where an API key or a file
//! goes, are taken from it. The others are this command line's or the
//! defaults; when the suite ran with other values, the resume is refused
//! naming the difference (the fingerprint check), so they are given again.

use std::path::{Path, PathBuf};

use clap::{CommandFactory, Parser};

use super::{Cli, Command, EvalArgs};
use crate::eval::manifest;
use crate::hints::Failure;

/// Flags taken from the record: none loosens a sandbox, chooses where
/// the key goes (`--base-url` is not here), names a file to read or write
/// (`--script` is not here) or sets how much runs at once (`--jobs`).
const TAKEN: &[&str] = &[
    "agent",
    "provider",
    "model",
    "attempts",
    "filter",
    "retry-errors",
    "shard",
    "suite-max-cost",
    "agent-timeout",
    "verifier-timeout",
    "grading",
    "regrade-flagged",
    "max-steps",
    "max-cost",
    "max-tokens",
    "timeout",
    "max-command-timeout",
    "tools",
    "shell",
    "deny",
    "no-default-deny",
    "min-pass-rate",
    "fail-on-error",
    "accept-flagged",
];

/// The words after `eval` on this process's command line.
pub fn typed_after_eval() -> Vec<String> {
    let all: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    match all.iter().position(|a| a == "eval") {
        Some(i) => all[i + 1..].to_vec(),
        None => Vec::new(),
    }
}

/// The flags `args` was typed with (`typed`: the words after `eval`),
/// completed from DIR's record when they are `--resume DIR` without task
/// paths.
pub fn complete(args: EvalArgs, typed: Vec<String>) -> Result<EvalArgs, Failure> {
    let Some(dir) = args.resume.clone().filter(|_| args.paths.is_empty()) else {
        return Ok(args);
    };
    let suite = manifest::read_suite(&dir)
        .map_err(|e| Failure::new(e.to_string(), Some(e.hint().to_string())))?;
    let Some(inv) = suite.invocation else {
        return Err(Failure::new(
            format!(
                "{} does not record the command that started the suite (an older runner wrote it)",
                dir.join(manifest::SUITE_FILE).display()
            ),
            Some(format!(
                "give the task paths and flags again: runner eval PATH... --resume {}",
                dir.display()
            )),
        ));
    };
    let now = words(&typed);
    let given: Vec<&str> = now.iter().filter_map(|w| w.flag()).collect();
    let mut argv = vec!["runner".to_string(), "eval".to_string()];
    for w in words(&inv.args) {
        match &w {
            Word::Path(p) => argv.push(absolute(&inv.cwd, p)),
            Word::Flag { name, value } if TAKEN.contains(&name.as_str()) => {
                if given.contains(&name.as_str()) {
                    continue;
                }
                argv.push(format!("--{name}"));
                argv.extend(value.clone());
            }
            Word::Flag { .. } => {}
        }
    }
    argv.extend(typed);
    // What the record gave, before anything runs: the person resuming
    // sees every flag taken from it.
    eprintln!(
        "resuming: {}",
        crate::terminal::one_cell(&argv[1..].join(" "))
    );
    match Cli::try_parse_from(&argv) {
        Ok(Cli {
            command: Some(Command::Eval(e)),
            ..
        }) => Ok(*e),
        Ok(_) => Err(Failure::new(
            "the recorded command is not `runner eval`",
            Some("give the task paths and flags again".into()),
        )),
        Err(e) => Err(Failure::new(
            format!(
                "the command {} recorded does not parse: {}",
                dir.display(),
                e.kind()
            ),
            Some(format!(
                "give the task paths and flags again: runner eval PATH... --resume {}",
                dir.display()
            )),
        )),
    }
}

/// One word of an `eval` command line: a flag (its long name, and its
/// value when it takes one) or a task path.
#[derive(Debug, PartialEq, Eq)]
enum Word {
    Flag { name: String, value: Option<String> },
    Path(String),
}

impl Word {
    fn flag(&self) -> Option<&str> {
        match self {
            Word::Flag { name, .. } => Some(name),
            Word::Path(_) => None,
        }
    }
}

/// `words` as `runner eval` reads them: which take a value is clap's
/// own answer; short flags come back under their long names.
fn words(words: &[String]) -> Vec<Word> {
    let cmd = Cli::command();
    let Some(eval) = cmd.find_subcommand("eval") else {
        return Vec::new();
    };
    let arg_of = |w: &str| {
        eval.get_arguments().find(|a| {
            if let Some(long) = w.strip_prefix("--") {
                a.get_long() == Some(long)
            } else {
                let mut c = w.chars().skip(1);
                matches!((c.next(), a.get_short()), (Some(x), Some(s)) if x == s)
            }
        })
    };
    let mut out = Vec::new();
    let mut it = words.iter();
    let mut only_paths = false;
    while let Some(w) = it.next() {
        if only_paths || !w.starts_with('-') || w == "-" {
            out.push(Word::Path(w.clone()));
            continue;
        }
        if w == "--" {
            only_paths = true;
            continue;
        }
        let (head, inline) = match w.split_once('=') {
            Some((h, v)) if w.starts_with("--") => (h, Some(v.to_string())),
            _ => (w.as_str(), None),
        };
        let Some(arg) = arg_of(head) else {
            continue;
        };
        let name = arg.get_long().unwrap_or(arg.get_id().as_str()).to_string();
        let takes = arg.get_action().takes_values();
        let short_attached = !head.starts_with("--") && head.len() > 2;
        let value = match (takes, inline) {
            (false, _) => None,
            (true, Some(v)) => Some(v),
            (true, None) if short_attached => Some(head[2..].to_string()),
            (true, None) => it.next().cloned(),
        };
        out.push(Word::Flag { name, value });
    }
    out
}

/// `p` against `cwd` when relative.
fn absolute(cwd: &Path, p: &str) -> String {
    let path = PathBuf::from(p);
    if path.is_absolute() {
        p.to_string()
    } else {
        cwd.join(path).to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn words_know_which_flags_take_values_and_which_words_are_paths() {
        let w = words(&s(&[
            "tasks",
            "--agent",
            "oracle",
            "-j2",
            "--json=r.json",
            "--allow-internet",
            "more",
            "-j",
            "3",
        ]));
        let flag = |n: &str, v: Option<&str>| Word::Flag {
            name: n.into(),
            value: v.map(str::to_string),
        };
        assert_eq!(
            w,
            vec![
                Word::Path("tasks".into()),
                flag("agent", Some("oracle")),
                flag("jobs", Some("2")),
                flag("json", Some("r.json")),
                flag("allow-internet", None),
                Word::Path("more".into()),
                flag("jobs", Some("3")),
            ]
        );
    }

    fn manifest_of(invocation: Option<manifest::Invocation>) -> manifest::SuiteManifest {
        manifest::SuiteManifest {
            format: manifest::MANIFEST_VERSION,
            id: "eval-x".into(),
            fingerprint: "f".into(),
            tasks: vec!["t".into()],
            attempts_per_task: 1,
            settings: serde_json::json!({}),
            shard: None,
            shard_tasks: vec!["t".into()],
            started_at: chrono::Local::now(),
            invocation,
        }
    }

    /// An output directory whose suite.json was edited: what it names
    /// as paths and safe flags is taken; what would loosen a sandbox,
    /// route the key or write a file is not.
    #[test]
    fn a_recorded_command_loosens_nothing_and_names_no_file_to_write() {
        let dir = tempfile::tempdir().unwrap();
        let m = manifest_of(Some(manifest::Invocation {
            cwd: "/home/u/proj".into(),
            args: s(&[
                "tasks",
                "--agent",
                "oracle",
                "-j",
                "3",
                "--executor",
                "local",
                "--base-url",
                "http://127.0.0.1:9/",
                "--network",
                "--allow-internet",
                "--json",
                "/home/u/.bashrc",
                "--html",
                "x.html",
                "--seccomp",
                "default",
                "--user",
                "root",
                "--disk",
                "unlimited",
                "--env",
                "K=v",
                "--output-dir",
                "/elsewhere",
                "--script",
                "s.json",
            ]),
        }));
        manifest::write_suite(dir.path(), &m).unwrap();
        let d = dir.path().to_string_lossy().into_owned();
        let typed = s(&["--resume", &d]);
        let cli = Cli::try_parse_from(["runner", "eval", "--resume", &d]).unwrap();
        let Some(Command::Eval(args)) = cli.command else {
            panic!("eval")
        };
        let e = complete(*args, typed).unwrap();
        assert_eq!(e.paths, vec![PathBuf::from("/home/u/proj/tasks")]);
        assert_eq!(e.jobs, 1, "--jobs is this command line's");
        assert_eq!(e.agent_kind, crate::eval::settings::AgentKind::Oracle);
        assert_eq!(e.executor, crate::backend_kind::BackendKind::Docker);
        assert_eq!(e.agent.base_url, None);
        assert!(!e.allow_internet);
        assert_eq!(e.reports.json, None);
        assert_eq!(e.html, None);
        assert_eq!(e.seccomp, crate::config::DEFAULT_SECCOMP);
        assert_eq!(e.user, None);
        assert_eq!(e.disk, crate::config::DEFAULT_DISK);
        assert!(e.agent.env.is_empty());
        assert_eq!(e.output_dir, None);
        assert_eq!(e.resume, Some(PathBuf::from(&d)));
        assert_eq!(e.agent.script, None, "no file named by the record is read");
    }

    #[test]
    fn a_directory_without_a_recorded_command_says_to_give_the_paths() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = manifest_of(None);
        m.invocation = None;
        manifest::write_suite(dir.path(), &m).unwrap();
        let d = dir.path().to_string_lossy().into_owned();
        let cli = Cli::try_parse_from(["runner", "eval", "--resume", &d]).unwrap();
        let Some(Command::Eval(args)) = cli.command else {
            panic!("eval")
        };
        let f = complete(*args, s(&["--resume", &d])).unwrap_err();
        assert!(f.message.contains("suite.json"), "{}", f.message);
        assert!(f.hint.unwrap().contains("runner eval PATH"));
    }

    #[test]
    fn every_taken_flag_is_a_flag_of_eval() {
        let cmd = Cli::command();
        let eval = cmd.find_subcommand("eval").unwrap();
        for name in TAKEN {
            assert!(
                eval.get_arguments().any(|a| a.get_long() == Some(name)),
                "--{name} is not a flag of runner eval"
            );
        }
    }
}
