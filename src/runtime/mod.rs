//! What `runner`, `runner continue` and `runner eval` share between the
//! validated [`Config`](crate::config::Config) and a finished run: the
//! model and the sandbox backend built from it (one table each), the
//! run's one redactor, a session that runs tasks on a started sandbox,
//! one run's whole life ([`Run`]: open, start and record its typed
//! [`RunHeader`], drive, finish; an eval attempt's until its grading)
//! with its one error, the REPL's task
//! source, and the shutdown token Ctrl-C and SIGTERM cancel. Nothing here
//! prints but warnings, the REPL's prompt and a run's last lines; the
//! front ends (`app`, `continuation`, `eval`) choose the task source.

pub mod backends;
pub mod error;
pub mod models;
pub mod redaction;
pub mod repl;
pub mod run;
pub mod sandbox;
pub mod session;
pub mod signals;

pub use backends::backend_for;
pub use error::RunError;
// The header lives below the events that carry it (`crate::run_header`);
// `runner continue` and `runner view` name it as `runtime::header`.
pub use crate::run_header as header;
pub use crate::run_header::{Enforced, EvalPart, RunHeader, StartedConfig};
pub use models::build_model;
pub use redaction::run_redactor;
pub use run::{AttemptSandbox, Beginning, Live, Open, Run, TaskSource, Watch, record_unstarted};
pub use sandbox::{backend, sandbox_spec};
pub use session::{Session, run_turn};
pub use signals::Shutdown;
