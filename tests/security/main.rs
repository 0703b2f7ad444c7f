//! Attacks on runner's boundary, each against the real engine: what a
//! hostile task or model would try, and the guarantee that stops it. Each
//! module reproduces one finding of the security review (issue 8).

#[path = "../util/mod.rs"]
mod util;

#[path = "../common/mod.rs"]
mod common;

#[path = "../eval/common.rs"]
mod eval_common;

mod command_timeout;
mod disk;
mod model_input;
mod redaction;
mod rundir;
mod runtime;
mod terminal;
mod workspace;
