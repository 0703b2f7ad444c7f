//! The local executor: a child process on the host, in its own process group.
