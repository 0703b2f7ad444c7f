//! The one lock of a test binary for tests that must not overlap: on 2
//! shared cores a fork bomb or a 1 GB flood next to a timing-sensitive test
//! makes both flaky, leftover checks must see only their own run, and some
//! tests set process-wide environment variables (`DOCKER_HOST`).
//!
//! [`serial`] runs a test alone among the tests of its binary that take the
//! lock; [`shared`] lets tests run beside each other but never beside a
//! serial one (the binary's light tests next to its heavy ones). A test
//! takes at most one guard, at its start, and holds it to its end (across
//! awaits too: each `#[tokio::test]` has its own runtime).

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static LOCK: RwLock<()> = RwLock::new(());

/// Runs the caller alone; a test that panicked holding it does not poison
/// the others.
pub fn serial() -> RwLockWriteGuard<'static, ()> {
    LOCK.write().unwrap_or_else(|e| e.into_inner())
}

/// Runs the caller beside other `shared` tests, never beside a `serial` one.
pub fn shared() -> RwLockReadGuard<'static, ()> {
    LOCK.read().unwrap_or_else(|e| e.into_inner())
}
