//! What `runner` and `runner eval` share between the validated
//! [`Config`](crate::config::Config) and a finished run: the model and the
//! sandbox backend built from it (one table each), the run's one redactor,
//! a session that runs tasks on a started sandbox, and the shutdown token
//! Ctrl-C and SIGTERM cancel. Nothing here prints but warnings; the front
//! ends (`app`, `eval`) own the task source and the reports.

pub mod models;
pub mod redaction;
pub mod sandbox;
pub mod session;
pub mod signals;

pub use models::build_model;
pub use redaction::run_redactor;
pub use sandbox::{backend, sandbox_spec};
pub use session::{Session, run_task};
pub use signals::Shutdown;
