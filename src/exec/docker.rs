//! The docker executor: one hardened container per run, through bollard.
