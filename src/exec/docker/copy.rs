//! Copy mode: the workspace travels as a tar (for engines on other hosts).
//! Upload at start into the container's anonymous workspace volume;
//! download at shutdown and extract safely: only plain relative paths,
//! never through or onto a link, links recreated as links and never
//! followed, no devices or hard links.

use super::client::ENGINE;
use std::fs;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use bollard::Docker;
use bollard::query_parameters::{
    DownloadFromContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};
use futures::StreamExt;

use super::client::{CALL_TIMEOUT, call, docker_err, short};
use crate::exec::ExecError;

/// Largest workspace accepted back from the sandbox when no `--disk`
/// limit applies.
pub const MAX_COLLECT_BYTES: u64 = 8 << 30;

/// The owner and mode of a directory in an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirOwner {
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
}

/// Like [`upload_to`], but everything is owned by `owner` (the image's
/// owner of `dest`), and with `top` the directory `dest` itself gets that
/// owner and mode too: an upload into a directory leaves the directory's
/// own metadata alone, so it is sent as the top entry of an upload into
/// its parent (which needs a writable root filesystem).
pub async fn upload_owned(
    docker: &Docker,
    id: &str,
    host: &Path,
    dest: &str,
    owner: DirOwner,
    top: bool,
) -> Result<(), ExecError> {
    let dest_path = Path::new(dest);
    let split = dest_path.parent().zip(dest_path.file_name());
    let (into, prefix) = match split {
        Some((parent, name)) if top => (parent.to_string_lossy().into_owned(), PathBuf::from(name)),
        _ => (dest.to_string(), PathBuf::new()),
    };
    let mut b = tar::Builder::new(Vec::new());
    if !prefix.as_os_str().is_empty() {
        let mut h = tar::Header::new_gnu();
        h.set_uid(owner.uid.into());
        h.set_gid(owner.gid.into());
        h.set_mode(owner.mode & 0o7777);
        h.set_mtime(super::container::now_secs());
        h.set_entry_type(tar::EntryType::Directory);
        h.set_size(0);
        b.append_data(&mut h, &prefix, std::io::empty())?;
    }
    let mut left = MAX_UPLOAD_BYTES;
    add_dir_counted(
        &mut b,
        host,
        Path::new(""),
        &prefix,
        (owner.uid, owner.gid),
        &mut left,
    )?;
    let data = b.into_inner()?;
    send(docker, id, &into, data).await
}

/// Extracts the tar `data` into the directory `dest` of the container.
async fn send(docker: &Docker, id: &str, dest: &str, data: Vec<u8>) -> Result<(), ExecError> {
    let opts = UploadToContainerOptionsBuilder::new().path(dest).build();
    call(
        "upload files",
        short(id),
        CALL_TIMEOUT,
        docker.upload_to_container(id, Some(opts), bollard::body_full(data.into())),
    )
    .await
}

/// Most bytes of file data one upload may carry: uploads are built in
/// memory, and a workspace's files may be far larger than the space they
/// take (a sandbox's sparse files), so past this the upload is refused
/// before the memory is spent.
pub const MAX_UPLOAD_BYTES: u64 = 2 << 30;

/// Appends the tree `base/rel` to `b` (links as links, never followed),
/// refusing past [`MAX_UPLOAD_BYTES`] of file data.
pub(super) fn add_dir(
    b: &mut tar::Builder<Vec<u8>>,
    base: &Path,
    rel: &Path,
    uid: u32,
    gid: u32,
) -> Result<(), ExecError> {
    let mut left = MAX_UPLOAD_BYTES;
    add_dir_counted(b, base, rel, Path::new(""), (uid, gid), &mut left)
}

/// [`add_dir`] with `left` bytes of file data still allowed, every name in
/// the archive under `prefix`.
fn add_dir_counted(
    b: &mut tar::Builder<Vec<u8>>,
    base: &Path,
    rel: &Path,
    prefix: &Path,
    (uid, gid): (u32, u32),
    left: &mut u64,
) -> Result<(), ExecError> {
    for entry in fs::read_dir(base.join(rel))? {
        let entry = entry?;
        let rel_path = rel.join(entry.file_name());
        let full = base.join(&rel_path);
        let name = prefix.join(&rel_path);
        let meta = fs::symlink_metadata(&full)?;
        let mut h = tar::Header::new_gnu();
        h.set_uid(uid.into());
        h.set_gid(gid.into());
        // A time before 1970 is stored as 1970, as before.
        h.set_mtime(u64::try_from(meta.mtime()).unwrap_or(0));
        h.set_mode(meta.mode() & 0o777);
        let ft = meta.file_type();
        if ft.is_symlink() {
            let target = fs::read_link(&full)?;
            if escapes(&rel_path, &target) {
                // Docker refuses the whole archive for such a link; leaving
                // it out keeps the rest of the workspace.
                tracing::warn!(
                    "not uploading link {} -> {}: it leaves the workspace",
                    rel_path.display(),
                    target.display()
                );
                continue;
            }
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            b.append_link(&mut h, &name, target)?;
        } else if ft.is_dir() {
            h.set_entry_type(tar::EntryType::Directory);
            h.set_size(0);
            b.append_data(&mut h, &name, std::io::empty())?;
            add_dir_counted(b, base, &rel_path, prefix, (uid, gid), left)?;
        } else if ft.is_file() {
            if meta.len() > *left {
                return Err(ExecError::Refused(format!(
                    "{} holds more than {MAX_UPLOAD_BYTES} bytes of files to upload \
                     (sparse files count at their full size)",
                    base.display()
                )));
            }
            *left -= meta.len();
            h.set_entry_type(tar::EntryType::Regular);
            h.set_size(meta.len());
            b.append_data(&mut h, &name, fs::File::open(&full)?)?;
        }
    }
    Ok(())
}

/// Whether a relative link at `rel` (relative to the workspace) pointing
/// to `target` climbs out of the workspace.
fn escapes(rel: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return false;
    }
    let mut depth = i64::try_from(rel.components().count()).unwrap_or(i64::MAX) - 1;
    for c in target.components() {
        match c {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            _ => {}
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

/// Downloads the container's `workdir` and replaces the host directory's
/// content with it. Extraction goes to a staging directory first, so a
/// failed download leaves the host workspace as it was.
pub async fn download(
    docker: &Docker,
    id: &str,
    host: &Path,
    workdir: &str,
    limit_bytes: u64,
) -> Result<CollectReport, ExecError> {
    let opts = DownloadFromContainerOptionsBuilder::new()
        .path(workdir)
        .build();
    let mut stream = docker.download_from_container(id, Some(opts));
    let mut file = tempfile::tempfile()?;
    let mut total = 0u64;
    loop {
        let next = tokio::time::timeout(CALL_TIMEOUT, stream.next()).await;
        let chunk = match next {
            Err(_) => {
                return Err(ExecError::EngineTimeout {
                    engine: ENGINE,
                    op: "download workspace",
                    secs: CALL_TIMEOUT.as_secs(),
                });
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(docker_err("download workspace", short(id), &e)),
            Ok(Some(Ok(c))) => c,
        };
        total += chunk.len() as u64;
        if total > limit_bytes {
            return Err(ExecError::Refused(format!(
                "workspace of container {} is larger than {} bytes (--disk)",
                short(id),
                limit_bytes
            )));
        }
        file.write_all(&chunk)?;
    }
    file.rewind()?;
    let host = host.to_path_buf();
    // Docker names the entries after the directory's last component.
    let top = Path::new(workdir)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    tokio::task::spawn_blocking(move || replace_from_tar(file, &host, &top))
        .await
        .map_err(|e| ExecError::Spawn(format!("collect task failed: {e}")))?
}

/// What extraction left out.
#[derive(Debug, Default, PartialEq)]
pub struct CollectReport {
    /// Entries refused (escaping paths, devices, hard links...).
    pub skipped: Vec<String>,
}

fn replace_from_tar(
    tar_file: impl Read,
    host: &Path,
    top: &str,
) -> Result<CollectReport, ExecError> {
    let parent = host.parent().unwrap_or(Path::new("/"));
    let stage = tempfile::Builder::new()
        .prefix(".runner-collect-")
        .tempdir_in(parent)?;
    let report = extract_under(tar_file, stage.path(), top)?;
    for entry in fs::read_dir(host)? {
        let p = entry?.path();
        if fs::symlink_metadata(&p)?.is_dir() {
            // remove_dir_all does not follow links inside the tree.
            fs::remove_dir_all(&p)?;
        } else {
            fs::remove_file(&p)?;
        }
    }
    for entry in fs::read_dir(stage.path())? {
        let entry = entry?;
        fs::rename(entry.path(), host.join(entry.file_name()))?;
    }
    Ok(report)
}

/// Extracts a Docker archive of `/workspace` (entries `workspace/...`)
/// into the empty directory `dest`.
#[cfg(test)]
pub fn extract(tar_file: impl Read, dest: &Path) -> Result<CollectReport, ExecError> {
    extract_under(tar_file, dest, "workspace")
}

/// Extracts a Docker archive of a directory whose entries start with `top`
/// into the empty directory `dest`.
pub fn extract_under(
    tar_file: impl Read,
    dest: &Path,
    top: &str,
) -> Result<CollectReport, ExecError> {
    let mut report = CollectReport::default();
    let mut archive = tar::Archive::new(tar_file);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let raw = entry.path()?.into_owned();
        let Some(rel) = relative_inside(&raw, top) else {
            report.skipped.push(raw.display().to_string());
            continue;
        };
        if rel.as_os_str().is_empty() {
            continue; // the workspace directory itself
        }
        let Some(target) = prepare_parents(dest, &rel)? else {
            report.skipped.push(raw.display().to_string());
            continue;
        };
        let mode = entry.header().mode().unwrap_or(0o644) & 0o777;
        let kind = entry.header().entry_type();
        // Whatever is there already (only possible with duplicate entries)
        // is replaced, never written through.
        if let Ok(m) = fs::symlink_metadata(&target) {
            if m.is_dir() && kind.is_dir() {
                continue;
            }
            if m.is_dir() {
                fs::remove_dir_all(&target)?;
            } else {
                fs::remove_file(&target)?;
            }
        }
        match kind {
            k if k.is_dir() => {
                fs::create_dir(&target)?;
                fs::set_permissions(&target, fs::Permissions::from_mode(mode | 0o700))?;
            }
            k if k.is_file() => {
                let mut f = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
                    .mode(mode)
                    .open(&target)?;
                std::io::copy(&mut entry, &mut f)?;
            }
            k if k.is_symlink() => match entry.link_name()? {
                Some(to) => std::os::unix::fs::symlink(to, &target)?,
                None => report.skipped.push(raw.display().to_string()),
            },
            _ => report.skipped.push(raw.display().to_string()),
        }
    }
    Ok(report)
}

/// Strips the leading `top` component; `None` for anything that is not a
/// plain relative path below it.
fn relative_inside(raw: &Path, top: &str) -> Option<PathBuf> {
    let mut comps = raw.components();
    match comps.next()? {
        Component::Normal(first) if first == top => {}
        _ => return None,
    }
    let mut out = PathBuf::new();
    for c in comps {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(out)
}

/// Makes sure every parent of `rel` under `dest` is a real directory (not a
/// link), creating missing ones; `None` if a parent is something else.
fn prepare_parents(dest: &Path, rel: &Path) -> Result<Option<PathBuf>, ExecError> {
    let mut cur = dest.to_path_buf();
    let parts: Vec<_> = rel.components().collect();
    for c in &parts[..parts.len().saturating_sub(1)] {
        cur.push(c);
        match fs::symlink_metadata(&cur) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => fs::create_dir(&cur)?,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Some(dest.join(rel)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_with(entries: &[(&str, tar::EntryType, &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(0o755);
            if kind.is_symlink() || *kind == tar::EntryType::Link {
                h.set_size(0);
                h.set_link_name(data).unwrap();
                // Raw name write: tar's own checks would refuse some paths.
                h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
                h.set_cksum();
                b.append(&h, std::io::empty()).unwrap();
            } else {
                h.set_size(data.len() as u64);
                h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
                h.set_cksum();
                b.append(&h, data.as_bytes()).unwrap();
            }
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn an_upload_of_huge_sparse_files_is_refused_before_it_is_built() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..3 {
            let f = fs::File::create(dir.path().join(format!("s{i}"))).unwrap();
            f.set_len(1 << 30).unwrap();
        }
        // Refused at once: no file's zeros are read in.
        let mut b = tar::Builder::new(Vec::new());
        let mut left = 1 << 20;
        let err = add_dir_counted(
            &mut b,
            dir.path(),
            Path::new(""),
            Path::new(""),
            (0, 0),
            &mut left,
        )
        .unwrap_err();
        assert!(matches!(err, ExecError::Refused(_)), "{err}");
        assert!(b.get_ref().len() < 1 << 20);
    }

    #[test]
    fn relative_links_out_of_the_workspace_are_spotted() {
        assert!(escapes(Path::new("t"), Path::new("../tests")));
        assert!(escapes(Path::new("a/t"), Path::new("../../x")));
        assert!(escapes(Path::new("a/t"), Path::new("b/../../../x")));
        assert!(!escapes(Path::new("a/t"), Path::new("../x")));
        assert!(!escapes(Path::new("t"), Path::new("/tests/x")));
        assert!(!escapes(Path::new("t"), Path::new("x/y")));
    }

    #[test]
    fn extraction_never_escapes_or_follows_links() {
        let outside = tempfile::tempdir().unwrap();
        let canary = outside.path().join("canary");
        fs::write(&canary, "host").unwrap();
        let dest = tempfile::tempdir().unwrap();
        let canary_s = canary.to_str().unwrap();
        let out_s = outside.path().to_str().unwrap();
        let data = tar_with(&[
            ("workspace/", tar::EntryType::Directory, ""),
            ("workspace/ok.txt", tar::EntryType::Regular, "fine"),
            ("workspace/l", tar::EntryType::Symlink, canary_s),
            ("workspace/l", tar::EntryType::Regular, "overwrite?"),
            ("workspace/d", tar::EntryType::Symlink, out_s),
            (
                "workspace/d/canary",
                tar::EntryType::Regular,
                "through link",
            ),
            ("workspace/../escape", tar::EntryType::Regular, "x"),
            ("/abs", tar::EntryType::Regular, "x"),
            ("workspace/hl", tar::EntryType::Link, canary_s),
        ]);
        let rep = extract(&data[..], dest.path()).unwrap();
        assert_eq!(fs::read_to_string(&canary).unwrap(), "host");
        assert_eq!(
            fs::read_to_string(dest.path().join("ok.txt")).unwrap(),
            "fine"
        );
        // The duplicate regular entry replaced the link, not its target.
        assert!(
            !fs::symlink_metadata(dest.path().join("l"))
                .unwrap()
                .is_symlink()
        );
        assert!(
            fs::symlink_metadata(dest.path().join("d"))
                .unwrap()
                .is_symlink()
        );
        assert_eq!(rep.skipped.len(), 4, "{rep:?}");
        assert!(!outside.path().join("escape").exists());
    }
}
