//! Security tests of issue 8 (sandbox security, round 2), one module per
//! finding, each reproducing the attack against the real engine. They need
//! Docker and the runner-sandbox images; without them they FAIL.

#[path = "../util/mod.rs"]
mod util;

#[path = "../common/mod.rs"]
mod common;

#[path = "../eval/common.rs"]
mod eval_common;

mod redaction;
