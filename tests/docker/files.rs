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

/// A hostile sandbox (root, writable root: it can replace `tar`) answers a
/// download with a crafted archive: an entry climbing out with `..`, and a
/// link to a host directory followed by an entry through it. Nothing lands
/// outside the host directory the download was given.
#[tokio::test]
async fn a_crafted_download_archive_writes_nothing_outside_its_directory() {
    use crate::support::docker::{BOOKWORM, require_images};
    let _s = serial();
    let d = docker().await;
    require_images(&[BOOKWORM]);
    let ws = tempfile::tempdir().unwrap();
    let mut c = cfg("evil-tar");
    c.image = BOOKWORM.into();
    c.user = "0:0".into();
    c.writable_rootfs = true;
    c.workspace = Some(ws.path().to_path_buf());
    let id = c.run_id.clone();
    let ex = start(c).await;
    // The host directory under attack: the download's parent.
    let parent = tempfile::tempdir().unwrap();
    let host = parent.path().join("dest");
    std::fs::create_dir(&host).unwrap();
    let craft = format!(
        r#"python3 - <<'PY'
import io, tarfile
t = tarfile.open('/tmp/evil.tar', 'w')
def add(name, data=b'x', kind=tarfile.REGTYPE, link=''):
    i = tarfile.TarInfo(name); i.type = kind; i.linkname = link
    if kind == tarfile.REGTYPE:
        i.size = len(data); t.addfile(i, io.BytesIO(data))
    else:
        t.addfile(i)
add('out/ok.txt', b'ok')
add('out/../../escaped.txt')
add('out/lnk', kind=tarfile.SYMTYPE, link='{parent}')
add('out/lnk/through.txt')
t.close()
PY
mkdir -p /tmp/out && printf '#!/bin/sh\ncat /tmp/evil.tar\n' > "$(command -v tar)" && echo planted"#,
        parent = parent.path().display()
    );
    let out = run(&ex, &craft, 30.0).await;
    assert!(out.output.contains("planted"), "{out:?}");
    let r = ex.download_dir("/tmp/out", &host, 1 << 20).await;
    eprintln!("download: {r:?}");
    for escaped in ["escaped.txt", "through.txt"] {
        assert!(
            !parent.path().join(escaped).exists(),
            "{escaped} was written outside the download directory"
        );
    }
    let above = parent.path().parent().unwrap().join("escaped.txt");
    assert!(!above.exists(), "escaped two levels up: {above:?}");
    // What is ordinary still arrives; the link stays a link.
    if r.is_ok() {
        assert_eq!(std::fs::read_to_string(host.join("ok.txt")).unwrap(), "ok");
        assert!(
            std::fs::symlink_metadata(host.join("lnk"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
    finish(&d, ex, &id).await;
}
