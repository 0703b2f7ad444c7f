//! Integration tests of the docker executor against the real engine.

// Each #[tokio::test] has its own runtime; the serial lock is held across
// awaits on purpose so tests never overlap (see common::serial).
#![allow(clippy::await_holding_lock)]

mod common;
mod confine;
mod lifecycle;
mod limits;
mod measure;
mod pull;
