//! The files API of a docker sandbox: binary files in and out, bounded;
//! directories out without the host following anything the sandbox made.

use runner::exec::{ExecError, Executor};

use crate::support::executor::*;
use crate::support::serial::serial;

#[tokio::test]
async fn files_round_trip_bounded_and_binary() {
    let _s = serial();
    let d = docker().await;
    let ws = tempfile::tempdir().unwrap();
    let mut c = cfg("files");
    c.workspace = Some(ws.path().to_path_buf());
    let id = c.run_id.clone();
    let ex = start(c).await;
    let data: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    ex.write_file("/tmp/in/blob.bin", &data).await.unwrap();
    // The command sees the same bytes, owned by its user.
    let out = run(
        &ex,
        "wc -c < /tmp/in/blob.bin; stat -c %u /tmp/in/blob.bin",
        10.0,
    )
    .await;
    assert_eq!(
        out.output.split_whitespace().collect::<Vec<_>>(),
        ["70000", "1000"]
    );
    assert_eq!(
        ex.read_file("/tmp/in/blob.bin", 70_000).await.unwrap(),
        data
    );
    match ex.read_file("/tmp/in/blob.bin", 69_999).await {
        Err(ExecError::Refused(m)) => assert!(m.contains("larger than"), "{m}"),
        other => panic!("a file over the bound must be refused: {other:?}"),
    }
    // A link is refused, not followed (even inside the sandbox).
    run(&ex, "ln -s /etc/hostname /tmp/in/link", 10.0).await;
    match ex.read_file("/tmp/in/link", 1 << 20).await {
        Err(ExecError::Refused(m)) => assert!(m.contains("no such file"), "{m}"),
        other => panic!("a link is refused: {other:?}"),
    }
    match ex.read_file("/tmp/nope", 10).await {
        Err(ExecError::Refused(m)) => assert!(m.contains("no such file"), "{m}"),
        other => panic!("a missing file is refused: {other:?}"),
    }
    finish(&d, ex, &id).await;
}

#[tokio::test]
async fn a_downloaded_directory_keeps_links_as_links_and_is_bounded() {
    let _s = serial();
    let d = docker().await;
    let ws = tempfile::tempdir().unwrap();
    let mut c = cfg("download");
    c.workspace = Some(ws.path().to_path_buf());
    let id = c.run_id.clone();
    let ex = start(c).await;
    run(
        &ex,
        "mkdir -p /tmp/out/sub && echo hi > /tmp/out/sub/a.txt && ln -s /etc/shadow /tmp/out/leak \
         && ln -s ../../../../../../root /tmp/out/up && head -c 100000 /dev/zero > /tmp/out/zeros",
        10.0,
    )
    .await;
    let host = tempfile::tempdir().unwrap();
    ex.download_dir("/tmp/out", host.path(), 1 << 20)
        .await
        .unwrap();
    let p = host.path();
    assert_eq!(
        std::fs::read_to_string(p.join("sub/a.txt")).unwrap(),
        "hi\n"
    );
    for (link, to) in [("leak", "/etc/shadow"), ("up", "../../../../../../root")] {
        let m = std::fs::symlink_metadata(p.join(link)).unwrap();
        assert!(m.file_type().is_symlink(), "{link} stays a link");
        assert_eq!(std::fs::read_link(p.join(link)).unwrap().to_str(), Some(to));
    }
    let small = tempfile::tempdir().unwrap();
    match ex.download_dir("/tmp/out", small.path(), 50_000).await {
        Err(ExecError::Refused(m)) => assert!(m.contains("larger than"), "{m}"),
        other => panic!("a download over the bound must be refused: {other:?}"),
    }
    finish(&d, ex, &id).await;
}
