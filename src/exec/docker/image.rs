//! Making sure the image is there: use the local one, else pull it with
//! progress on stderr; failure names the image, and its hint
//! ([`crate::exec::ExecError::hint`]) how to make it available.

use super::client::ENGINE;
use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};

use super::client::{CALL_TIMEOUT, call, status_of};
use crate::exec::ExecError;
use crate::terminal::visible;

/// Longest a pull may go without any progress message.
const PULL_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Uses the image if present locally, else pulls it.
pub async fn ensure_image(docker: &Docker, image: &str) -> Result<(), ExecError> {
    match tokio::time::timeout(CALL_TIMEOUT, docker.inspect_image(image)).await {
        Ok(Ok(_)) => return Ok(()),
        Ok(Err(e)) if status_of(&e) == Some(404) => {}
        Ok(Err(e)) => return Err(super::client::docker_err("inspect image", image, &e)),
        Err(_) => {
            return Err(ExecError::EngineTimeout {
                engine: ENGINE,
                op: "inspect image",
                secs: CALL_TIMEOUT.as_secs(),
            });
        }
    }
    pull(docker, image)
        .await
        .map_err(|detail| ExecError::ImageUnavailable {
            image: image.to_string(),
            detail: format!("it is not on this engine and pulling it failed: {detail}"),
            hint: image_hint(image),
        })?;
    // A pull that "succeeds" without producing the tag is still a failure.
    call(
        "inspect image",
        image,
        CALL_TIMEOUT,
        docker.inspect_image(image),
    )
    .await
    .map(|_| ())
    .map_err(|e| ExecError::ImageUnavailable {
        image: image.to_string(),
        detail: format!("the pull ended but the engine does not have it: {e}"),
        hint: image_hint(image),
    })
}

/// How to make `image` available to the engine: runner's own images are
/// built from its checkout; any other comes from a registry, a saved
/// archive or a Dockerfile (`make sandbox-image` builds none of those).
pub fn image_hint(image: &str) -> String {
    if image.starts_with("runner-sandbox:") {
        return format!(
            "build {image} with `make sandbox-image` in runner's checkout (from Debian packages; no registry needed)"
        );
    }
    format!(
        "make it available to this engine: `docker pull {image}` where a registry is reachable, \
         `docker load -i FILE.tar` for a saved image, or `docker build -t {image} DIR`"
    )
}

/// Splits `name[:tag][@digest]` into the name and the tag or digest
/// (default `latest`), minding registry ports such as `host:5000/x`.
pub fn split_reference(image: &str) -> (String, String) {
    if let Some((name, digest)) = image.split_once('@') {
        return (name.to_string(), digest.to_string());
    }
    let slash = image.rfind('/').map(|i| i + 1).unwrap_or(0);
    match image[slash..].rfind(':') {
        Some(i) => (
            image[..slash + i].to_string(),
            image[slash + i + 1..].to_string(),
        ),
        None => (image.to_string(), "latest".to_string()),
    }
}

/// Pulls `image`, showing progress: a bar on a terminal, plain lines
/// otherwise. Returns the failure as text.
async fn pull(docker: &Docker, image: &str) -> Result<(), String> {
    let (name, tag) = split_reference(image);
    let opts = CreateImageOptionsBuilder::new()
        .from_image(&name)
        .tag(&tag)
        .build();
    let mut stream = docker.create_image(Some(opts), None, None);
    let tty = std::io::stderr().is_terminal();
    let bar = if tty {
        let b = ProgressBar::new(0);
        let style = ProgressStyle::with_template("pulling {msg} [{bar:30}] {bytes}/{total_bytes}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        b.set_style(style);
        b.set_message(visible(image).into_owned());
        Some(b)
    } else {
        eprintln!("pulling {}...", visible(image));
        None
    };
    // Per-layer progress, summed for the bar.
    let mut layers: HashMap<String, (u64, u64)> = HashMap::new();
    let mut last_status = String::new();
    let result = loop {
        let info = match tokio::time::timeout(PULL_IDLE_TIMEOUT, stream.next()).await {
            Err(_) => break Err(format!("no progress for {}s", PULL_IDLE_TIMEOUT.as_secs())),
            Ok(None) => break Ok(()),
            Ok(Some(Err(e))) => break Err(e.to_string()),
            Ok(Some(Ok(info))) => info,
        };
        if let Some(err) = info.error_detail.and_then(|d| d.message) {
            break Err(err);
        }
        let status = info.status.unwrap_or_default();
        if let (Some(id), Some(p)) = (info.id.clone(), info.progress_detail) {
            let cur = u64::try_from(p.current.unwrap_or(0)).unwrap_or(0);
            let tot = u64::try_from(p.total.unwrap_or(0)).unwrap_or(0);
            if tot > 0 {
                layers.insert(id, (cur, tot));
            }
        }
        if let Some(b) = &bar {
            b.set_length(layers.values().map(|l| l.1).sum());
            b.set_position(layers.values().map(|l| l.0).sum());
        } else if status != last_status {
            // Lines only when the status changes, not per progress tick.
            // The registry's words and the task's image name, made visible.
            let line = match &info.id {
                Some(id) => format!("pulling {image}: {id}: {status}"),
                None => format!("pulling {image}: {status}"),
            };
            eprintln!("{}", visible(&line));
            last_status = status;
        }
    };
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    result
}

#[cfg(test)]
mod tests {
    #[test]
    fn splits_references() {
        use super::split_reference as s;
        assert_eq!(s("a"), ("a".into(), "latest".into()));
        assert_eq!(s("a:b"), ("a".into(), "b".into()));
        assert_eq!(
            s("127.0.0.1:5000/x/y"),
            ("127.0.0.1:5000/x/y".into(), "latest".into())
        );
        assert_eq!(
            s("127.0.0.1:5000/y:t"),
            ("127.0.0.1:5000/y".into(), "t".into())
        );
        assert_eq!(s("y@sha256:ab"), ("y".into(), "sha256:ab".into()));
    }
}

#[cfg(test)]
mod hint_tests {
    use super::*;

    #[test]
    fn a_missing_image_is_told_how_it_can_be_had() {
        let own = ExecError::ImageUnavailable {
            image: "runner-sandbox:bookworm".into(),
            detail: "gone".into(),
            hint: image_hint("runner-sandbox:bookworm"),
        };
        let own = own.hint().unwrap_or_default();
        assert!(own.contains("make sandbox-image"), "{own}");
        let theirs = ExecError::ImageUnavailable {
            image: "ubuntu".into(),
            detail: "gone".into(),
            hint: image_hint("ubuntu"),
        };
        let theirs = theirs.hint().unwrap_or_default();
        assert!(
            theirs.contains("`docker pull ubuntu`")
                && theirs.contains("docker load -i")
                && theirs.contains("docker build -t ubuntu"),
            "{theirs}"
        );
        assert!(!theirs.contains("sandbox-image"), "{theirs}");
    }
}
