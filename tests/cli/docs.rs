//! README.md and docs/ as a reader meets them: every relative link names
//! a file that exists, every `#anchor` a heading of its page (GitHub's
//! slugs), and every `--flag` of a `runner` command in a shell block is
//! a flag of that (sub)command's `--help`.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// README.md and every page of docs/.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![Path::new(ROOT).join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

/// What a page holds for this test.
#[derive(Default)]
struct Page {
    anchors: HashSet<String>,
    links: Vec<String>,
    /// Shell blocks' text.
    shell: Vec<String>,
}

/// GitHub's heading anchor: lower case, punctuation but `-` and `_`
/// dropped, spaces to `-`; a repeated one gets `-1`, `-2`...
fn slug(text: &str, seen: &mut HashMap<String, usize>) -> String {
    let base: String = text
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect();
    let n = seen.entry(base.clone()).or_insert(0);
    let s = if *n == 0 {
        base.clone()
    } else {
        format!("{base}-{n}")
    };
    *n += 1;
    s
}

fn read(path: &Path) -> Page {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut page = Page::default();
    let mut seen = HashMap::new();
    let (mut heading, mut code): (Option<String>, Option<String>) = (None, None);
    for ev in Parser::new(&text) {
        match ev {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                if let Some(h) = heading.take() {
                    page.anchors.insert(slug(&h, &mut seen));
                }
            }
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                page.links.push(dest_url.to_string());
            }
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(lang)))
                if matches!(&*lang, "sh" | "bash" | "console" | "shell") =>
            {
                code = Some(String::new());
            }
            Event::End(TagEnd::CodeBlock) => page.shell.extend(code.take()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
                if let Some(c) = code.as_mut() {
                    c.push_str(&t);
                }
            }
            _ => {}
        }
    }
    page
}

#[test]
fn every_link_and_anchor_of_readme_and_docs_resolves() {
    let mut problems = Vec::new();
    let all = pages();
    let mut cache: HashMap<PathBuf, HashSet<String>> = HashMap::new();
    for path in &all {
        let page = read(path);
        for link in &page.links {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = link.split_once('#').unwrap_or((link, ""));
            let target = if file.is_empty() {
                path.clone()
            } else {
                path.parent().unwrap().join(file)
            };
            if !target.exists() {
                problems.push(format!("{}: {link}: no such file", path.display()));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            let anchors = cache
                .entry(target.clone())
                .or_insert_with(|| read(&target).anchors);
            if !anchors.contains(anchor) {
                problems.push(format!(
                    "{}: {link}: no heading #{anchor} in {}",
                    path.display(),
                    target.display()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(all.len() >= 10, "README.md and the docs pages: {all:?}");
}

#[test]
fn readme_is_a_landing_page_of_at_most_250_lines() {
    let text = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let lines = text.lines().count();
    assert!(lines <= 250, "README.md has {lines} lines");
    let top: String = text.lines().take(30).collect::<Vec<_>>().join("\n");
    for cmd in ["make demo", "make test"] {
        assert!(top.contains(cmd), "README's top shows `{cmd}`");
    }
}

/// The `runner` commands of a shell block: continuation lines joined,
/// comments dropped, as words.
fn runner_commands(block: &str) -> Vec<Vec<String>> {
    let joined = block.replace("\\\n", " ");
    joined
        .lines()
        .filter_map(|line| {
            let line = line.split(" #").next().unwrap_or("").trim();
            let words: Vec<&str> = line.split_whitespace().collect();
            // After environment assignments and a `$ ` prompt.
            let start = words
                .iter()
                .position(|w| *w != "$" && (w.starts_with('-') || !w.contains('=')))?;
            (words.get(start) == Some(&"runner"))
                .then(|| words[start..].iter().map(|w| w.to_string()).collect())
        })
        .collect()
}

const SUBCOMMANDS: &[&str] = &["eval", "merge", "gc", "view", "continue", "completions"];

#[test]
fn every_flag_in_the_docs_command_blocks_is_a_flag_of_its_command() {
    let bin = env!("CARGO_BIN_EXE_runner");
    let mut helps: HashMap<Vec<String>, String> = HashMap::new();
    let mut problems = Vec::new();
    let mut checked = 0;
    for path in pages() {
        for block in read(&path).shell {
            for words in runner_commands(&block) {
                let sub: Vec<String> = words[1..]
                    .iter()
                    .take_while(|w| SUBCOMMANDS.contains(&w.as_str()))
                    .cloned()
                    .collect();
                let help = helps.entry(sub.clone()).or_insert_with(|| {
                    let out = Command::new(bin)
                        .args(&sub)
                        .arg("--help")
                        .output()
                        .expect("runner --help");
                    String::from_utf8_lossy(&out.stdout).into_owned()
                });
                for w in words.iter().filter(|w| w.starts_with("--")) {
                    let flag = w.split('=').next().unwrap_or(w);
                    let known = help
                        .split(|c: char| !(c.is_alphanumeric() || c == '-'))
                        .any(|t| t == flag);
                    checked += 1;
                    if !known {
                        problems.push(format!(
                            "{}: `{}`: {flag} is not in `runner {} --help`",
                            path.display(),
                            words.join(" "),
                            sub.join(" ")
                        ));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        checked > 50,
        "only {checked} flags found in the docs' commands"
    );
}

#[test]
fn make_install_puts_the_binary_man_pages_and_completions_in_place() {
    let dest = tempfile::tempdir().unwrap();
    let out = Command::new("make")
        .current_dir(ROOT)
        .arg("install")
        .arg(format!("DESTDIR={}", dest.path().display()))
        .arg("PREFIX=/usr")
        .arg(format!("INSTALL_BIN={}", env!("CARGO_BIN_EXE_runner")))
        .output()
        .expect("make");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "make install: {said}");
    let usr = dest.path().join("usr");
    let read = |rel: &str| {
        std::fs::read_to_string(usr.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}\n{said}"))
    };
    assert!(usr.join("bin/runner").is_file());
    let man = read("share/man/man1/runner.1");
    assert!(
        man.starts_with(".ie") || man.contains(".TH runner 1"),
        "{man}"
    );
    assert!(read("share/man/man1/runner-eval.1").contains("\\-\\-resume"));
    let bash = read("share/bash-completion/completions/runner");
    assert!(bash.contains("complete -F") && bash.contains("--retry-errors"));
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(usr.join("share/bash-completion/completions/runner"))
        .status()
        .unwrap();
    assert!(syntax.success(), "the bash completion script parses");
    assert!(read("share/zsh/site-functions/_runner").contains("#compdef runner"));
    assert!(read("share/fish/vendor_completions.d/runner.fish").contains("complete -c runner"));
}

/// The Action and the example workflow against GitHub's own schemas, as
/// check-jsonschema vendors them (offline; `make test` installs it).
#[test]
fn the_action_and_the_example_workflow_match_githubs_schemas() {
    for (schema, file) in [
        ("vendor.github-actions", "action.yml"),
        ("vendor.github-workflows", "docs/ci/github-actions.yml"),
    ] {
        let out = Command::new("python3")
            .args(["-m", "check_jsonschema", "--builtin-schema", schema, file])
            .current_dir(ROOT)
            .output()
            .expect("python3");
        assert!(
            out.status.success(),
            "{file} against {schema} (needs check-jsonschema: bash sandbox/install-host.sh test):\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
