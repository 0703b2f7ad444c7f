//! Which commands `--approve risky` asks about: the deny list's patterns
//! (asked about when `--no-default-deny` lets them through), the risky
//! list below, and what cannot be read without running it. A prompt for a
//! person, not a security boundary: a command can hide what it does from
//! any list of patterns (a script it wrote, an alias, an interpreter), and
//! the sandbox stays what contains it.
//!
//! The line is parsed as the shell parses it ([`super::shell`]) and each
//! rule is matched on every simple command's words after quote removal,
//! and on the line as written (so it errs toward asking: `echo curl` is
//! asked about too).

use std::path::{Component, Path, PathBuf};

use regex::Regex;

use crate::tools::policy::Policy;

/// The rule name of a deny-list pattern.
pub const DENY_LIST_RULE: &str = "deny-list";

/// The rule name of writes outside the workspace.
pub const OUTSIDE_WORKSPACE_RULE: &str = "outside-workspace";

/// The rule name of what cannot be read without running it: `eval`, a
/// variable or substitution as the command, a `sh -c` string built at run
/// time, a line that does not parse.
pub const DYNAMIC_RULE: &str = "dynamic";

/// What [`DYNAMIC_RULE`] means, for the README.
pub const DYNAMIC_ABOUT: &str = "eval; a variable, $(...) or `...` in the command's place; sh -c or bash -c with a string built at run time; a line that does not parse as shell";

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
        let reading = super::shell::read(command, &self.workdir);
        // The line as written, then each simple command as the shell sees it.
        let lines: Vec<String> = std::iter::once(command.to_string())
            .chain(reading.commands.iter().map(|c| c.words.join(" ")))
            .collect();
        if lines.iter().any(|l| self.deny.check(l).is_some()) {
            return Some(DENY_LIST_RULE);
        }
        let hit = self
            .rules
            .iter()
            .find(|(_, re)| lines.iter().any(|l| re.is_match(l)));
        if let Some((name, _)) = hit {
            return Some(name);
        }
        if reading.dynamic.is_some() {
            return Some(DYNAMIC_RULE);
        }
        reading
            .commands
            .iter()
            .any(|c| {
                c.redirect_writes
                    .iter()
                    .chain(&command_writes(&c.program))
                    .any(|t| self.outside(t, c.cwd.as_deref()))
            })
            .then_some(OUTSIDE_WORKSPACE_RULE)
    }

    /// Whether writing to `target` from `cwd` (unknown: `None`) writes
    /// outside the workspace.
    fn outside(&self, target: &str, cwd: Option<&Path>) -> bool {
        if target == "~"
            || target.starts_with("~/")
            || target.starts_with("$HOME")
            || target.starts_with("${HOME}")
        {
            return true;
        }
        let path = Path::new(target);
        let full = match cwd {
            _ if path.is_absolute() => normalize(path),
            Some(cwd) => normalize(&cwd.join(path)),
            // After a `cd` the line does not say where to.
            None => return true,
        };
        const HARMLESS: &[&str] = &["/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"];
        if HARMLESS.iter().any(|h| full == Path::new(h)) || full.starts_with("/dev/fd") {
            return false;
        }
        !full.starts_with(&self.workdir)
    }
}

/// `path` with `.` and `..` resolved lexically (no file system look-up).
pub(super) fn normalize(path: &Path) -> PathBuf {
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

/// The paths the simple command `program` (its words from the program on,
/// quotes removed) writes, as far as its arguments tell.
fn command_writes(program: &[String]) -> Vec<String> {
    let mut targets = Vec::new();
    let Some((name, args)) = program.split_first() else {
        return targets;
    };
    let name = name.rsplit('/').next().unwrap_or(name);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let plain: Vec<&str> = args
        .iter()
        .copied()
        .filter(|a| !a.starts_with('-'))
        .collect();
    if WRITES_EVERY_ARG.contains(&name) {
        // chmod's and chown's first argument is the mode or owner.
        let skip = usize::from(matches!(name, "chmod" | "chown" | "chgrp"));
        targets.extend(plain.iter().skip(skip).map(|s| s.to_string()));
    } else if WRITES_LAST_ARG.contains(&name) {
        targets.extend(plain.last().map(|s| s.to_string()));
        for (i, a) in args.iter().enumerate() {
            if *a == "-t" {
                targets.extend(args.get(i + 1).map(|s| s.to_string()));
            } else if let Some(dir) = a.strip_prefix("--target-directory=") {
                targets.push(dir.to_string());
            }
        }
    } else if name == "sed" && args.iter().any(|a| a.starts_with("-i")) {
        // The script comes first unless -e gave it.
        let skip = usize::from(!args.contains(&"-e"));
        targets.extend(plain.iter().skip(skip).map(|s| s.to_string()));
    } else if name == "dd" {
        targets.extend(
            args.iter()
                .filter_map(|a| a.strip_prefix("of="))
                .map(str::to_string),
        );
    }
    targets
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

    #[test]
    fn quoting_escapes_and_wrappers_do_not_hide_a_command() {
        let p = policy();
        for (cmd, rule) in [
            (r"\curl -s http://x", "network"),
            (r#""curl" -s http://x"#, "network"),
            ("cu''rl -s http://x", "network"),
            (r#"c"ur"l x"#, "network"),
            (r"r\m -rf build", "recursive-delete"),
            (r#""rm" "-rf" build"#, "recursive-delete"),
            (r#""sudo" id"#, DENY_LIST_RULE),
            ("cd /etc && touch x", OUTSIDE_WORKSPACE_RULE),
            ("cd /workspace/.. ; echo x > y", OUTSIDE_WORKSPACE_RULE),
            ("(cd /etc; touch x)", OUTSIDE_WORKSPACE_RULE),
            ("cd .. && touch x", OUTSIDE_WORKSPACE_RULE),
            ("cd $D && touch x", OUTSIDE_WORKSPACE_RULE),
            ("cd && touch x", OUTSIDE_WORKSPACE_RULE),
            ("$(echo curl) x", "network"),
            ("env curl x", "network"),
            ("env -i A=1 cu''rl x", "network"),
            ("command curl x", "network"),
            ("echo http://x | xargs curl", "network"),
            ("busybox wget http://x", "network"),
            ("nice -n 5 \"wget\" x", "network"),
            ("sh -c 'cu\"\"rl x'", "network"),
            ("bash -lc \"r\\m -rf build\"", "recursive-delete"),
            ("sh -c \"sh -c 'w\\get x'\"", "network"),
            ("if true; then cu''rl x; fi", "network"),
            ("for i in 1; do \"wget\" x; done", "network"),
            ("f() { \"curl\" x; }; f", "network"),
            ("cat <(cu''rl x)", "network"),
            ("echo $(cu''rl x)", "network"),
            ("echo `cu''rl x`", "network"),
            ("{ echo x; } > /etc/y", OUTSIDE_WORKSPACE_RULE),
            ("ap''t-get install jq", "package-install"),
            ("p\\ip install x", "package-install"),
        ] {
            assert_eq!(p.matched(cmd), Some(rule), "{cmd}");
        }
    }

    #[test]
    fn what_cannot_be_read_without_running_it_is_asked_about() {
        let p = policy();
        for cmd in [
            "eval \"$X\"",
            "X=cu; ${X}rl x",
            "$CMD x",
            "$(printf cu)rl x",
            "`printf rm` -rf x",
            "$'\\x63url' x",
            "sh -c \"$S\"",
            "bash -c \"$(cat script)\"",
            "echo \"unterminated",
            "if then fi",
        ] {
            assert_eq!(p.matched(cmd), Some(DYNAMIC_RULE), "{cmd}");
        }
    }

    #[test]
    fn ordinary_shell_is_still_not_risky() {
        let p = policy();
        for cmd in [
            "cd sub && touch x",
            "cd /workspace/sub; echo x > y",
            "cd sub && cd .. && mkdir out",
            "echo 'hello world' > out.txt",
            "for f in *.txt; do wc -l \"$f\"; done",
            "X=1 make -j2",
            "python3 -c 'print(1)'",
            "sh -c 'echo hi > out.txt'",
            "ls \"$HOME\"",
            "echo $(date) >> log.txt",
            "env FOO=1 ./run.sh",
            "if [ -f x ]; then cat x; fi",
        ] {
            assert_eq!(p.matched(cmd), None, "{cmd}");
        }
    }
}
