//! Integration tests of the docker executor against the real engine. They
//! FAIL (never skip) without a running engine and `runner-sandbox:tiny`.

// Each #[tokio::test] has its own runtime; the serial lock is held across
// awaits on purpose so tests never overlap (see support::serial).
#![allow(clippy::await_holding_lock)]

#[path = "../support/mod.rs"]
mod support;

mod confine;
mod lifecycle;
mod limits;
mod measure;
mod pull;
