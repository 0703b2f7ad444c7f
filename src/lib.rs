//! runner: runs LLM agents on untrusted tasks, safely.
//!
//! Data flows one way: cli -> config -> agent loop -> tools -> executor,
//! with the model beside the loop and events flowing out to renderers and
//! the trajectory.

pub mod agent;
pub mod app;
pub mod approve;
#[cfg(test)]
mod arbitrary_json;
pub mod backend_kind;
pub mod cli;
pub mod config;
pub mod continuation;
pub mod convert;
pub mod eval;
pub mod event;
pub mod exec;
pub mod gc;
pub mod hints;
pub mod hostfs;
pub mod invoker;
pub mod model;
pub mod output_path;
pub mod plural;
pub mod prompt;
pub mod redact;
pub mod render;
pub mod run_end;
pub mod run_header;
pub mod runtime;
pub mod terminal;
pub mod tools;
pub mod trajectory;
pub mod view;
pub mod workspace;
