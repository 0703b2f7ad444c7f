//! A command line read as the shell will run it, for the risky list: parsed
//! with brush-parser (POSIX and bash syntax) into its simple commands —
//! in lists, pipelines, `&&`/`||`, subshells, groups, loops, conditionals,
//! functions, command and process substitutions, and the strings of
//! `sh -c`/`bash -c` — each as its words after quote removal (`\curl`,
//! `"curl"` and `cu''rl` are all `curl`), with the paths its redirects
//! write and the working directory it runs in, as far as literal `cd`s in
//! the line tell.
//!
//! What cannot be read without running it is said instead: `eval`, a
//! variable or substitution in the command's place, a `sh -c` string built
//! at run time, a line that does not parse. The caller asks about those.

use std::path::{Path, PathBuf};

use brush_parser::ast::{self, CommandPrefixOrSuffixItem as Item};
use brush_parser::word::{self, WordPiece, WordPieceWithSource};
use brush_parser::{Parser, ParserOptions};

/// One simple command of the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Simple {
    /// Its words after quote removal, assignments before the program left
    /// out; `$VAR` and `$(...)` kept as written.
    pub words: Vec<String>,
    /// The words from the program on, wrappers (`env`, `sudo`, `xargs`,
    /// `busybox`...) and their options skipped.
    pub program: Vec<String>,
    /// What its redirects (`>`, `>>`, `>|`, `&>`, `<>`) write.
    pub redirect_writes: Vec<String>,
    /// Its working directory: `None` once a `cd` went somewhere the line
    /// does not say (`cd $X`, `cd -`, `cd` alone).
    pub cwd: Option<PathBuf>,
}

/// The line, read.
#[derive(Debug, Default)]
pub struct Reading {
    pub commands: Vec<Simple>,
    /// Why some of it cannot be read without running it.
    pub dynamic: Option<String>,
}

/// Words that run the command after them (their options skipped too).
const WRAPPERS: &[&str] = &[
    "sudo", "doas", "env", "time", "nohup", "nice", "exec", "command", "builtin", "xargs",
    "busybox", "timeout", "stdbuf", "setsid", "ionice", "chrt", "taskset", "unbuffer", "strace",
    "watch", "flock", "nsenter", "unshare", "chroot",
];

/// Shells whose `-c` string is a command line to read in turn.
const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh",
];

/// How deep `sh -c` strings and substitutions nest before the line counts
/// as unreadable.
const MAX_DEPTH: usize = 8;

/// The longest line parsed; a longer one is asked about unread (a
/// command line of the model's is short; parsing is not free).
const MAX_LINE_BYTES: usize = 64 * 1024;

/// The deepest nesting of brackets parsed: the parser recurses per level,
/// and a thread's stack (2 MiB for tokio's workers) must hold it.
const MAX_NESTING: usize = 32;

/// How deep `(`, `{` and `[` nest in `line`, quotes ignored (so it may
/// over-count, which only makes a line unread, and asked about).
fn nesting(line: &str) -> usize {
    let (mut depth, mut most) = (0usize, 0usize);
    for b in line.bytes() {
        match b {
            b'(' | b'{' | b'[' => {
                depth += 1;
                most = most.max(depth);
            }
            b')' | b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    most
}

/// Reads `line`, whose commands start in `workdir`.
pub fn read(line: &str, workdir: &Path) -> Reading {
    if line.len() > MAX_LINE_BYTES {
        return Reading {
            commands: Vec::new(),
            dynamic: Some(format!("the line is longer than {MAX_LINE_BYTES} bytes")),
        };
    }
    if nesting(line) > MAX_NESTING {
        return Reading {
            commands: Vec::new(),
            dynamic: Some(format!("the line nests more than {MAX_NESTING} levels")),
        };
    }
    // The line is the model's: a parser bug it trips must be a question,
    // not a crash.
    std::panic::catch_unwind(|| {
        let mut w = Walk {
            out: Reading::default(),
            cwd: Some(workdir.to_path_buf()),
            depth: 0,
        };
        w.program(line);
        w.out
    })
    .unwrap_or_else(|_| Reading {
        commands: Vec::new(),
        dynamic: Some("the shell parser failed on the line".into()),
    })
}

struct Walk {
    out: Reading,
    cwd: Option<PathBuf>,
    depth: usize,
}

/// A word after quote removal.
struct Expanded {
    text: String,
    /// Whether its text comes from an expansion the shell does at run time.
    dynamic: bool,
}

impl Walk {
    fn dynamic(&mut self, why: impl Into<String>) {
        self.out.dynamic.get_or_insert_with(|| why.into());
    }

    fn program(&mut self, text: &str) {
        if self.depth >= MAX_DEPTH {
            return self.dynamic("commands nested too deep to read");
        }
        self.depth += 1;
        let mut parser = Parser::new(text.as_bytes(), &ParserOptions::default());
        match parser.parse_program() {
            Ok(p) => p.complete_commands.iter().for_each(|l| self.list(l)),
            Err(e) => self.dynamic(format!("the line does not parse as shell ({e})")),
        }
        self.depth -= 1;
    }

    fn list(&mut self, l: &ast::CompoundList) {
        for ast::CompoundListItem(and_or, _) in &l.0 {
            self.pipeline(&and_or.first);
            for next in &and_or.additional {
                let (ast::AndOr::And(p) | ast::AndOr::Or(p)) = next;
                self.pipeline(p);
            }
        }
    }

    fn pipeline(&mut self, p: &ast::Pipeline) {
        p.seq.iter().for_each(|c| self.command(c));
    }

    fn command(&mut self, c: &ast::Command) {
        match c {
            ast::Command::Simple(s) => self.simple(s),
            ast::Command::Compound(cc, redirects) => {
                self.compound(cc);
                self.redirects_only(redirects.as_ref());
            }
            ast::Command::Function(f) => {
                self.compound(&f.body.0);
                self.redirects_only(f.body.1.as_ref());
            }
            ast::Command::ExtendedTest(_, redirects) => self.redirects_only(redirects.as_ref()),
        }
    }

    /// A compound command's redirects, as a command of no words.
    fn redirects_only(&mut self, redirects: Option<&ast::RedirectList>) {
        let mut writes = Vec::new();
        for r in redirects.iter().flat_map(|r| r.0.iter()) {
            self.redirect(r, &mut writes);
        }
        if !writes.is_empty() {
            let cwd = self.cwd.clone();
            self.out.commands.push(Simple {
                words: Vec::new(),
                program: Vec::new(),
                redirect_writes: writes,
                cwd,
            });
        }
    }

    fn compound(&mut self, cc: &ast::CompoundCommand) {
        use ast::CompoundCommand as C;
        match cc {
            C::BraceGroup(b) => self.list(&b.list),
            C::Subshell(s) => self.list(&s.list),
            C::ForClause(f) => {
                for w in f.values.iter().flatten() {
                    self.expand(&w.value);
                }
                self.list(&f.body.list);
            }
            C::ArithmeticForClause(f) => self.list(&f.body.list),
            C::CaseClause(c) => {
                self.expand(&c.value.value);
                c.cases
                    .iter()
                    .filter_map(|i| i.cmd.as_ref())
                    .for_each(|l| self.list(l));
            }
            C::IfClause(i) => {
                self.list(&i.condition);
                self.list(&i.then);
                for e in i.elses.iter().flatten() {
                    if let Some(c) = &e.condition {
                        self.list(c);
                    }
                    self.list(&e.body);
                }
            }
            C::WhileClause(w) | C::UntilClause(w) => {
                self.list(&w.0);
                self.list(&w.1.list);
            }
            C::Coprocess(c) => self.command(&c.body),
            C::Arithmetic(_) => {}
        }
    }

    fn redirect(&mut self, r: &ast::IoRedirect, writes: &mut Vec<String>) {
        use ast::IoFileRedirectKind as K;
        match r {
            ast::IoRedirect::File(_, kind, target) => match target {
                ast::IoFileRedirectTarget::Filename(w)
                    if matches!(kind, K::Write | K::Append | K::Clobber | K::ReadAndWrite) =>
                {
                    writes.push(self.expand(&w.value).text);
                }
                ast::IoFileRedirectTarget::Filename(w)
                | ast::IoFileRedirectTarget::Duplicate(w) => {
                    self.expand(&w.value);
                }
                ast::IoFileRedirectTarget::ProcessSubstitution(_, s) => self.list(&s.list),
                ast::IoFileRedirectTarget::Fd(_) => {}
            },
            ast::IoRedirect::OutputAndError(w, _) => writes.push(self.expand(&w.value).text),
            ast::IoRedirect::HereString(_, w) => {
                self.expand(&w.value);
            }
            ast::IoRedirect::HereDocument(..) => {}
        }
    }

    fn simple(&mut self, s: &ast::SimpleCommand) {
        let mut words: Vec<Expanded> = Vec::new();
        let mut writes = Vec::new();
        let prefix = s.prefix.iter().flat_map(|p| p.0.iter());
        let suffix = s.suffix.iter().flat_map(|p| p.0.iter());
        for item in prefix {
            self.item(item, None, &mut writes);
        }
        if let Some(w) = &s.word_or_name {
            words.push(self.expand(&w.value));
        }
        for item in suffix {
            self.item(item, Some(&mut words), &mut writes);
        }
        let start = program_start(&words);
        if let Some(p) = words.get(start) {
            if p.dynamic {
                self.dynamic(format!(
                    "the command's name comes from a variable or substitution ({})",
                    p.text
                ));
            }
            self.program_words(&words[start..]);
        }
        let cwd = self.cwd.clone();
        self.out.commands.push(Simple {
            program: words[start.min(words.len())..]
                .iter()
                .map(|w| w.text.clone())
                .collect(),
            words: words.into_iter().map(|w| w.text).collect(),
            redirect_writes: writes,
            cwd,
        });
    }

    fn item(&mut self, item: &Item, words: Option<&mut Vec<Expanded>>, writes: &mut Vec<String>) {
        match item {
            Item::IoRedirect(r) => self.redirect(r, writes),
            Item::ProcessSubstitution(_, s) => self.list(&s.list),
            Item::Word(w) | Item::AssignmentWord(_, w) => {
                let e = self.expand(&w.value);
                if let Some(words) = words {
                    words.push(e);
                }
            }
        }
    }

    /// What the program itself tells: `eval`, `sh -c STRING`, `cd DIR`.
    fn program_words(&mut self, words: &[Expanded]) {
        let name = words[0].text.rsplit('/').next().unwrap_or("");
        if matches!(name, "eval") {
            return self.dynamic("eval runs a string built at run time");
        }
        if SHELLS.contains(&name) {
            let flag = words[1..].iter().position(|w| {
                w.text.starts_with('-') && !w.text.starts_with("--") && w.text.contains('c')
            });
            if let Some(i) = flag {
                match words[1 + i + 1..].iter().find(|w| !w.text.starts_with('-')) {
                    Some(s) if s.dynamic => {
                        self.dynamic(format!("{name} -c runs a string built at run time"))
                    }
                    Some(s) => {
                        let script = s.text.clone();
                        self.program(&script);
                    }
                    None => {}
                }
            }
        }
        if matches!(name, "cd" | "pushd" | "popd") {
            let dir = words[1..]
                .iter()
                .find(|w| !w.text.starts_with('-') || w.text == "-");
            self.cwd = match (name, dir) {
                ("popd", _) | (_, None) => None,
                (_, Some(d)) if d.dynamic || d.text == "-" || d.text.starts_with('~') => None,
                (_, Some(d)) => self
                    .cwd
                    .as_ref()
                    .map(|c| super::policy::normalize(&c.join(&d.text))),
            };
        }
    }

    /// Quote removal on `raw`; substitutions in it are read as commands.
    fn expand(&mut self, raw: &str) -> Expanded {
        match word::parse(raw, &ParserOptions::default()) {
            Ok(pieces) => {
                let mut e = Expanded {
                    text: String::new(),
                    dynamic: false,
                };
                self.pieces(raw, &pieces, &mut e);
                e
            }
            Err(_) => {
                self.dynamic(format!("a word does not parse as shell ({raw})"));
                Expanded {
                    text: raw.to_string(),
                    dynamic: true,
                }
            }
        }
    }

    fn pieces(&mut self, raw: &str, pieces: &[WordPieceWithSource], e: &mut Expanded) {
        for p in pieces {
            let source = raw.get(p.start_index..p.end_index).unwrap_or("");
            match &p.piece {
                WordPiece::Text(s) | WordPiece::SingleQuotedText(s) => e.text.push_str(s),
                WordPiece::AnsiCQuotedText(s) => {
                    // `$'\x63url'`: its escapes are the shell's to decode.
                    e.dynamic |= s.contains('\\');
                    e.text.push_str(s);
                }
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => self.pieces(raw, inner, e),
                WordPiece::TildeExpansion(_) => e.text.push_str(source),
                WordPiece::EscapeSequence(s) => e
                    .text
                    .push_str(s.strip_prefix('\\').unwrap_or(s).trim_start_matches('\n')),
                WordPiece::CommandSubstitution(s) | WordPiece::BackquotedCommandSubstitution(s) => {
                    self.program(s);
                    e.dynamic = true;
                    e.text.push_str(source);
                }
                WordPiece::ParameterExpansion(_) | WordPiece::ArithmeticExpression(_) => {
                    e.dynamic = true;
                    e.text.push_str(source);
                }
            }
        }
    }
}

/// Where the program is among `words`: after wrappers, their options and
/// the values those take (`nice -n 5`, `timeout 10s`, `env -i X=1`).
fn program_start(words: &[Expanded]) -> usize {
    let mut i = 0;
    while let Some(w) = words.get(i) {
        let name = w.text.rsplit('/').next().unwrap_or("");
        if !WRAPPERS.contains(&name) {
            break;
        }
        i += 1;
        while let Some(a) = words.get(i) {
            let t = &a.text;
            let value = t.starts_with('-')
                || t.starts_with(|c: char| c.is_ascii_digit())
                || t.split_once('=').is_some_and(|(n, _)| {
                    !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                });
            if !value {
                break;
            }
            i += 1;
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_lines_end_in_a_reading_not_a_crash() {
        let deep = format!("{}echo{}", "(".repeat(5000), ")".repeat(5000));
        let subst = format!("{}x{}", "$(".repeat(200), ")".repeat(200));
        // Just under the limit, on a thread with a tokio worker's stack.
        let under = format!("{}x{}", "$(".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
        let mixed = format!(
            "{}x{}",
            "( $( ${ [[ ".repeat(MAX_NESTING / 4),
            " ]] } ) )".repeat(MAX_NESTING / 4)
        );
        for line in [under.clone(), mixed] {
            std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn(move || read(&line, Path::new("/w")))
                .expect("spawn")
                .join()
                .expect("no overflow");
        }
        let long = "a ".repeat(MAX_LINE_BYTES);
        for line in [
            deep.as_str(),
            &subst,
            &long,
            "\0\u{7}'\"`$((",
            "sh -c 'sh -c \"sh -c x\"'",
        ] {
            let _ = read(line, Path::new("/workspace"));
        }
        assert!(read(&long, Path::new("/w")).dynamic.is_some());
        let r = read("cd sub && x=1 \\cp a \"b c\" 2>/dev/null", Path::new("/w"));
        let last = r.commands.last().expect("a command");
        assert_eq!(last.words, ["cp", "a", "b c"]);
        assert_eq!(last.cwd.as_deref(), Some(Path::new("/w/sub")));
    }
}
