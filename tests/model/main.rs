//! The model clients against fake Anthropic and OpenAI servers on loopback:
//! the recorded API exchanges of `tests/fixtures/llm-vectors` replayed through
//! the real clients, and client behaviour beyond them (timeouts, retries,
//! key errors, chunking). Needs no Docker.

// A test that unwraps fails loudly, which is what a test should do; the
// crate denies both outside tests ([lints] in Cargo.toml).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod clients;
mod local_servers;
mod recorded;
mod recorded_local;
mod vectors;
