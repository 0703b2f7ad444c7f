//! Integration tests of the docker executor against the real engine.

mod common;
mod confine;
mod lifecycle;
mod limits;
