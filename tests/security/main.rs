//! Attacks on runner's boundary, each against the real engine: what a
//! hostile task or model would try, and the guarantee that stops it. Each
//! module reproduces one finding of the security review (issue 8). The
//! docker tests FAIL (never skip) without a running engine and the sandbox
//! images (`make sandbox-image`).

// A test that unwraps fails loudly, which is what a test should do; the
// crate denies both outside tests ([lints] in Cargo.toml).
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Each #[tokio::test] has its own runtime; the serial lock is held across
// awaits on purpose so the docker tests never overlap.
#![allow(clippy::await_holding_lock)]

#[path = "../support/mod.rs"]
mod support;

mod command_timeout;
mod disk;
mod egress;
mod escape;
mod gc;
mod homes;
mod kill;
mod model_input;
mod neutral_paths;
mod oom;
mod redaction;
mod rundir;
mod runtime;
mod seccomp;
mod setuid;
mod sigkill;
mod supervisor;
mod temp_dirs;
mod terminal;
mod upperdir;
mod userns;
mod workspace;
