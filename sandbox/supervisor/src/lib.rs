//! What runner and its in-sandbox supervisor share: the framed protocol.
//! The supervisor binary (`main.rs`) is the other half.

pub mod protocol;
