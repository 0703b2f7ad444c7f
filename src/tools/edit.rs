//! The edit tool: Anthropic's text editor, `str_replace_based_edit_tool`
//! with the `text_editor_20250728` commands (`view`, `create`,
//! `str_replace`, `insert`; no `undo_edit`). Offered to Anthropic models as
//! the native tool they are trained on, to every other model as a function
//! tool with the same schema.
//!
//! It works only through the [`Executor`] files API (`read_file`,
//! `write_file`) and a short inspecting command (`execute`), so it runs on
//! every backend. What it reads and writes is bounded
//! ([`MAX_FILE_BYTES`]): a bigger file is refused, never cut. It edits
//! UTF-8 text only: a file holding NUL bytes or invalid UTF-8 is refused.

mod input;
mod probe;
#[cfg(test)]
mod tests;
mod text;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolOutcome};
use crate::exec::ExecutorExt;
use crate::exec::{ExecError, ExecOutput, ExecRequest, Executor};
use crate::model::ToolSpec;
use input::{Command, description, input_schema, parse};
use probe::{Probe, quote};

/// The tool's name, fixed by Anthropic for `text_editor_20250728`.
pub const EDIT_TOOL_NAME: &str = "str_replace_based_edit_tool";
/// Anthropic's type of the tool.
pub const EDIT_TOOL_TYPE: &str = "text_editor_20250728";
/// The largest file the tool reads or writes: 1 MiB.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// Characters a `view` shows at most (the tool definition's
/// `max_characters`): about 4k tokens; longer views end with a note
/// naming the lines shown.
pub const DEFAULT_MAX_VIEW_CHARACTERS: usize = 16_000;
/// Entries of a directory listing shown at most.
const MAX_LISTING_ENTRIES: usize = 1_000;
/// Longest an inspecting command (stat, listing) may run.
const INSPECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Output kept of an inspecting command that is not a listing.
const INSPECT_OUTPUT_BYTES: usize = 16 * 1024;

/// Views, creates and edits text files through an [`Executor`].
pub struct EditTool {
    executor: Arc<dyn Executor>,
    max_view_chars: usize,
}

/// A failed call, as the model reads it (`fatal` when the sandbox is gone).
struct Failure(Box<ToolOutcome>);

impl From<String> for Failure {
    fn from(msg: String) -> Self {
        Failure(Box::new(ToolOutcome::error(msg)))
    }
}

impl From<&str> for Failure {
    fn from(msg: &str) -> Self {
        Failure(Box::new(ToolOutcome::error(msg)))
    }
}

type Res<T> = Result<T, Failure>;

impl EditTool {
    pub fn new(executor: Arc<dyn Executor>) -> Self {
        EditTool {
            executor,
            max_view_chars: DEFAULT_MAX_VIEW_CHARACTERS,
        }
    }

    /// A tool whose views show at most `chars` characters.
    pub fn with_max_view_chars(mut self, chars: usize) -> Self {
        self.max_view_chars = chars.max(1);
        self
    }

    /// `path` as an absolute path of the sandbox: a relative one is taken
    /// from the working directory.
    fn absolute(&self, path: &str) -> String {
        if path.starts_with('/') {
            return path.to_string();
        }
        let rel = path.strip_prefix("./").unwrap_or(path);
        let wd = self.executor.workdir();
        format!("{}/{rel}", wd.trim_end_matches('/'))
    }

    async fn run(&self, cmd: Command, ctx: &ToolContext) -> Res<String> {
        let shown = self.absolute(cmd.path());
        let probe = self.probe(&shown, ctx).await?;
        match cmd {
            Command::View { range, .. } => match probe {
                Probe::Dir if range.is_some() => Err(
                    "The `view_range` parameter is not allowed when `path` points to a directory."
                        .into(),
                ),
                Probe::Dir => self.list(&shown, ctx).await,
                _ => {
                    let (text, _) = self.read_text(&shown, probe).await?;
                    view(&text, &shown, range, self.max_view_chars)
                }
            },
            Command::Create { file_text, .. } => {
                if probe != Probe::Missing {
                    return Err(format!(
                        "File already exists at: {shown}. Cannot overwrite files using command \
                         `create`: change it with `str_replace` or `insert`."
                    )
                    .into());
                }
                self.write(&shown, file_text.as_bytes(), None, ctx).await?;
                Ok(format!("File created successfully at: {shown}"))
            }
            Command::StrReplace {
                old_str, new_str, ..
            } => {
                let (text, file) = self.read_text(&shown, probe).await?;
                file.check_writable(&shown)?;
                let found = text::occurrences(&text, &old_str);
                let [at] = found[..] else {
                    return Err(text::not_unique(&text, &old_str, &found, &shown).into());
                };
                let (new_text, msg) = text::replace_at(&text, at, old_str.len(), &new_str, &shown);
                self.write(&file.real, new_text.as_bytes(), file.mode.as_deref(), ctx)
                    .await?;
                Ok(msg)
            }
            Command::Insert {
                insert_line,
                text: insert,
                ..
            } => {
                let (text, file) = self.read_text(&shown, probe).await?;
                file.check_writable(&shown)?;
                let n = text::lines(&text).len();
                let after = usize::try_from(insert_line).ok().filter(|l| *l <= n).ok_or_else(|| {
                    format!(
                        "Invalid `insert_line` parameter: {insert_line}. It should be within the \
                         range of lines of the file: [0, {n}] (0 inserts at the start)."
                    )
                })?;
                let (new_text, msg) = text::insert_after(&text, after, &insert, &shown);
                self.write(&file.real, new_text.as_bytes(), file.mode.as_deref(), ctx)
                    .await?;
                Ok(msg)
            }
        }
    }

    /// Runs an inspecting command of ours (never the model's).
    async fn inspect(&self, script: String, max_output: usize, ctx: &ToolContext) -> Res<String> {
        let req = ExecRequest {
            command: script,
            timeout: INSPECT_TIMEOUT,
            max_output_bytes: max_output,
            full_output: None,
            cancel: ctx.cancel.clone(),
        };
        match self.executor.execute(req).await {
            Ok(ExecOutput {
                cancelled: true, ..
            }) => Err("[interrupted by the user; nothing was changed]".into()),
            Ok(ExecOutput {
                timed_out: true, ..
            }) => Err(format!(
                "error: the sandbox did not answer within {}s while inspecting the path; \
                 nothing was changed.",
                INSPECT_TIMEOUT.as_secs()
            )
            .into()),
            Ok(out) => Ok(out.output),
            Err(e) => Err(exec_failure(e)),
        }
    }

    /// What is at `path`: one short command, so that a missing file, a
    /// directory or a file too big gets a clear answer on every backend.
    async fn probe(&self, path: &str, ctx: &ToolContext) -> Res<Probe> {
        let script = probe::script(path);
        let out = self.inspect(script, INSPECT_OUTPUT_BYTES, ctx).await?;
        probe::parse(&out, path).ok_or_else(|| {
            format!(
                "error: could not inspect {path} in the sandbox (unexpected answer: {:?}).",
                text::preview(&out)
            )
            .into()
        })
    }

    /// Files and directories up to two levels below `dir`, hidden ones
    /// (and what is under them) left out.
    async fn list(&self, dir: &str, ctx: &ToolContext) -> Res<String> {
        let script = format!(
            "find -H {} -mindepth 1 -maxdepth 2 -name '.*' -prune -o -print 2>/dev/null \
             | LC_ALL=C sort | head -n {}",
            quote(dir),
            MAX_LISTING_ENTRIES + 1
        );
        let out = self.inspect(script, self.max_view_chars, ctx).await?;
        let mut entries: Vec<&str> = out.lines().collect();
        let mut listing = format!(
            "Here's the files and directories up to 2 levels deep in {dir}, excluding hidden items:\n"
        );
        if entries.len() > MAX_LISTING_ENTRIES {
            entries.truncate(MAX_LISTING_ENTRIES);
            listing.push_str(&entries.join("\n"));
            listing.push_str(&format!(
                "\n[only the first {MAX_LISTING_ENTRIES} entries are shown; view a subdirectory to see more]\n"
            ));
        } else if entries.is_empty() {
            listing.push_str("[no entries]\n");
        } else {
            listing.push_str(&entries.join("\n"));
            listing.push('\n');
        }
        Ok(listing)
    }

    /// The content of the file at `shown`, checked to be UTF-8 text of at
    /// most [`MAX_FILE_BYTES`].
    async fn read_text(&self, shown: &str, probe: Probe) -> Res<(String, FileInfo)> {
        let file = FileInfo::of(probe, shown)?;
        if !file.readable {
            return Err(format!("error: {shown} is not readable (permission denied).").into());
        }
        if let Some(size) = file.size
            && size > MAX_FILE_BYTES
        {
            return Err(too_big(shown, size).into());
        }
        let data = match self.executor.read_file(&file.real, MAX_FILE_BYTES).await {
            Ok(d) => d,
            Err(e) => return Err(self.files_failure(e, "read", shown).await),
        };
        let text = decode(data, shown)?;
        Ok((text, file))
    }

    /// Writes `data` at `path`, then gives it `mode` (octal, from the
    /// probe of the file it replaces) and the current time.
    async fn write(
        &self,
        path: &str,
        data: &[u8],
        mode: Option<&str>,
        ctx: &ToolContext,
    ) -> Res<()> {
        let len = u64::try_from(data.len()).unwrap_or(u64::MAX);
        if len > MAX_FILE_BYTES {
            return Err(format!(
                "error: the file would be {len} bytes, more than the {MAX_FILE_BYTES} bytes \
                 (1 MiB) this tool writes; nothing was changed. Write big files with bash."
            )
            .into());
        }
        if let Err(e) = self.executor.write_file(path, data).await {
            return Err(self.files_failure(e, "write", path).await);
        }
        // A file written through an archive (docker) gets the archive's
        // mode and a modification time of 0 (an executable script would stop
        // being one; `make` would not see the change): set both again.
        let chmod = mode
            .map(|m| format!("chmod {m} -- {q}; ", q = quote(path)))
            .unwrap_or_default();
        let script = format!("{chmod}touch -c -- {} 2>&1", quote(path));
        self.inspect(script, INSPECT_OUTPUT_BYTES, ctx).await?;
        Ok(())
    }

    /// A files-API error as the model reads it. The executor's kinds do
    /// not say whether the sandbox outlived a failed read or write (a
    /// permission error and a dead container can look alike), so a
    /// command decides: the run ends only when that fails too.
    async fn files_failure(&self, e: ExecError, what: &str, path: &str) -> Failure {
        let msg = format!("error: could not {what} {path}: {e}");
        if !e.is_fatal() {
            return msg.into();
        }
        let alive = ExecRequest {
            command: "true".into(),
            timeout: INSPECT_TIMEOUT,
            max_output_bytes: 1024,
            full_output: None,
            cancel: tokio_util::sync::CancellationToken::new(),
        };
        match self.executor.execute(alive).await {
            Err(dead) if dead.is_fatal() => Failure(Box::new(ToolOutcome {
                content: msg,
                is_error: true,
                exec: None,
                fatal: Some(dead),
            })),
            _ => msg.into(),
        }
    }
}

/// What the probe said of a regular file.
struct FileInfo {
    size: Option<u64>,
    mode: Option<String>,
    readable: bool,
    writable: bool,
    real: String,
}

impl FileInfo {
    fn of(probe: Probe, shown: &str) -> Res<FileInfo> {
        match probe {
            Probe::File {
                size,
                mode,
                readable,
                writable,
                real,
            } => Ok(FileInfo {
                size,
                mode,
                readable,
                writable,
                real,
            }),
            Probe::Missing => {
                Err(format!("The path {shown} does not exist. Please provide a valid path.").into())
            }
            Probe::Dir => Err(format!(
                "The path {shown} is a directory and only the `view` command can be used on directories."
            )
            .into()),
            Probe::Broken => {
                Err(format!("The path {shown} is a symbolic link to nothing (a broken link).").into())
            }
            Probe::Other => Err(format!(
                "The path {shown} is not a regular file (a FIFO, socket or device); this tool edits text files only."
            )
            .into()),
        }
    }

    fn check_writable(&self, shown: &str) -> Res<()> {
        if self.writable {
            Ok(())
        } else {
            Err(format!("error: {shown} is not writable (permission denied or a read-only filesystem); nothing was changed.").into())
        }
    }
}

/// The view of a text file, whole or `range` [first, last] (1-based,
/// last -1: to the end).
fn view(text: &str, shown: &str, range: Option<(i64, i64)>, max_chars: usize) -> Res<String> {
    let all = text::lines(text);
    let n = all.len();
    let header = format!("Here's the result of running `cat -n` on {shown}:\n");
    let Some((first, last)) = range else {
        if n == 0 {
            return Ok(format!("{header}[the file is empty]\n"));
        }
        return Ok(header + &text::view_body(&all, 1, n, max_chars));
    };
    let bad = |why: String| -> Failure {
        format!("Invalid `view_range`: [{first}, {last}]. {why}").into()
    };
    let first_ok = usize::try_from(first).ok().filter(|f| (1..=n).contains(f));
    let Some(first_line) = first_ok else {
        return Err(bad(format!(
            "Its first element `{first}` should be within the range of lines of the file: [1, {n}]."
        )));
    };
    let (last_line, note) = match last {
        -1 => (n, None),
        l if l < first => {
            return Err(bad(format!(
                "Its second element `{last}` should be larger than or equal to its first `{first}` (or -1 for the end of the file)."
            )));
        }
        l => match usize::try_from(l) {
            Ok(l) if l <= n => (l, None),
            _ => (
                n,
                Some(format!("[the file has {n} lines: shown up to its end]\n")),
            ),
        },
    };
    let mut out = header + &text::view_body(&all, first_line, last_line, max_chars);
    if let Some(note) = note {
        out.push_str(&note);
    }
    Ok(out)
}

/// `data` as text, or why it is refused.
fn decode(data: Vec<u8>, shown: &str) -> Res<String> {
    if let Some(at) = data.iter().position(|b| *b == 0) {
        return Err(format!(
            "error: {shown} looks like a binary file (it holds a NUL byte at offset {at}); this \
             tool views and edits UTF-8 text only. Inspect it with a command instead (`file`, `xxd`)."
        )
        .into());
    }
    String::from_utf8(data).map_err(|e| {
        format!(
            "error: {shown} is not UTF-8 text (invalid byte at offset {}); this tool views and \
             edits UTF-8 text only. Inspect it with a command instead (`file`, `iconv`).",
            e.utf8_error().valid_up_to()
        )
        .into()
    })
}

fn too_big(shown: &str, size: u64) -> String {
    format!(
        "error: {shown} is {size} bytes, more than the {MAX_FILE_BYTES} bytes (1 MiB) this tool \
         reads; it was not opened. Look at parts of it with a command (`head`, `sed -n`, `grep -n`)."
    )
}

/// The result of an executor call that failed: fatal when the sandbox is
/// gone, as for the bash tool.
fn exec_failure(e: ExecError) -> Failure {
    if e.is_fatal() {
        Failure(Box::new(ToolOutcome {
            content: format!("error: {e}"),
            is_error: true,
            exec: None,
            fatal: Some(e),
        }))
    } else {
        format!("error: {e}").into()
    }
}

#[async_trait]
impl Tool for EditTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            native: Some(json!({
                "type": EDIT_TOOL_TYPE,
                "name": EDIT_TOOL_NAME,
                "max_characters": self.max_view_chars,
            })),
            name: EDIT_TOOL_NAME.into(),
            description: description(&self.executor.workdir()),
            input_schema: input_schema(),
        }
    }

    async fn call(&self, input: &Value, ctx: &ToolContext) -> ToolOutcome {
        let cmd = match parse(input) {
            Ok(c) => c,
            Err(msg) => return ToolOutcome::error(msg),
        };
        match self.run(cmd, ctx).await {
            Ok(content) => ToolOutcome {
                content,
                is_error: false,
                exec: None,
                fatal: None,
            },
            Err(Failure(outcome)) => *outcome,
        }
    }
}
