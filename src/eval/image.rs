//! The image a task runs in: `[environment].docker_image`, or
//! `environment/` built by the backend (cached by its content).

use std::path::Path;
use std::time::Duration;

use super::task::Task;
use crate::exec::ExecError;
use crate::exec::backend::{Backend, ImageSource};

/// Resolves (building if needed) the image of `task`; a build's output
/// goes to `log`.
pub async fn resolve(
    task: &Task,
    backend: &dyn Backend,
    log: Option<&Path>,
) -> Result<String, ExecError> {
    if let Some(img) = &task.config.environment.docker_image {
        return backend.prepare_image(ImageSource::Named(img)).await;
    }
    let context = task.environment_dir();
    if !context.join("Dockerfile").is_file() {
        return Err(ExecError::ImageUnavailable {
            image: task.dir.display().to_string(),
            detail: "no [environment].docker_image and no environment/Dockerfile".into(),
            hint: "give the task's task.toml an [environment] docker_image, or add \
                   environment/Dockerfile"
                .into(),
        });
    }
    backend
        .prepare_image(ImageSource::Build {
            context: &context,
            timeout: Duration::from_secs_f64(task.build_timeout_secs),
            label: &task.name,
            log,
        })
        .await
}
