//! The task-image cache: a base image rebuilt under the same tag means a
//! rebuilt task image; an unchanged one is served from the cache.

use std::time::Duration;

use bollard::query_parameters::{BuildImageOptionsBuilder, RemoveImageOptions};
use futures::StreamExt;
use runner::exec::backend::{Backend, ImageSource};
use runner::exec::docker::DockerBackend;

use crate::support::docker::TINY;
use crate::support::executor::docker;
use crate::support::serial::serial;

/// Builds `tag` FROM the tiny image with `/marker` holding `marker`;
/// returns its id.
async fn build_base(d: &bollard::Docker, tag: &str, marker: &str) -> String {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in [
        ("Dockerfile", format!("FROM {TINY}\nCOPY marker /marker\n")),
        ("marker", marker.to_string()),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, data.as_bytes()).unwrap();
    }
    let opts = BuildImageOptionsBuilder::new()
        .t(tag)
        .rm(true)
        .forcerm(true)
        .build();
    let mut s = d.build_image(
        opts,
        None,
        Some(bollard::body_full(b.into_inner().unwrap().into())),
    );
    while let Some(item) = s.next().await {
        let info = item.unwrap();
        assert!(info.error_detail.is_none(), "{info:?}");
    }
    d.inspect_image(tag).await.unwrap().id.unwrap()
}

async fn task_image(ctx: &std::path::Path) -> String {
    DockerBackend
        .prepare_image(ImageSource::Build {
            context: ctx,
            timeout: Duration::from_secs(120),
            label: "build-cache-test",
            log: None,
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn a_rebuilt_base_image_rebuilds_the_task_image() {
    let _s = serial();
    let d = docker().await;
    let base = format!("runner-test-base-{:08x}:latest", fastrand::u32(..));
    let base1 = build_base(&d, &base, "one").await;
    let ctx = tempfile::tempdir().unwrap();
    std::fs::write(
        ctx.path().join("Dockerfile"),
        format!("ARG BASE={base}\nFROM ${{BASE}} AS start\nFROM start\nCOPY task.txt /task.txt\n"),
    )
    .unwrap();
    std::fs::write(ctx.path().join("task.txt"), "task").unwrap();
    let t1 = task_image(ctx.path()).await;
    let id1 = d.inspect_image(&t1).await.unwrap().id.unwrap();
    assert_eq!(
        task_image(ctx.path()).await,
        t1,
        "unchanged: served from the cache"
    );
    let base2 = build_base(&d, &base, "two").await;
    assert_ne!(base1, base2);
    let t2 = task_image(ctx.path()).await;
    let id2 = d.inspect_image(&t2).await.unwrap().id.unwrap();
    let rm = |i: String| {
        let d = d.clone();
        async move {
            let _ = d.remove_image(&i, None::<RemoveImageOptions>, None).await;
        }
    };
    for i in [t1.clone(), t2.clone(), base.clone(), base1, base2] {
        rm(i).await;
    }
    assert_ne!(t1, t2, "a rebuilt base gets a new cache tag");
    assert_ne!(id1, id2, "and a rebuilt task image");
}
