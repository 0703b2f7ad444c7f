//! Harbor's CLI as `make harbor` installed it (sandbox/harbor/harbor.sh),
//! its jobs, their trial results, and the Docker objects they leave.
//!
//! Harbor names a trial `TASK__XXXXXXX` and runs it as the compose project
//! `task__xxxxxxx__env` (lowercased; a separate verifier gets another
//! `task__xxxxxxx__...` project); the images it builds are `hb__HASH`. What
//! is removed at the end: containers, networks and volumes of the projects of
//! this test's trials, and the `hb__` images that were not there when the
//! test began.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::verdict::{Verdict, harbor_verdict};

/// How long one Harbor job may take before the test gives up on it.
const JOB_DEADLINE: Duration = Duration::from_secs(30 * 60);

pub struct Harbor {
    wrapper: PathBuf,
}

pub struct HarborJob {
    pub agent: &'static str,
    desc: String,
    dir: PathBuf,
    log: PathBuf,
    child: Child,
    started: Instant,
}

pub struct DoneJob {
    pub elapsed: Duration,
    pub verdicts: BTreeMap<String, Verdict>,
}

impl Harbor {
    /// The wrapper, checked by running `harbor --version`; FAILS with the
    /// hint `make harbor` when Harbor is not installed.
    pub fn find() -> Self {
        let wrapper = std::env::var_os("RUNNER_HARBOR")
            .map(PathBuf::from)
            .unwrap_or_else(|| crate::repo().join("sandbox/harbor/harbor.sh"));
        let out = Command::new(&wrapper)
            .arg("--version")
            .current_dir(crate::repo())
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run Harbor's wrapper {wrapper:?}: {e}\nhint: run `make harbor`")
            });
        assert!(
            out.status.success(),
            "Harbor is not installed or does not run ({wrapper:?} --version: {}{})\nhint: run `make harbor`",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Harbor { wrapper }
    }

    /// Runs a Python script of this repository with Harbor's Python and
    /// its installed packages (`harbor.sh --python`).
    pub fn python(&self, script: &Path, args: &[&Path]) -> std::process::Output {
        let mut cmd = Command::new(&self.wrapper);
        cmd.current_dir(crate::repo())
            .arg("--python")
            .arg(script)
            .args(args)
            .stdin(Stdio::null());
        cmd.output()
            .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}\nhint: run `make harbor`"))
    }

    /// Starts `harbor run` on a directory of tasks with an agent, offline,
    /// two trials at a time, into a job directory of its own.
    pub fn start(&self, jobs_dir: &Path, suite: &Path, agent: &'static str) -> HarborJob {
        let name = format!(
            "{}-{agent}-{}-{}",
            suite.file_name().unwrap().to_string_lossy(),
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
        );
        let log = jobs_dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).expect("create the Harbor job's log");
        let mut cmd = Command::new(&self.wrapper);
        cmd.current_dir(crate::repo())
            .args([
                "run",
                "--yes",
                "--quiet",
                "-e",
                "docker",
                "--n-concurrent",
                "2",
            ])
            .arg("-p")
            .arg(suite)
            .args(["--agent", agent, "--jobs-dir"])
            .arg(jobs_dir)
            .args(["--job-name", &name])
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("dup the log"))
            .stderr(out);
        let desc = format!("{cmd:?}");
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {desc}: {e}"));
        HarborJob {
            agent,
            desc,
            dir: jobs_dir.join(&name),
            log,
            child,
            started: Instant::now(),
        }
    }
}

impl HarborJob {
    /// Waits for the job and reads each trial's verdict; Err explains a job
    /// that did not finish, exited non-zero or left a trial without a result.
    pub fn wait(mut self) -> Result<DoneJob, String> {
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait for Harbor") {
                break s;
            }
            if self.started.elapsed() > JOB_DEADLINE {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return Err(self.explain(&format!("did not finish in {JOB_DEADLINE:?}")));
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        let elapsed = self.started.elapsed();
        if !status.success() {
            return Err(self.explain(&format!("exited with {status}")));
        }
        let mut verdicts = BTreeMap::new();
        for trial in trial_dirs(&self.dir) {
            let path = trial.join("result.json");
            let text = std::fs::read_to_string(&path)
                .map_err(|e| self.explain(&format!("{path:?}: {e}")))?;
            let result: Value =
                serde_json::from_str(&text).map_err(|e| self.explain(&format!("{path:?}: {e}")))?;
            let task = result["task_name"].as_str().unwrap_or_default().to_string();
            verdicts.insert(task, harbor_verdict(&result));
        }
        if verdicts.is_empty() {
            return Err(self.explain("ran no trial"));
        }
        Ok(DoneJob { elapsed, verdicts })
    }

    fn explain(&self, what: &str) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "Harbor job {} {what}\n  command: {}\n  log ({:?}), last lines:\n{}",
            self.dir.display(),
            self.desc,
            self.log,
            tail.join("\n")
        )
    }
}

/// A job directory's trial directories (each has a config.json).
fn trial_dirs(job: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(job) else {
        return Vec::new();
    };
    rd.filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("config.json").is_file())
        .collect()
}

fn docker(args: &[&str]) -> Vec<String> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("the docker CLI is needed for this test: {e}"));
    assert!(
        out.status.success(),
        "docker {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// The `hb__` images there are now (Harbor's task images), by id and name.
pub fn harbor_images() -> Vec<String> {
    docker(&["images", "--format", "{{.ID}} {{.Repository}}:{{.Tag}}"])
        .into_iter()
        .filter(|l| l.split(' ').nth(1).is_some_and(|n| n.starts_with("hb__")))
        .collect()
}

/// Removes what Harbor made for the trials of the jobs under `jobs_dir` and
/// the `hb__` images not in `before`; returns what is still there.
pub fn clean_up(jobs_dir: &Path, before: &[String]) -> Vec<String> {
    let prefixes: Vec<String> = std::fs::read_dir(jobs_dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .iter()
        .flat_map(|job| trial_dirs(job))
        .filter_map(|t| {
            t.file_name()
                .map(|n| format!("{}__", n.to_string_lossy().to_lowercase()))
        })
        .collect();
    let ours = |project: &str| prefixes.iter().any(|p| project.starts_with(p.as_str()));
    let label = "{{.Label \"com.docker.compose.project\"}}";
    let mut left = Vec::new();
    for (list, rm) in [
        (vec!["ps", "-a", "--format"], vec!["rm", "-f", "-v"]),
        (vec!["network", "ls", "--format"], vec!["network", "rm"]),
        (vec!["volume", "ls", "--format"], vec!["volume", "rm", "-f"]),
    ] {
        let id = if list[0] == "ps" {
            "{{.ID}}"
        } else {
            "{{.Name}}"
        };
        let format = format!("{id} {label}");
        let mut args = list.clone();
        args.push(&format);
        let mine: Vec<String> = docker(&args)
            .into_iter()
            .filter_map(|l| {
                let (id, project) = l.split_once(' ')?;
                ours(project).then(|| id.to_string())
            })
            .collect();
        for id in &mine {
            let mut a = rm.clone();
            a.push(id);
            let _ = Command::new("docker").args(&a).output();
        }
        let still: Vec<String> = docker(&args)
            .into_iter()
            .filter(|l| l.split_once(' ').is_some_and(|(_, p)| ours(p)))
            .collect();
        left.extend(still.into_iter().map(|l| format!("{}: {l}", list[0])));
    }
    let new_images: Vec<String> = harbor_images()
        .into_iter()
        .filter(|i| !before.contains(i))
        .collect();
    for image in &new_images {
        let id = image.split(' ').next().unwrap_or_default();
        let _ = Command::new("docker")
            .args(["image", "rm", "-f", id])
            .output();
    }
    let still = harbor_images();
    left.extend(
        new_images
            .into_iter()
            .filter(|i| still.contains(i))
            .map(|i| format!("image: {i}")),
    );
    left
}
