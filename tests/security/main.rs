//! Attacks on the sandbox against the real engine, one module per finding
//! of issue 8. The docker tests FAIL (never skip) without a running engine
//! and the sandbox images (`make sandbox-image`).

// Each #[tokio::test] has its own runtime; the serial lock is held across
// awaits on purpose so the docker tests never overlap.
#![allow(clippy::await_holding_lock)]

#[allow(dead_code)]
#[path = "../docker/common.rs"]
mod docker_common;
#[path = "../util/mod.rs"]
mod util;

mod gc;
mod kill;
mod oom;
mod sigkill;
