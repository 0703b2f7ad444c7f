//! Helpers shared by integration tests.

pub mod fake_model;
pub mod vectors;
