//! What runner and its in-sandbox supervisor share: the framed protocol
//! and the process-list lines. The supervisor binary (`main.rs`) is the
//! other half.

pub mod proclist;
pub mod protocol;
