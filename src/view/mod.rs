//! `runner view` and `runner eval --html`: one self-contained HTML page
//! for a run directory or an eval output directory.
//!
//! Everything shown is hostile (model text, command output, task names,
//! verifier logs), so the page is built only through [`html`]'s escaping
//! helpers, the data for its script is JSON that cannot close its
//! `<script>` block, and a Content-Security-Policy lets nothing load and
//! no script run but the page's own (by hash). Its CSS and JS are inline:
//! the page opens from a file with no network. Every input is read through
//! link-refusing handles with caps, and the page has a size budget; what a
//! cap cut is said on the page.

pub mod conversation;
pub mod html;
pub mod load;
pub mod page;
pub mod section;
pub mod suite;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::hints::Failure;
use crate::redact::Redactor;
use load::{LoadError, Results};

/// Most bytes of page content before the rest is left out (and said so).
pub const MAX_PAGE_BYTES: usize = 48 * 1024 * 1024;
/// The page's file name in DIR when no `--output` is given.
pub const DEFAULT_FILE: &str = "view.html";

/// Why no page was written.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("{0}")]
    Load(#[from] LoadError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl ViewError {
    /// What to do about it.
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            ViewError::Load(LoadError::NotResults { .. }) => {
                "give a run directory (runs/<id>, or --run-dir of a run) or an eval output directory (--output-dir of `runner eval`)".into()
            }
            ViewError::Load(LoadError::Open { .. }) => {
                "check the path: it must be a directory (not a link to one)".into()
            }
            ViewError::Load(LoadError::Manifest(e)) => e.hint().to_string(),
            ViewError::Write { .. } => "choose a writable --output FILE".into(),
        })
    }
}

impl From<ViewError> for Failure {
    fn from(e: ViewError) -> Failure {
        Failure::new(e.to_string(), e.hint())
    }
}

/// The page for the results in `dir`.
pub fn render(dir: &Path) -> Result<String, ViewError> {
    Ok(match load::load(dir)? {
        Results::Suite(s) => {
            let (title, subtitle, body, data) = suite::render(&s, MAX_PAGE_BYTES);
            page::page(&title, &subtitle, body, &data)
        }
        Results::Run(a) => run_page(&a),
    })
}

fn run_page(a: &load::AttemptData) -> String {
    let started = a
        .run
        .events
        .iter()
        .find(|e| e.get("type").and_then(Value::as_str) == Some("run_started"));
    let id = started
        .and_then(|e| e.get("run_id"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| {
            a.run
                .path
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        });
    let finished = a
        .run
        .events
        .iter()
        .rev()
        .find(|e| e.get("type").and_then(Value::as_str) == Some("run_finished"));
    let subtitle = match finished {
        Some(f) => format!(
            "{}: {}",
            f.get("outcome").and_then(Value::as_str).unwrap_or("?"),
            a.run.path.display()
        ),
        None => format!(
            "no run_finished event (still running, or killed): {}",
            a.run.path.display()
        ),
    };
    let title = match &a.record {
        Some(r) => format!("{} #{}", r.task, r.attempt),
        None => format!("runner run {id}"),
    };
    let mut h = html::Html::new();
    section::render(&mut h, "run", &title, a, MAX_PAGE_BYTES);
    page::page(&title, &subtitle, h, &json!({"kind": "run"}))
}

/// Writes the page for `dir` to `output` (replacing it atomically; a link
/// at that name is refused, see [`crate::output_path`]), with `redactor`'s
/// secrets removed when given.
pub fn write(dir: &Path, output: &Path, redactor: Option<&Redactor>) -> Result<(), ViewError> {
    let page = render(dir)?;
    let page = match redactor {
        Some(r) => r.redact(&page).into_owned(),
        None => page,
    };
    let err = |source| ViewError::Write {
        path: output.to_path_buf(),
        source,
    };
    crate::output_path::write_replacing(output, page.as_bytes()).map_err(err)
}

/// `runner view DIR [--output FILE] [--open]`: writes the page, prints
/// its path on stdout and, with `open`, opens it with `xdg-open`.
pub fn run(dir: &Path, output: Option<&Path>, open: bool) -> Result<u8, Failure> {
    let output = output.map_or_else(|| dir.join(DEFAULT_FILE), Path::to_path_buf);
    crate::output_path::refuse_link("--output", Some(&output))
        .map_err(|e| Failure::new(e.to_string(), Some(e.hint())))?;
    write(dir, &output, None)?;
    let shown = std::path::absolute(&output).unwrap_or(output);
    println!("{}", shown.display());
    if open {
        open_page(&shown);
    }
    Ok(0)
}

/// Opens the page in the desktop's browser, or says how to.
fn open_page(page: &Path) {
    let url = format!("file://{}", page.display());
    let opener = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("xdg-open"))
            .find(|p| p.is_file())
    });
    let Some(opener) = opener else {
        eprintln!(
            "note: xdg-open is not installed; open {} in a browser",
            crate::terminal::visible(&url)
        );
        return;
    };
    let status = std::process::Command::new(opener)
        .arg(page)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status();
    if !status.is_ok_and(|s| s.success()) {
        eprintln!(
            "note: xdg-open could not open the page; open {} in a browser",
            crate::terminal::visible(&url)
        );
    }
}

#[cfg(test)]
mod tests;
