//! runner's table of backends: the code each [`BackendKind`] starts.
//! The one place above `exec/` that names a backend's implementation.

use std::sync::Arc;

use crate::backend_kind::BackendKind;
use crate::exec::backend::Backend;
use crate::exec::docker::DockerBackend;
use crate::exec::local::LocalBackend;

/// The backend of `kind`.
pub fn backend_for(kind: BackendKind) -> Arc<dyn Backend> {
    match kind {
        BackendKind::Docker => Arc::new(DockerBackend),
        BackendKind::Local => Arc::new(LocalBackend),
    }
}
