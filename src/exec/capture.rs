//! Output capture: bounded memory whatever a command prints.
// Filled in by the local executor work.
