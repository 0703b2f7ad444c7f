//! Security tests of issue 8, driven through the `runner` binary against
//! the real Docker engine: one module per finding. Tests that need Docker
//! FAIL (never skip) when the engine or the images are missing.

#[path = "../util/mod.rs"]
mod util;

#[path = "../eval/common.rs"]
mod eval_common;

mod command_timeout;
mod model_input;
mod terminal;
