//! An exact copy of the workspace (the isolated verifier's: an empty
//! volume, root's sandbox user) keeps the image's owner of WORKDIR when
//! asked to (`keep_workdir_owner`), and is root's otherwise, as before.

use runner::exec::docker::WorkspaceMode;

use crate::support::executor::*;
use crate::support::serial::serial;

#[tokio::test]
async fn an_exact_copy_keeps_the_images_owner_of_the_workdir() {
    let _s = serial();
    let d = docker().await;
    for (keep, writable) in [(true, true), (true, false), (false, true)] {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("a.txt"), "a").unwrap();
        std::fs::create_dir(ws.path().join("sub")).unwrap();
        std::fs::write(ws.path().join("sub/b"), "b").unwrap();
        let mut c = cfg("workdir-owner");
        c.workspace = Some(ws.path().to_path_buf());
        c.workspace_mode = WorkspaceMode::Copy;
        c.volume_no_copy = true;
        c.user = "0:0".into();
        c.writable_rootfs = writable;
        c.keep_workdir_owner = keep;
        let id = c.run_id.clone();
        let ex = start(c).await;
        let out = run(
            &ex,
            "cd /workspace && stat -c '%n %u:%g %a' . a.txt sub sub/b && cat sub/b",
            10.0,
        )
        .await;
        // The tiny image gives /workspace to 1000:1000, mode 755.
        let o = if keep { "1000:1000" } else { "0:0" };
        let top = if keep && writable { "1000:1000" } else { "0:0" };
        assert_eq!(
            out.output,
            format!(". {top} 755\na.txt {o} 644\nsub {o} 755\nsub/b {o} 644\nb"),
            "keep: {keep}, writable root: {writable}: {out:?}"
        );
        finish(&d, ex, &id).await;
    }
}
