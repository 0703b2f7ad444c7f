//! Which commands `--approve risky` asks about: the deny list's patterns
//! (asked about when `--no-default-deny` lets them through) and the risky
//! list below. A prompt for a person, not a security boundary: a command
//! can hide what it does from any list of patterns (a script it wrote, a
//! variable, an alias), and the sandbox stays what contains it.
//!
//! Every rule matches words anywhere in the command line, so it errs
//! toward asking: `echo curl` is asked about too.

use std::path::{Component, Path, PathBuf};

use regex::Regex;

use crate::tools::policy::Policy;

/// The rule name of a deny-list pattern.
pub const DENY_LIST_RULE: &str = "deny-list";

/// The rule name of writes outside the workspace.
pub const OUTSIDE_WORKSPACE_RULE: &str = "outside-workspace";

/// A command word: at the start, or after a space, a separator, an opening
/// parenthesis, a backtick or a slash (`/usr/bin/curl`).
const AT_WORD: &str = r"(^|[\s;&|(`/])";

/// The end of a command word.
const END_WORD: &str = r"(\s|$|[;&|)`])";

/// One named rule of the risky list.
pub struct Rule {
    pub name: &'static str,
    /// What it matches, for the README and `--help`.
    pub about: &'static str,
    /// Regular expressions; `{W}` is [`AT_WORD`], `{E}` is [`END_WORD`].
    pub patterns: &'static [&'static str],
}

/// The risky list, in the order it is checked (after the deny list);
/// writes outside the workspace ([`OUTSIDE_WORKSPACE_RULE`]) come last.
pub const RISKY_RULES: &[Rule] = &[
    Rule {
        name: "package-install",
        about: "installing or removing packages: apt, apt-get, dpkg -i, yum, dnf, apk, pacman, brew, pip, uv, poetry, npm, pnpm, yarn, npx, cargo install, go install, gem, conda",
        patterns: &[
            r"{W}(apt|apt-get|aptitude)\s+(-\S+\s+)*(install|reinstall|remove|purge|upgrade|dist-upgrade|full-upgrade|autoremove|build-dep){E}",
            r"{W}dpkg\s+(-\S+\s+)*(-i|--install|-r|--remove|-P|--purge){E}",
            r"{W}(yum|dnf|microdnf|zypper|apk|brew|port|snap|flatpak|conda|mamba|micromamba|gem|pipx)\s+(-\S+\s+)*(install|reinstall|add|upgrade|update|remove|uninstall){E}",
            r"{W}pacman\s+-[SUR]",
            r"{W}(pip|pip3|pip3\.\d+)\s+(-\S+\s+)*(install|uninstall|download){E}",
            r"{W}python[0-9.]*\s+(-\S+\s+)*-m\s+pip\s+(-\S+\s+)*(install|uninstall|download){E}",
            r"{W}uv\s+(pip\s+install|add|sync|tool\s+install){E}",
            r"{W}poetry\s+(add|install){E}",
            r"{W}(npm|pnpm|yarn|bun)\s+(-\S+\s+)*(install|i|add|ci|update|upgrade){E}",
            r"{W}npx{E}",
            r"{W}cargo\s+(\+\S+\s+)?(install|add){E}",
            r"{W}go\s+(install|get){E}",
        ],
    },
    Rule {
        name: "network",
        about: "network tools: curl, wget, nc, ncat, netcat, socat, telnet, ssh, scp, sftp, ftp, rsync, and git clone, fetch, pull, push, ls-remote, submodule",
        patterns: &[
            r"{W}(curl|wget|nc|ncat|netcat|socat|telnet|ssh|scp|sftp|ftp|rsync|aria2c){E}",
            r"{W}git\s+((-C|-c)\s+\S+\s+|-\S+\s+)*(clone|fetch|pull|push|ls-remote|submodule|remote\s+update){E}",
        ],
    },
    Rule {
        name: "recursive-delete",
        about: "rm -r, rm -rf, rm --recursive (any flag order), find -delete",
        patterns: &[
            r"{W}rm\s+([^;&|\n]*\s)?(-[a-zA-Z]*[rR][a-zA-Z]*|--recursive){E}",
            r"{W}find\s[^;&|\n]*\s-delete{E}",
        ],
    },
    Rule {
        name: "privilege",
        about: "sudo, su, doas, pkexec",
        patterns: &[r"{W}(sudo|su|doas|pkexec){E}"],
    },
    Rule {
        name: "recursive-chmod",
        about: "chmod, chown or chgrp with -R or --recursive",
        patterns: &[
            r"{W}(chmod|chown|chgrp)\s+([^;&|\n]*\s)?(-[a-zA-Z]*R[a-zA-Z]*|--recursive){E}",
        ],
    },
    Rule {
        name: "disk",
        about: "dd, mkfs, fdisk, sfdisk, parted, wipefs, mkswap, mount, umount, losetup",
        patterns: &[
            r"{W}(dd|mkfs(\.\w+)?|fdisk|sfdisk|parted|wipefs|mkswap|mount|umount|losetup){E}",
        ],
    },
];

/// What `outside-workspace` means, for the README.
pub const OUTSIDE_WORKSPACE_ABOUT: &str = "a redirect (> or >>) to, or cp, mv, install, ln, rsync, tee, touch, mkdir, rm, rmdir, truncate, chmod, chown, chgrp, sed -i or dd of= naming, a path outside the workspace: absolute elsewhere, ~ or $HOME, or leaving it with ..; /dev/null, /dev/stdout, /dev/stderr, /dev/tty and /dev/fd/* are fine";

/// The compiled risky list for one sandbox's workspace.
pub struct RiskyPolicy {
    deny: Policy,
    rules: Vec<(&'static str, Regex)>,
    /// The workspace as the sandbox's commands name it.
    workdir: PathBuf,
}

impl RiskyPolicy {
    /// The list, for commands whose workspace is `workdir` (their working
    /// directory, as they name it).
    pub fn new(workdir: &str) -> RiskyPolicy {
        // The default deny list always compiles (its own tests say so).
        let deny = Policy::new(true, &[]).unwrap_or_default();
        let rules = RISKY_RULES
            .iter()
            .flat_map(|r| r.patterns.iter().map(move |p| (r.name, p)))
            .filter_map(|(name, p)| {
                let p = p.replace("{W}", AT_WORD).replace("{E}", END_WORD);
                Regex::new(&p).ok().map(|re| (name, re))
            })
            .collect();
        RiskyPolicy {
            deny,
            rules,
            workdir: normalize(Path::new(workdir)),
        }
    }

    /// The name of the first rule `command` matches, if any.
    pub fn matched(&self, command: &str) -> Option<&'static str> {
        if self.deny.check(command).is_some() {
            return Some(DENY_LIST_RULE);
        }
        if let Some((name, _)) = self.rules.iter().find(|(_, re)| re.is_match(command)) {
            return Some(name);
        }
        write_targets(command)
            .iter()
            .any(|t| self.outside(t))
            .then_some(OUTSIDE_WORKSPACE_RULE)
    }

    /// Whether writing to `target` writes outside the workspace.
    fn outside(&self, target: &str) -> bool {
        if target == "~"
            || target.starts_with("~/")
            || target.starts_with("$HOME")
            || target.starts_with("${HOME}")
        {
            return true;
        }
        let path = Path::new(target);
        let full = if path.is_absolute() {
            normalize(path)
        } else {
            normalize(&self.workdir.join(path))
        };
        const HARMLESS: &[&str] = &["/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"];
        if HARMLESS.iter().any(|h| full == Path::new(h)) || full.starts_with("/dev/fd") {
            return false;
        }
        !full.starts_with(&self.workdir)
    }
}

/// `path` with `.` and `..` resolved lexically (no file system look-up).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Commands whose every argument (but flags) is a path they write.
const WRITES_EVERY_ARG: &[&str] = &[
    "tee", "touch", "mkdir", "rm", "rmdir", "truncate", "chmod", "chown", "chgrp", "unlink",
    "shred",
];

/// Commands whose last argument is the path they write.
const WRITES_LAST_ARG: &[&str] = &["cp", "mv", "install", "ln", "rsync"];

/// Words that run the command after them.
const PREFIXES: &[&str] = &["sudo", "env", "time", "nohup", "nice", "exec", "command"];

/// The paths `command` writes, as far as a plain reading of the line
/// tells: redirect targets and the destinations of the commands above.
/// Quotes are dropped, variables other than `$HOME` are not expanded.
fn write_targets(command: &str) -> Vec<String> {
    let mut targets = redirect_targets(command);
    for simple in command.split(['\n', ';', '&', '|', '(', ')', '`']) {
        // Up to the first redirect (its target is counted above).
        let before_redirect = simple.split(['>', '<']).next().unwrap_or("");
        let mut words = words(before_redirect);
        // `2>`: the descriptor is the redirect's, not an argument.
        if before_redirect.len() < simple.len()
            && !before_redirect.ends_with(char::is_whitespace)
            && words
                .last()
                .is_some_and(|w| w.chars().all(|c| c.is_ascii_digit()))
        {
            words.pop();
        }
        let mut rest = words
            .iter()
            .map(String::as_str)
            .skip_while(|w| PREFIXES.contains(w) || is_assignment(w));
        let Some(program) = rest.next() else { continue };
        let program = program.rsplit('/').next().unwrap_or(program);
        let args: Vec<&str> = rest.collect();
        let plain: Vec<&str> = args
            .iter()
            .copied()
            .filter(|a| !a.starts_with('-'))
            .collect();
        if WRITES_EVERY_ARG.contains(&program) {
            // chmod's and chown's first argument is the mode or owner.
            let skip = usize::from(matches!(program, "chmod" | "chown" | "chgrp"));
            targets.extend(plain.iter().skip(skip).map(|s| s.to_string()));
        } else if WRITES_LAST_ARG.contains(&program) {
            targets.extend(plain.last().map(|s| s.to_string()));
            for (i, a) in args.iter().enumerate() {
                if *a == "-t" {
                    targets.extend(args.get(i + 1).map(|s| s.to_string()));
                } else if let Some(dir) = a.strip_prefix("--target-directory=") {
                    targets.push(dir.to_string());
                }
            }
        } else if program == "sed" && args.iter().any(|a| a.starts_with("-i")) {
            // The script comes first unless -e gave it.
            let skip = usize::from(!args.contains(&"-e"));
            targets.extend(plain.iter().skip(skip).map(|s| s.to_string()));
        } else if program == "dd" {
            targets.extend(
                args.iter()
                    .filter_map(|a| a.strip_prefix("of="))
                    .map(str::to_string),
            );
        }
    }
    targets
}

/// Targets of `>`, `>>`, `>|`, `&>` (not `>&2`, a descriptor).
fn redirect_targets(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = command;
    while let Some(at) = rest.find('>') {
        rest = &rest[at + 1..];
        let after = rest.trim_start_matches(['>', '|']);
        if after.starts_with('&') || after.starts_with('(') {
            continue;
        }
        if let Some(word) = words(after).into_iter().next() {
            out.push(word);
        }
    }
    out
}

/// Whitespace-separated words with quotes dropped; a word ends at a shell
/// separator too.
fn words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| {
            w.split([';', '&', '|', '<', '>', ')'])
                .next()
                .unwrap_or("")
                .replace(['\'', '"'], "")
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// `NAME=value` before a command.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RiskyPolicy {
        RiskyPolicy::new("/workspace")
    }

    #[test]
    fn every_pattern_compiles() {
        let n: usize = RISKY_RULES.iter().map(|r| r.patterns.len()).sum();
        assert_eq!(policy().rules.len(), n);
    }

    #[test]
    fn each_rule_names_what_it_matches() {
        let p = policy();
        for (cmd, rule) in [
            ("rm -rf /", DENY_LIST_RULE),
            ("shutdown -h now", DENY_LIST_RULE),
            ("apt-get install -y jq", "package-install"),
            ("apt -q install jq", "package-install"),
            ("dpkg -i x.deb", "package-install"),
            ("pip install requests", "package-install"),
            ("pip3 install --user x", "package-install"),
            ("python3 -m pip install x", "package-install"),
            ("uv pip install x", "package-install"),
            ("npm install left-pad", "package-install"),
            ("npm i", "package-install"),
            ("yarn add x", "package-install"),
            ("npx cowsay hi", "package-install"),
            ("cargo install ripgrep", "package-install"),
            ("cd x && go install ./...", "package-install"),
            ("apk add curl", "package-install"),
            ("pacman -Syu", "package-install"),
            ("gem install rails", "package-install"),
            ("curl -fsSL https://example.com", "network"),
            ("/usr/bin/wget x", "network"),
            ("echo hi | nc 10.0.0.1 80", "network"),
            ("ssh user@host ls", "network"),
            ("scp a host:b", "network"),
            ("git clone https://x/y.git", "network"),
            ("git -C repo fetch origin", "network"),
            ("git push", "network"),
            ("rm -rf x", "recursive-delete"),
            ("rm -fr build", "recursive-delete"),
            ("rm -R x", "recursive-delete"),
            ("rm x -r", "recursive-delete"),
            ("rm -f a -r b", "recursive-delete"),
            ("rm --recursive x", "recursive-delete"),
            ("find . -name '*.o' -delete", "recursive-delete"),
            ("sudo ls", DENY_LIST_RULE),
            ("doas ls", "privilege"),
            ("chmod -R 777 .", "recursive-chmod"),
            ("chown --recursive me x", "recursive-chmod"),
            ("dd if=/dev/zero of=x bs=1M count=1", "disk"),
            ("mkfs.ext4 img", DENY_LIST_RULE),
            ("mount /dev/sda1 /mnt", "disk"),
        ] {
            assert_eq!(p.matched(cmd), Some(rule), "{cmd}");
        }
    }

    #[test]
    fn ordinary_work_is_not_risky() {
        let p = policy();
        for cmd in [
            "echo hi",
            "ls -la",
            "python3 -m pytest -q",
            "cargo build --release",
            "cargo test",
            "npm test",
            "pip list",
            "pip show requests",
            "apt-cache search jq",
            "git status && git diff",
            "git commit -am msg",
            "rm -f out.txt",
            "rm build/a.o",
            "rm -f file-r",
            "grep -r curl_easy src",
            "cat notes.md | wc -l",
            "chmod +x run.sh",
            "mkdir -p out/dir",
            "cp a.txt b.txt",
            "mv src/a.rs src/b.rs",
            "echo x > out.txt",
            "echo x >> /workspace/log.txt",
            "make 2>&1 | tail",
            "cmd > /dev/null 2>&1",
            "echo oops >&2",
            "cp /etc/hosts .",
            "cat /etc/os-release",
            "sed -i 's/a/b/' src/main.rs",
            "sed -i '/foo/d' notes.txt",
            "tee out.log < in.txt",
            "X=1 ./configure --prefix=/workspace/out",
            "cp a.txt b.txt 2>/dev/null",
            "touch a 2> err.log",
        ] {
            assert_eq!(p.matched(cmd), None, "{cmd}");
        }
    }

    #[test]
    fn writes_outside_the_workspace_are_risky() {
        let p = policy();
        for cmd in [
            "echo x > /etc/passwd",
            "echo x >>/root/.bashrc",
            "echo x &> /tmp/log",
            "printf y >| /opt/file",
            "cp a.txt /usr/local/bin/a",
            "cp -t /etc a b",
            "mv a ../b",
            "install -m755 tool /usr/local/bin",
            "ln -s x /usr/bin/x",
            "echo key | tee -a /etc/hosts",
            "touch ~/marker",
            "echo x > $HOME/.profile",
            "rm /etc/motd",
            "mkdir /opt/thing",
            "touch /workspace/../etc/x",
            "chmod 600 /root/.ssh/id_rsa",
            "sed -i 's/a/b/' /etc/hosts",
            "cat x > '/etc/quoted'",
            "X=1 cp a /srv/a",
            "cp a /etc/b 2>/dev/null",
            "cp a /etc/b > log.txt",
        ] {
            assert_eq!(p.matched(cmd), Some(OUTSIDE_WORKSPACE_RULE), "{cmd}");
        }
    }

    #[test]
    fn the_workspace_is_the_sandboxs_own() {
        // On the local executor the workspace is a directory on the host.
        let p = RiskyPolicy::new("/tmp/runner-ws-1/");
        assert_eq!(p.matched("echo x > /tmp/runner-ws-1/a"), None);
        assert_eq!(p.matched("cp a /tmp/runner-ws-1/sub/b"), None);
        assert_eq!(
            p.matched("echo x > /tmp/runner-ws-10/a"),
            Some(OUTSIDE_WORKSPACE_RULE)
        );
        assert_eq!(
            p.matched("echo x > /workspace/a"),
            Some(OUTSIDE_WORKSPACE_RULE)
        );
    }

    #[test]
    fn the_deny_list_is_reused_not_copied() {
        // Every default deny pattern's own examples are risky.
        let p = policy();
        for cmd in [
            "rm -rf /*",
            "su root",
            "reboot",
            "init 0",
            "echo x > /dev/sda",
            "dd if=/dev/zero of=/dev/sda",
        ] {
            assert_eq!(p.matched(cmd), Some(DENY_LIST_RULE), "{cmd}");
        }
    }
}
