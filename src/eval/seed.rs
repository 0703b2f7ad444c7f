//! Seeding attempts' workspaces once per image: the first attempt of an
//! image has the backend seed a private cache directory (for docker, one
//! throwaway container and one archive download); every attempt, that one
//! included, then gets its own host-side copy of the cached tree.
//!
//! The cached tree came out of the task's image, so it is treated as
//! hostile: it is copied with [`copy_tree`], which never follows a link
//! (links stay links, pointing wherever they pointed), and nothing of it is
//! read otherwise. The cache is keyed by the image's reference and, when
//! the backend can tell, its identity (the engine's image id), so a tag
//! rebuilt during the suite is seeded afresh rather than served stale. A
//! backend without images (local) seeds every attempt itself, as before.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tempfile::TempDir;
use tokio::sync::{Mutex, OnceCell};

use crate::exec::ExecError;
use crate::exec::backend::{Backend, Seeded};
use crate::exec::tree::copy_tree;

/// What the cache tells images apart by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ImageKey {
    reference: String,
    identity: Option<String>,
    /// The directory seeded, when not the image's WORKDIR.
    dir: Option<String>,
}

/// One image's seeded tree.
#[derive(Debug)]
struct Cached {
    dir: PathBuf,
    seeded: Seeded,
}

/// The suite's seeded images; the directory goes when the cache does.
pub struct SeedCache {
    backend: Arc<dyn Backend>,
    /// `None`: a backend without images, which seeds each attempt itself.
    root: Option<TempDir>,
    /// Names the seeding sandboxes (`<suite id>-seed<n>`).
    run_id: String,
    /// One cell per image: attempts of an image wait for its one seeding.
    images: Mutex<HashMap<ImageKey, Arc<OnceCell<Cached>>>>,
    next: AtomicUsize,
}

impl SeedCache {
    /// A cache for the suite `run_id`, in a private temporary directory
    /// when `backend` has images.
    pub fn new(backend: Arc<dyn Backend>, run_id: &str) -> std::io::Result<SeedCache> {
        let root = if backend.capabilities().images {
            Some(crate::exec::temp_dirs::create(
                crate::exec::temp_dirs::SEED_PREFIX,
            )?)
        } else {
            None
        };
        Ok(SeedCache {
            backend,
            root,
            run_id: run_id.to_string(),
            images: Mutex::new(HashMap::new()),
            next: AtomicUsize::new(0),
        })
    }

    /// Where the seeded trees are, if anywhere.
    pub fn dir(&self) -> Option<&Path> {
        self.root.as_ref().map(TempDir::path)
    }

    /// Fills the empty host directory `host` with `image`'s working
    /// directory, seeding the image first if no attempt did yet. Every
    /// attempt of an image gets the same [`Seeded`]. A failed seeding is
    /// not remembered: the next attempt tries again.
    pub async fn seed(
        &self,
        image: &str,
        host: &Path,
        attempt_run_id: &str,
    ) -> Result<Seeded, ExecError> {
        self.seed_dir(image, None, host, attempt_run_id).await
    }

    /// Like [`SeedCache::seed`], with the image's directory `dir` rather
    /// than its WORKDIR when given (a task's `[environment] workdir`).
    pub async fn seed_dir(
        &self,
        image: &str,
        dir: Option<&str>,
        host: &Path,
        attempt_run_id: &str,
    ) -> Result<Seeded, ExecError> {
        let Some(root) = &self.root else {
            return self.backend.seed(image, dir, host, attempt_run_id).await;
        };
        let key = ImageKey {
            reference: image.to_string(),
            identity: self.backend.image_identity(image).await?,
            dir: dir.map(str::to_string),
        };
        let cell = self.images.lock().await.entry(key).or_default().clone();
        let cached = cell
            .get_or_try_init(|| self.fill(root.path(), image, dir))
            .await?;
        let (src, dst) = (cached.dir.clone(), host.to_path_buf());
        let copied = tokio::task::spawn_blocking(move || copy_tree(&src, &dst, None))
            .await
            .map_err(|e| ExecError::Spawn(format!("workspace copy task failed: {e}")))??;
        Ok(Seeded {
            workdir: cached.seeded.workdir.clone(),
            // The copy of a given tree leaves out the same entries each
            // time (only what is nested too deep): the same for every
            // attempt.
            skipped: cached.seeded.skipped + copied.skipped.len(),
            image_user: cached.seeded.image_user.clone(),
            passwd: cached.seeded.passwd.clone(),
            group: cached.seeded.group.clone(),
        })
    }

    /// Seeds `image` into a new directory of the cache.
    async fn fill(
        &self,
        root: &Path,
        image: &str,
        wanted: Option<&str>,
    ) -> Result<Cached, ExecError> {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let dir = root.join(n.to_string());
        std::fs::create_dir(&dir)?;
        let run_id = format!("{}-seed{n}", self.run_id);
        match self.backend.seed(image, wanted, &dir, &run_id).await {
            Ok(seeded) => Ok(Cached { dir, seeded }),
            Err(e) => {
                // remove_dir_all does not follow links inside the tree.
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Executor;
    use crate::exec::backend::{Capabilities, ImageSource, Network, SandboxSpec};
    use async_trait::async_trait;
    use std::time::Duration;

    /// A backend whose seeding writes a small tree with links out of it,
    /// counts its calls and can be told to fail or to move a tag.
    struct Fake {
        images: bool,
        seeds: AtomicUsize,
        fail_next: std::sync::atomic::AtomicBool,
        identity: std::sync::Mutex<String>,
    }

    impl Fake {
        fn new(images: bool) -> Arc<Fake> {
            Arc::new(Fake {
                images,
                seeds: AtomicUsize::new(0),
                fail_next: std::sync::atomic::AtomicBool::new(false),
                identity: std::sync::Mutex::new("sha256:one".into()),
            })
        }
        fn seeds(&self) -> usize {
            self.seeds.load(Ordering::SeqCst)
        }
    }

    #[async_trait]
    impl Backend for Fake {
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                name: "fake",
                isolated: true,
                networks: vec![Network::None],
                images: self.images,
            }
        }
        async fn prepare_image(&self, _: ImageSource<'_>) -> Result<String, ExecError> {
            Err(ExecError::Spawn("the fake prepares no images".into()))
        }
        async fn image_identity(&self, _image: &str) -> Result<Option<String>, ExecError> {
            Ok(Some(self.identity.lock().expect("lock").clone()))
        }
        async fn seed(
            &self,
            image: &str,
            _dir: Option<&str>,
            host: &Path,
            run_id: &str,
        ) -> Result<Seeded, ExecError> {
            self.seeds.fetch_add(1, Ordering::SeqCst);
            // Long enough for a second attempt to arrive while seeding.
            tokio::time::sleep(Duration::from_millis(50)).await;
            if self.fail_next.swap(false, Ordering::SeqCst) {
                return Err(ExecError::Spawn("engine trouble".into()));
            }
            assert_eq!(std::fs::read_dir(host).expect("ls").count(), 0, "not empty");
            std::fs::create_dir(host.join("src")).expect("mkdir");
            std::fs::write(host.join("src/main.txt"), image).expect("write");
            std::fs::write(host.join("run_id"), run_id).expect("write");
            std::os::unix::fs::symlink("/etc/passwd", host.join("passwd")).expect("link");
            std::os::unix::fs::symlink("../../x", host.join("src/up")).expect("link");
            std::os::unix::fs::symlink("/etc", host.join("etc")).expect("link");
            Ok(Seeded {
                workdir: "/app".into(),
                skipped: 2,
                image_user: Some("agent".into()),
                passwd: Some("agent:x:1000:1000::/home/agent:/bin/sh\n".into()),
                group: Some("agent:x:1000:\n".into()),
            })
        }
        async fn start(&self, _: SandboxSpec) -> Result<Arc<dyn Executor>, ExecError> {
            Err(ExecError::Spawn("the fake starts no sandbox".into()))
        }
    }

    fn cache(fake: &Arc<Fake>) -> SeedCache {
        SeedCache::new(fake.clone(), "eval-test").expect("cache")
    }

    fn link(p: &Path) -> PathBuf {
        let m = std::fs::symlink_metadata(p).expect("lstat");
        assert!(m.is_symlink(), "{} is not a link any more", p.display());
        std::fs::read_link(p).expect("readlink")
    }

    #[tokio::test]
    async fn two_attempts_of_one_image_seed_once_and_get_independent_copies() {
        let fake = Fake::new(true);
        let seeds = cache(&fake);
        let (a, b) = (
            tempfile::tempdir().expect("a"),
            tempfile::tempdir().expect("b"),
        );
        let (ra, rb) = tokio::join!(
            seeds.seed("img:1", a.path(), "eval-test-t-1"),
            seeds.seed("img:1", b.path(), "eval-test-t-2"),
        );
        let (ra, rb) = (ra.expect("a seeds"), rb.expect("b seeds"));
        assert_eq!(fake.seeds(), 1, "the image was seeded more than once");
        assert_eq!(ra, rb);
        assert_eq!(
            ra,
            Seeded {
                workdir: "/app".into(),
                skipped: 2,
                image_user: Some("agent".into()),
                passwd: Some("agent:x:1000:1000::/home/agent:/bin/sh\n".into()),
                group: Some("agent:x:1000:\n".into()),
            }
        );
        // The seeding sandbox is the suite's, not either attempt's.
        let run_id = std::fs::read_to_string(a.path().join("run_id")).expect("read");
        assert_eq!(run_id, "eval-test-seed0");

        // One attempt's writes never show in another's (nor in the cache).
        std::fs::write(a.path().join("src/main.txt"), "changed by a").expect("write");
        std::fs::write(a.path().join("new.txt"), "a only").expect("write");
        std::fs::remove_file(a.path().join("passwd")).expect("rm");
        assert_eq!(
            std::fs::read_to_string(b.path().join("src/main.txt")).expect("read"),
            "img:1"
        );
        assert!(!b.path().join("new.txt").exists());
        assert_eq!(link(&b.path().join("passwd")), Path::new("/etc/passwd"));
        let c = tempfile::tempdir().expect("c");
        seeds
            .seed("img:1", c.path(), "eval-test-t-3")
            .await
            .expect("c");
        assert_eq!(fake.seeds(), 1);
        assert_eq!(
            std::fs::read_to_string(c.path().join("src/main.txt")).expect("read"),
            "img:1"
        );
        assert!(!c.path().join("new.txt").exists());

        // Links out of the workdir stay links in every copy, never followed.
        for ws in [b.path(), c.path()] {
            assert_eq!(link(&ws.join("passwd")), Path::new("/etc/passwd"));
            assert_eq!(link(&ws.join("src/up")), Path::new("../../x"));
            assert_eq!(link(&ws.join("etc")), Path::new("/etc"));
        }
        assert_eq!(link(&a.path().join("src/up")), Path::new("../../x"));
    }

    #[tokio::test]
    async fn another_image_or_a_rebuilt_tag_is_seeded_afresh() {
        let fake = Fake::new(true);
        let seeds = cache(&fake);
        let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().expect("dir")).collect();
        seeds
            .seed("img:1", dirs[0].path(), "r")
            .await
            .expect("seeds");
        seeds
            .seed("img:2", dirs[1].path(), "r")
            .await
            .expect("seeds");
        assert_eq!(fake.seeds(), 2);
        assert_eq!(
            std::fs::read_to_string(dirs[1].path().join("src/main.txt")).expect("read"),
            "img:2"
        );
        // The same tag, now naming other content.
        *fake.identity.lock().expect("lock") = "sha256:two".into();
        seeds
            .seed("img:1", dirs[2].path(), "r")
            .await
            .expect("seeds");
        assert_eq!(fake.seeds(), 3, "a rebuilt tag was served from the cache");
        seeds
            .seed("img:1", dirs[3].path(), "r")
            .await
            .expect("seeds");
        assert_eq!(fake.seeds(), 3);
    }

    #[tokio::test]
    async fn a_failed_seeding_is_retried_and_the_cache_goes_with_the_suite() {
        let fake = Fake::new(true);
        let seeds = cache(&fake);
        let dir = seeds.dir().expect("a cache directory").to_path_buf();
        fake.fail_next.store(true, Ordering::SeqCst);
        let a = tempfile::tempdir().expect("a");
        assert!(seeds.seed("img:1", a.path(), "r").await.is_err());
        assert_eq!(std::fs::read_dir(&dir).expect("ls").count(), 0, "left over");
        seeds.seed("img:1", a.path(), "r").await.expect("retried");
        assert_eq!(fake.seeds(), 2);
        drop(seeds);
        assert!(!dir.exists(), "the cache outlived the suite");
        // Its links were removed, not followed.
        assert!(Path::new("/etc/passwd").exists());
    }

    #[tokio::test]
    async fn a_backend_without_images_seeds_every_attempt_itself() {
        let fake = Fake::new(false);
        let seeds = cache(&fake);
        assert!(seeds.dir().is_none());
        let (a, b) = (
            tempfile::tempdir().expect("a"),
            tempfile::tempdir().expect("b"),
        );
        seeds
            .seed("local", a.path(), "eval-test-t-1")
            .await
            .expect("a");
        seeds
            .seed("local", b.path(), "eval-test-t-2")
            .await
            .expect("b");
        assert_eq!(fake.seeds(), 2);
        let run_id = std::fs::read_to_string(b.path().join("run_id")).expect("read");
        assert_eq!(run_id, "eval-test-t-2", "the attempt's own run id");
    }
}
