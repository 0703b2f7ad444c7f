//! The viewer in a real browser: `runner eval --html` and `runner view`
//! pages loaded by headless Chromium (Debian's `chromium` package), their
//! DOM checked after the page's script ran: the counts, a failure's
//! reason, a hostile trajectory's strings shown as text with no element
//! injected. Screenshots are kept under target/view-artifacts/.
//!
//! These tests need Chromium, and the eval ones Docker and the sandbox
//! images; without them they FAIL with a message saying what to install.

// A test that unwraps fails loudly, which is what a test should do; the
// crate denies both outside tests ([lints] in Cargo.toml).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod browser;
mod pages;
