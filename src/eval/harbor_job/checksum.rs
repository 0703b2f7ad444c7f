//! Harbor's task checksum (`Task.checksum`, the `task_checksum` of a trial
//! result): the `dirhash` package's SHA-256 of the task directory with its
//! default protocol (each entry described by its name and its content's
//! hash), links followed, directories that hold no file left out, and the
//! `.harborignore` files themselves excluded, as Harbor's filter does.
//!
//! The algorithm, as dirhash 0.5 (Harbor 0.26's pin) computes it:
//! - a file: the hex SHA-256 of its bytes;
//! - a directory: the hex SHA-256 of its entries' descriptors, sorted and
//!   joined by two NULs, where a file's descriptor is `data:<hash>\0name:<name>`
//!   and a directory's `dirhash:<hash>\0name:<name>`.
//!
//! The task directory is the user's own (not something a sandbox made), so
//! links are followed as Harbor follows them; a link cycle is refused.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Deepest nesting hashed.
const MAX_DEPTH: usize = 64;
/// The file Harbor's filter always leaves out of the checksum.
const IGNORE_FILENAME: &str = ".harborignore";

/// Why a task directory could not be hashed.
#[derive(Debug, thiserror::Error)]
pub enum ChecksumError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}: a link cycle or a tree deeper than {MAX_DEPTH} levels")]
    TooDeep(PathBuf),
    #[error("{0}: a file name that is not UTF-8")]
    NotUtf8(PathBuf),
    #[error("{0}: nothing to hash (no file in the task directory)")]
    Empty(PathBuf),
}

/// Harbor's `task_checksum` of the task directory `dir`.
pub fn task_checksum(dir: &Path) -> Result<String, ChecksumError> {
    let mut stack = Vec::new();
    dir_hash(dir, &mut stack)?.ok_or_else(|| ChecksumError::Empty(dir.to_path_buf()))
}

fn read_err(path: &Path) -> impl FnOnce(std::io::Error) -> ChecksumError + '_ {
    move |source| ChecksumError::Read {
        path: path.to_path_buf(),
        source,
    }
}

/// The directory's hash, or `None` when it holds no file (dirhash leaves
/// such a directory out). `stack` holds the (device, inode) of the
/// directories being hashed, to refuse a link back into one of them.
fn dir_hash(dir: &Path, stack: &mut Vec<(u64, u64)>) -> Result<Option<String>, ChecksumError> {
    let meta = std::fs::metadata(dir).map_err(read_err(dir))?;
    let id = (meta.dev(), meta.ino());
    if stack.contains(&id) || stack.len() >= MAX_DEPTH {
        return Err(ChecksumError::TooDeep(dir.to_path_buf()));
    }
    stack.push(id);
    let mut descriptors = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_err(dir))? {
        let entry = entry.map_err(read_err(dir))?;
        let path = entry.path();
        let name = entry
            .file_name()
            .into_string()
            .map_err(|_| ChecksumError::NotUtf8(path.clone()))?;
        if name == IGNORE_FILENAME {
            continue;
        }
        // Links are followed (a dangling one is an error, as in dirhash).
        let meta = std::fs::metadata(&path).map_err(read_err(&path))?;
        if meta.is_dir() {
            if let Some(h) = dir_hash(&path, stack)? {
                descriptors.push(format!("dirhash:{h}\0name:{name}"));
            }
        } else if meta.is_file() {
            descriptors.push(format!("data:{}\0name:{name}", file_hash(&path)?));
        }
    }
    stack.pop();
    if descriptors.is_empty() {
        return Ok(None);
    }
    descriptors.sort();
    Ok(Some(hex(&Sha256::digest(
        descriptors.join("\0\0").as_bytes(),
    ))))
}

fn file_hash(path: &Path) -> Result<String, ChecksumError> {
    let mut f = std::fs::File::open(path).map_err(read_err(path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(read_err(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(s: &str) -> String {
        hex(&Sha256::digest(s.as_bytes()))
    }

    #[test]
    fn a_tree_hashes_as_dirhash_describes_it() {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::write(d.path().join("b.txt"), "bee").expect("write");
        std::fs::create_dir_all(d.path().join("sub")).expect("mkdir");
        std::fs::write(d.path().join("sub/a"), "a").expect("write");
        // Left out: an empty directory and the ignore file.
        std::fs::create_dir_all(d.path().join("empty/deeper")).expect("mkdir");
        std::fs::write(d.path().join("sub/.harborignore"), "*.log\n").expect("write");
        let sub = sha(&format!("data:{}\0name:a", sha("a")));
        let want = sha(&format!(
            "data:{}\0name:b.txt\0\0dirhash:{sub}\0name:sub",
            sha("bee")
        ));
        assert_eq!(task_checksum(d.path()).expect("hashes"), want);
    }

    #[test]
    fn a_link_cycle_and_an_empty_task_are_refused() {
        let d = tempfile::tempdir().expect("tempdir");
        assert!(matches!(
            task_checksum(d.path()),
            Err(ChecksumError::Empty(_))
        ));
        std::fs::write(d.path().join("f"), "x").expect("write");
        std::os::unix::fs::symlink(d.path(), d.path().join("loop")).expect("link");
        assert!(matches!(
            task_checksum(d.path()),
            Err(ChecksumError::TooDeep(_))
        ));
    }
}
