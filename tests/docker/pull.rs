//! The pull path, against a real registry on 127.0.0.1 (Debian package
//! `docker-registry`); loopback registries are insecure-allowed by default.

use std::time::Duration;

use bollard::query_parameters::{
    PushImageOptionsBuilder, RemoveImageOptionsBuilder, TagImageOptionsBuilder,
};
use futures::StreamExt;
use runner::exec::ExecError;
use runner::exec::docker::DockerExecutor;

use crate::support::docker::TINY;
use crate::support::executor::*;
use crate::support::serial::serial;

/// A registry serving from a temp dir on a loopback port.
struct Registry {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Registry {
    fn start() -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let conf = dir.path().join("config.yml");
        std::fs::write(
            &conf,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let child = std::process::Command::new("docker-registry")
            .arg("serve")
            .arg(&conf)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "the pull test needs `docker-registry` (apt-get install docker-registry): {e}"
                )
            });
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Registry {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn pulls_missing_image_from_loopback_registry() {
    let _s = serial();
    let d = docker().await;
    let reg = Registry::start();
    let repo = format!("127.0.0.1:{}/runner-sandbox", reg.port);
    let image = format!("{repo}:pulltest");
    let tag = TagImageOptionsBuilder::new()
        .repo(&repo)
        .tag("pulltest")
        .build();
    d.tag_image(TINY, Some(tag)).await.unwrap();
    let push = PushImageOptionsBuilder::new().tag("pulltest").build();
    let mut s = d.push_image(&repo, Some(push), None);
    while let Some(item) = s.next().await {
        let info = item.unwrap_or_else(|e| panic!("push to the loopback registry failed: {e}"));
        assert!(info.error_detail.is_none(), "push failed: {info:?}");
    }
    let rm = RemoveImageOptionsBuilder::new().build();
    d.remove_image(&image, Some(rm), None).await.unwrap();
    assert!(d.inspect_image(&image).await.is_err());

    let mut c = cfg("pull");
    c.image = image.clone();
    let id = c.run_id.clone();
    let ex = start(c).await;
    assert_eq!(run(&ex, "echo pulled", 10.0).await.output, "pulled\n");
    finish(&d, ex, &id).await;

    let mut c = cfg("pull-missing");
    c.image = format!("{repo}:no-such-tag");
    let err = DockerExecutor::start(c)
        .await
        .err()
        .expect("missing tag must fail");
    assert!(matches!(err, ExecError::ImageUnavailable { .. }), "{err}");
    assert!(
        err.to_string().contains("no-such-tag")
            && err
                .hint()
                .is_some_and(|h| h.contains("docker pull") && h.contains("no-such-tag")),
        "{err}"
    );

    let rm = RemoveImageOptionsBuilder::new().build();
    d.remove_image(&image, Some(rm), None).await.unwrap();
}
