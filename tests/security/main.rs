//! Security tests: each module reproduces one attack or checks one claim of
//! the sandbox against the real Docker engine (they FAIL without it).

#[path = "../util/mod.rs"]
mod util;

mod runtime;
