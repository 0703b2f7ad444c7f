//! Headless Chromium: the DOM of a page after its scripts ran, and a
//! screenshot. Run as root it needs --no-sandbox (Chromium's own
//! sandbox); it only ever loads the test's own file:// pages.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Chromium on PATH (`chromium`, Debian's package), or a failure saying
/// how to get it: the viewer's test never skips.
pub fn chromium() -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("chromium"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "error: chromium is not installed: the viewer's browser test loads the page in it\n\
             hint: apt-get install -y chromium (Debian's package; .ci/run installs it)"
        )
    })
}

/// Runs Chromium headless on `page` with `args`, its profile in a
/// directory of its own, killed after 90 s.
fn headless(page: &Path, args: &[&str]) -> std::process::Output {
    let profile = tempfile::tempdir().expect("profile dir");
    let url = format!("file://{}", page.display());
    let out = Command::new("timeout")
        .arg("90")
        .arg(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(&url)
        .stdin(Stdio::null())
        .output()
        .expect("start chromium");
    assert!(
        out.status.success(),
        "chromium {args:?} {url} failed: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The page's DOM as Chromium serializes it once loaded (scripts run).
pub fn dom(page: &Path) -> String {
    let out = headless(page, &["--dump-dom"]);
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(dom.contains("<body"), "no DOM from chromium: {dom}");
    dom
}

/// Where screenshots are kept as test artefacts: target/view-artifacts/.
pub fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/view-artifacts");
    std::fs::create_dir_all(&dir).expect("artefact dir");
    dir
}

/// A 1280x900 screenshot of `page` (with `fragment`, e.g. `#a0`) to
/// `artifacts()/name`; checks that it is a PNG.
pub fn screenshot(page: &Path, fragment: &str, name: &str) -> PathBuf {
    let out = artifacts().join(name);
    let _ = std::fs::remove_file(&out);
    let target = PathBuf::from(format!("{}{fragment}", page.display()));
    headless(
        &target,
        &[
            &format!("--screenshot={}", out.display()),
            "--window-size=1280,900",
        ],
    );
    let png =
        std::fs::read(&out).unwrap_or_else(|e| panic!("no screenshot {}: {e}", out.display()));
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "not a real screenshot: {}",
        out.display()
    );
    out
}
