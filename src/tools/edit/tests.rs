//! The edit tool against the local executor in a scratch directory (each
//! command and each error), and against a fake executor whose sandbox is
//! gone (the run must end).

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::exec::local::{LocalConfig, LocalExecutor};
use crate::exec::{Extras, Owner, SandboxInfo, Work};

struct Fixture {
    dir: tempfile::TempDir,
    tool: EditTool,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let exec = LocalExecutor::new(LocalConfig {
            workdir: dir.path().to_path_buf(),
            env: Vec::new(),
            keep_background: false,
            shell: crate::exec::shell::ShellMode::Fresh,
        });
        Fixture {
            tool: EditTool::new(Arc::new(exec)),
            dir,
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn write(&self, name: &str, data: impl AsRef<[u8]>) -> String {
        std::fs::write(self.dir.path().join(name), data).expect("write");
        self.path(name)
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).expect("read")
    }

    async fn call(&self, input: Value) -> ToolOutcome {
        self.tool.call(&input, &ctx()).await
    }

    /// A call that must succeed; its text.
    async fn ok(&self, input: Value) -> String {
        let out = self.call(input.clone()).await;
        assert!(!out.is_error, "{input} failed: {}", out.content);
        assert!(out.fatal.is_none());
        out.content
    }

    /// A call that must fail without ending the run; its text.
    async fn err(&self, input: Value) -> String {
        let out = self.call(input.clone()).await;
        assert!(out.is_error, "{input} succeeded: {}", out.content);
        assert!(out.fatal.is_none(), "{input} was fatal: {}", out.content);
        out.content
    }
}

fn ctx() -> ToolContext {
    ToolContext {
        cancel: CancellationToken::new(),
        full_output: None,
    }
}

#[tokio::test]
async fn view_numbers_lines_like_cat_n() {
    let f = Fixture::new();
    let p = f.write("example.py", "print(\"hello world\")\n");
    let out = f.ok(json!({"command": "view", "path": p})).await;
    assert_eq!(
        out,
        format!("Here's the result of running `cat -n` on {p}:\n     1\tprint(\"hello world\")\n")
    );
    // Relative paths start in the working directory.
    let rel = f.ok(json!({"command": "view", "path": "example.py"})).await;
    assert_eq!(rel, out);
    let empty = f.write("empty.txt", "");
    assert!(
        f.ok(json!({"command": "view", "path": empty}))
            .await
            .contains("[the file is empty]")
    );
}

#[tokio::test]
async fn view_range_shows_the_lines_asked_for() {
    let f = Fixture::new();
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    let p = f.write("t.txt", &text);
    let out = f
        .ok(json!({"command": "view", "path": p, "view_range": [3, 4]}))
        .await;
    assert!(
        out.ends_with(":\n     3\tline 3\n     4\tline 4\n"),
        "{out}"
    );
    let out = f
        .ok(json!({"command": "view", "path": p, "view_range": [9, -1]}))
        .await;
    assert!(
        out.ends_with(":\n     9\tline 9\n    10\tline 10\n"),
        "{out}"
    );
    // Past the end: up to the end, and said so.
    let out = f
        .ok(json!({"command": "view", "path": p, "view_range": [9, 99]}))
        .await;
    assert!(
        out.contains("    10\tline 10\n[the file has 10 lines"),
        "{out}"
    );
    for bad in [
        json!([0, 2]),
        json!([11, -1]),
        json!([5, 3]),
        json!([-3, -1]),
    ] {
        let e = f
            .err(json!({"command": "view", "path": p, "view_range": bad}))
            .await;
        assert!(e.starts_with("Invalid `view_range`"), "{bad}: {e}");
    }
    let e = f
        .err(json!({"command": "view", "path": p, "view_range": [1, 2, 3]}))
        .await;
    assert!(e.contains("two integers"), "{e}");
}

#[tokio::test]
async fn a_long_view_is_clipped_to_max_characters_with_a_note() {
    let mut f = Fixture::new();
    f.tool = EditTool::new(f.tool.executor.clone()).with_max_view_chars(200);
    let text: String = (1..=100).map(|i| format!("line {i}\n")).collect();
    let p = f.write("long.txt", &text);
    let out = f.ok(json!({"command": "view", "path": p})).await;
    assert!(out.contains("     1\tline 1\n"));
    assert!(!out.contains("line 100"));
    assert!(
        out.contains("[clipped at 200 characters: lines 1-"),
        "{out}"
    );
    assert_eq!(f.tool.spec().native.expect("native")["max_characters"], 200);
}

#[tokio::test]
async fn view_of_a_directory_lists_two_levels_without_hidden_items() {
    let f = Fixture::new();
    let d = f.dir.path();
    std::fs::create_dir_all(d.join("src/deep/deeper")).expect("mkdir");
    std::fs::create_dir_all(d.join(".git")).expect("mkdir");
    std::fs::write(d.join("src/main.rs"), "fn main() {}\n").expect("write");
    std::fs::write(d.join(".git/config"), "").expect("write");
    std::fs::write(d.join(".env"), "").expect("write");
    let root = d.display().to_string();
    let out = f.ok(json!({"command": "view", "path": root})).await;
    assert!(out.starts_with(&format!(
        "Here's the files and directories up to 2 levels deep in {root}, excluding hidden items:\n"
    )));
    assert!(out.contains(&format!("{root}/src\n")), "{out}");
    assert!(out.contains(&format!("{root}/src/main.rs\n")), "{out}");
    assert!(out.contains(&format!("{root}/src/deep\n")), "{out}");
    assert!(!out.contains("deeper"), "three levels down: {out}");
    assert!(!out.contains(".git") && !out.contains(".env"), "{out}");
    let e = f
        .err(json!({"command": "view", "path": root, "view_range": [1, 2]}))
        .await;
    assert!(
        e.contains("not allowed when `path` points to a directory"),
        "{e}"
    );
}

#[tokio::test]
async fn create_makes_a_new_file_and_never_overwrites() {
    let f = Fixture::new();
    let p = f.path("pkg/new.py");
    let out = f
        .ok(json!({"command": "create", "path": p, "file_text": "x = 1\n"}))
        .await;
    assert_eq!(out, format!("File created successfully at: {p}"));
    assert_eq!(f.read("pkg/new.py"), "x = 1\n");
    let e = f
        .err(json!({"command": "create", "path": p, "file_text": "y"}))
        .await;
    assert!(
        e.contains("File already exists at:") && e.contains("Cannot overwrite"),
        "{e}"
    );
    assert_eq!(f.read("pkg/new.py"), "x = 1\n", "unchanged");
    let dir = f.dir.path().display().to_string();
    assert!(
        f.err(json!({"command": "create", "path": dir, "file_text": "y"}))
            .await
            .contains("already exists")
    );
}

#[tokio::test]
async fn str_replace_replaces_exactly_one_occurrence() {
    let f = Fixture::new();
    let p = f.write("a.py", "def f():\n    return 1\n\ndef g():\n    return 2\n");
    let out = f
        .ok(json!({"command": "str_replace", "path": p, "old_str": "return 1", "new_str": "return 10"}))
        .await;
    assert!(
        out.starts_with(&format!("The file {p} has been edited.")),
        "{out}"
    );
    assert!(out.contains("     2\t    return 10\n"), "{out}");
    assert_eq!(
        f.read("a.py"),
        "def f():\n    return 10\n\ndef g():\n    return 2\n"
    );
    // Without new_str: deleted.
    f.ok(json!({"command": "str_replace", "path": p, "old_str": "\ndef g():\n    return 2\n"}))
        .await;
    assert_eq!(f.read("a.py"), "def f():\n    return 10\n");
}

#[tokio::test]
async fn str_replace_refuses_a_missing_or_repeated_old_str() {
    let f = Fixture::new();
    let p = f.write("r.txt", "x = 1\nx = 1\ny = 2\n    z = 3\n");
    let e = f
        .err(json!({"command": "str_replace", "path": p, "old_str": "x = 1", "new_str": "x"}))
        .await;
    assert!(
        e.contains("occurs 2 times") && e.contains("lines [1, 2]"),
        "{e}"
    );
    let e = f
        .err(json!({"command": "str_replace", "path": p, "old_str": "w = 0", "new_str": "x"}))
        .await;
    assert!(e.contains("did not appear verbatim"), "{e}");
    // A near miss in the whitespace is pointed out.
    let e = f
        .err(json!({"command": "str_replace", "path": p, "old_str": "z = 3  ", "new_str": "x"}))
        .await;
    assert!(
        e.contains("without its leading and trailing whitespace"),
        "{e}"
    );
    assert_eq!(
        f.read("r.txt"),
        "x = 1\nx = 1\ny = 2\n    z = 3\n",
        "unchanged"
    );
}

#[tokio::test]
async fn insert_adds_lines_after_the_line_given() {
    let f = Fixture::new();
    let p = f.write("i.txt", "one\ntwo\nthree\n");
    let out = f
        .ok(json!({"command": "insert", "path": p, "insert_line": 1, "insert_text": "1.5\n"}))
        .await;
    assert!(out.contains("     2\t1.5\n"), "{out}");
    assert_eq!(f.read("i.txt"), "one\n1.5\ntwo\nthree\n");
    f.ok(json!({"command": "insert", "path": p, "insert_line": 0, "insert_text": "zero"}))
        .await;
    f.ok(json!({"command": "insert", "path": p, "insert_line": 5, "new_str": "four"}))
        .await;
    assert_eq!(f.read("i.txt"), "zero\none\n1.5\ntwo\nthree\nfour\n");
    let e = f
        .err(json!({"command": "insert", "path": p, "insert_line": 7, "insert_text": "x"}))
        .await;
    assert!(
        e.contains("Invalid `insert_line` parameter: 7") && e.contains("[0, 6]"),
        "{e}"
    );
}

#[tokio::test]
async fn a_missing_path_is_named() {
    let f = Fixture::new();
    let p = f.path("nope.txt");
    for input in [
        json!({"command": "view", "path": p}),
        json!({"command": "str_replace", "path": p, "old_str": "a"}),
        json!({"command": "insert", "path": p, "insert_line": 0, "insert_text": "a"}),
    ] {
        let e = f.err(input).await;
        assert_eq!(
            e,
            format!("The path {p} does not exist. Please provide a valid path.")
        );
    }
}

#[tokio::test]
async fn binary_files_are_refused() {
    let f = Fixture::new();
    let nul = f.write("a.bin", b"ab\0cd");
    let e = f.err(json!({"command": "view", "path": nul})).await;
    assert!(
        e.contains("binary") && e.contains("NUL byte at offset 2"),
        "{e}"
    );
    let latin1 = f.write("b.txt", b"caf\xe9\n");
    let e = f
        .err(json!({"command": "str_replace", "path": latin1, "old_str": "caf"}))
        .await;
    assert!(e.contains("not UTF-8") && e.contains("offset 3"), "{e}");
    assert_eq!(
        std::fs::read(f.dir.path().join("b.txt")).expect("read"),
        b"caf\xe9\n"
    );
}

#[tokio::test]
async fn files_over_the_limit_are_refused_never_cut() {
    let f = Fixture::new();
    let big = "a".repeat(usize::try_from(MAX_FILE_BYTES).expect("fits") + 1);
    let p = f.write("big.txt", &big);
    let e = f.err(json!({"command": "view", "path": p})).await;
    assert!(e.contains("more than the 1048576 bytes"), "{e}");
    let e = f
        .err(json!({"command": "create", "path": f.path("new.txt"), "file_text": big}))
        .await;
    assert!(
        e.contains("more than the 1048576 bytes") && e.contains("nothing was changed"),
        "{e}"
    );
    assert!(!f.dir.path().join("new.txt").exists());
    // An edit that would grow a file past the limit leaves it as it was.
    let near = "b".repeat(usize::try_from(MAX_FILE_BYTES).expect("fits") - 2);
    let r = f.write("one.txt", format!("X{near}"));
    let e = f
        .err(json!({"command": "str_replace", "path": r, "old_str": "X", "new_str": "YYYY"}))
        .await;
    assert!(e.contains("the file would be 1048578 bytes"), "{e}");
    assert!(
        std::fs::read_to_string(f.dir.path().join("one.txt"))
            .expect("read")
            .starts_with('X')
    );
}

#[tokio::test]
async fn links_are_followed_and_the_mode_kept() {
    let f = Fixture::new();
    let p = f.write("run.sh", "#!/bin/sh\necho old\n");
    std::os::unix::fs::symlink(f.dir.path().join("run.sh"), f.dir.path().join("link.sh"))
        .expect("ln");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    f.ok(json!({"command": "str_replace", "path": f.path("link.sh"), "old_str": "old", "new_str": "new"}))
        .await;
    assert_eq!(f.read("run.sh"), "#!/bin/sh\necho new\n");
    let link = std::fs::symlink_metadata(f.dir.path().join("link.sh")).expect("stat");
    assert!(link.file_type().is_symlink(), "the link stays a link");
    let mode = std::fs::metadata(&p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o755);
    std::os::unix::fs::symlink(f.dir.path().join("gone"), f.dir.path().join("dangling"))
        .expect("ln");
    let e = f
        .err(json!({"command": "view", "path": f.path("dangling")}))
        .await;
    assert!(e.contains("broken link"), "{e}");
}

#[tokio::test]
async fn paths_are_quoted_for_the_shell() {
    let f = Fixture::new();
    let name = "it's $(touch pwned) `x`.txt";
    let p = f.write(name, "ok\n");
    let out = f.ok(json!({"command": "view", "path": p})).await;
    assert!(out.contains("     1\tok\n"), "{out}");
    assert!(!Path::new(&f.path("pwned")).exists());
}

#[tokio::test]
async fn outside_the_local_workdir_is_an_error_the_model_reads() {
    let f = Fixture::new();
    let other = tempfile::tempdir().expect("tempdir");
    let p = other.path().join("x.txt");
    std::fs::write(&p, "x\n").expect("write");
    let e = f
        .err(json!({"command": "view", "path": p.display().to_string()}))
        .await;
    assert!(e.contains("outside its working directory"), "{e}");
}

#[test]
fn the_spec_is_the_native_tool_and_a_full_function_schema() {
    let f = Fixture::new();
    let spec = f.tool.spec();
    assert_eq!(spec.name, EDIT_TOOL_NAME);
    let native = spec.native.expect("native");
    assert_eq!(native["type"], "text_editor_20250728");
    assert_eq!(native["name"], "str_replace_based_edit_tool");
    assert_eq!(native["max_characters"], DEFAULT_MAX_VIEW_CHARACTERS);
    assert_eq!(spec.input_schema["required"], json!(["command", "path"]));
    assert_eq!(
        spec.input_schema["properties"]["command"]["enum"],
        json!(["view", "create", "str_replace", "insert"])
    );
    for field in [
        "file_text",
        "old_str",
        "new_str",
        "insert_line",
        "insert_text",
        "view_range",
    ] {
        assert!(
            spec.input_schema["properties"].get(field).is_some(),
            "{field}"
        );
    }
}

#[test]
fn the_probe_answer_is_parsed_strictly() {
    let p = |s: &str| probe::parse(s, "/given");
    assert_eq!(p("runner-edit-probe missing\n"), Some(Probe::Missing));
    assert_eq!(
        p("runner-edit-probe file 12 755 rw\n/real/x\nrunner-edit-probe-end\n"),
        Some(Probe::File {
            size: Some(12),
            mode: Some("755".into()),
            readable: true,
            writable: true,
            real: "/real/x".into()
        })
    );
    assert_eq!(
        p("runner-edit-probe file - - r-\n\nrunner-edit-probe-end\n"),
        Some(Probe::File {
            size: None,
            mode: None,
            readable: true,
            writable: false,
            real: "/given".into()
        })
    );
    assert_eq!(
        p("runner-edit-probe dir 4096 755 rw\n/d\nrunner-edit-probe-end\n"),
        Some(Probe::Dir)
    );
    assert_eq!(p("garbage"), None);
    assert_eq!(
        p("runner-edit-probe weird 1 2 rw\n/x\nrunner-edit-probe-end\n"),
        None
    );
    assert_eq!(
        p("runner-edit-probe file 1 644 rw\n/x"),
        None,
        "no end mark"
    );
}

/// A sandbox that died: every call fails for good.
struct Dead;

fn died() -> ExecError {
    ExecError::SandboxDied {
        detail: "container exited".into(),
    }
}

static DEAD: std::sync::LazyLock<SandboxInfo> = std::sync::LazyLock::new(|| SandboxInfo {
    kind: "dead",
    workdir: "/workspace".into(),
    ..SandboxInfo::default()
});

#[async_trait]
impl Executor for Dead {
    fn info(&self) -> &SandboxInfo {
        &DEAD
    }
    fn extras(&self) -> Extras<'_> {
        Extras::default()
    }
    async fn execute(&self, _req: ExecRequest) -> Result<ExecOutput, ExecError> {
        Err(died())
    }
    async fn upload(&self, _h: &Path, _d: &str, _o: Owner) -> Result<(), ExecError> {
        Err(died())
    }
    async fn read_file(&self, _p: &str, _m: u64) -> Result<Vec<u8>, ExecError> {
        Err(died())
    }
    async fn write_file(&self, _p: &str, _d: &[u8]) -> Result<(), ExecError> {
        Err(died())
    }
    async fn download_dir(&self, _s: &str, _h: &Path, _m: u64) -> Result<(), ExecError> {
        Err(died())
    }
    async fn close(&self, _w: Work) -> Result<(), ExecError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_dead_sandbox_ends_the_run() {
    let tool = EditTool::new(Arc::new(Dead));
    for input in [
        json!({"command": "view", "path": "/workspace/a"}),
        json!({"command": "create", "path": "a", "file_text": "x"}),
    ] {
        let out = tool.call(&input, &ctx()).await;
        assert!(out.is_error);
        assert!(
            matches!(out.fatal, Some(ExecError::SandboxDied { .. })),
            "{input}: {}",
            out.content
        );
        assert!(out.content.contains("the sandbox died"), "{}", out.content);
    }
    // Bad input never reaches the sandbox, so it is not fatal.
    let out = tool.call(&json!({"command": "view"}), &ctx()).await;
    assert!(out.is_error && out.fatal.is_none());
}
