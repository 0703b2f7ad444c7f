//! runner's benchmark suite (issue 5): runner and its peers measured in the
//! same run, interleaved, after a warm-up. `make bench` writes
//! bench/results.json and the generated section of BENCHMARKS.md;
//! `make bench-quick` runs a reduced version, only to check that the
//! benchmark still works, and writes under target/bench-quick/.
//!
//! Usage: cargo bench --bench suite -- [--quick] [--only B1,B4,...]

mod exec;
mod model;
mod process;
mod report;
mod stats;
mod suite;
mod sys;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use stats::Row;

#[global_allocator]
static ALLOC: model::CountingAlloc = model::CountingAlloc;

/// The image every sandbox of the bench runs.
const IMAGE: &str = "runner-sandbox:tiny";
/// The images `make bench` needs (`make sandbox-image` builds them).
const NEEDED_IMAGES: [&str; 2] = ["runner-sandbox:tiny", "runner-sandbox:bookworm"];

/// Sizes and round counts of one run.
pub struct Plan {
    pub quick: bool,
    pub image: String,
    pub runner_bin: PathBuf,
    /// Rounds measured and thrown away before the kept ones.
    pub warmup: usize,
    pub b1_rounds: usize,
    pub b2_rounds: usize,
    pub b3_tasks: usize,
    pub b3_jobs: Vec<usize>,
    pub b3_rounds: usize,
    /// Total jobs J of the sharding row: one process with `--jobs J`
    /// against two `--shard` processes with `--jobs J/2` each.
    pub b3_shard_jobs: usize,
    pub b4_steps: usize,
    pub b4_rounds: usize,
    pub b5_bytes: u64,
    pub b5_rounds: usize,
    pub b6_rounds: usize,
    pub b7_turns: usize,
    pub b7_warmup: usize,
}

impl Plan {
    fn new(quick: bool, runner_bin: PathBuf) -> Plan {
        let pick = |full: usize, q: usize| if quick { q } else { full };
        Plan {
            quick,
            image: IMAGE.to_string(),
            runner_bin,
            warmup: pick(2, 1),
            b1_rounds: pick(30, 5),
            b2_rounds: pick(8, 2),
            b3_tasks: pick(40, 8),
            b3_jobs: if quick { vec![1, 2] } else { vec![1, 2, 4, 8] },
            b3_rounds: pick(2, 1),
            b3_shard_jobs: pick(4, 2),
            b4_steps: pick(500, 100),
            b4_rounds: pick(5, 1),
            b5_bytes: if quick { 64 << 20 } else { 1 << 30 },
            b5_rounds: pick(2, 1),
            b6_rounds: pick(10, 2),
            b7_turns: pick(200, 20),
            b7_warmup: pick(10, 2),
        }
    }
}

struct Args {
    quick: bool,
    only: Option<Vec<String>>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        quick: false,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            // cargo bench passes --bench to harness-less targets.
            "--bench" | "--full" => {}
            "--quick" => args.quick = true,
            "--only" => {
                let list = it.next().ok_or("--only needs a list like B1,B4")?;
                args.only = Some(list.split(',').map(|s| s.trim().to_uppercase()).collect());
            }
            other => {
                return Err(format!(
                    "unknown argument '{other}' (expected --quick, --full, --only B1,B2)"
                ));
            }
        }
    }
    Ok(args)
}

/// What `make bench` runs, spelled out in the results.
const FULL_COMMAND: &str =
    "`make bench` (= `cargo build --release --bin runner && cargo bench --bench suite -- --full`)";

/// Where a run's results go, and the command that reproduces it.
struct Outputs {
    mode: &'static str,
    command: String,
    dir: PathBuf,
    markdown: PathBuf,
}

impl Outputs {
    /// Only a full run of every benchmark writes bench/ and BENCHMARKS.md;
    /// quick and partial runs write under target/, updating a copy of
    /// BENCHMARKS.md so that code path is still exercised.
    fn new(root: &Path, quick: bool, only: Option<&[String]>) -> Outputs {
        let mode = if quick { "quick" } else { "full" };
        let command = match (quick, only) {
            (false, None) => {
                return Outputs {
                    mode,
                    command: FULL_COMMAND.into(),
                    dir: root.join("bench"),
                    markdown: root.join("BENCHMARKS.md"),
                };
            }
            (true, None) => "`make bench-quick`".to_string(),
            (_, Some(ids)) => format!(
                "`cargo bench --bench suite -- --{mode} --only {}`",
                ids.join(",")
            ),
        };
        let dir = root.join(if only.is_some() {
            "target/bench-partial"
        } else {
            "target/bench-quick"
        });
        let markdown = dir.join("BENCHMARKS.md");
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::copy(root.join("BENCHMARKS.md"), &markdown);
        Outputs {
            mode,
            command,
            dir,
            markdown,
        }
    }
}

/// Refuses to start without Docker, the images or the release binary.
fn preflight(runner_bin: &Path) -> Result<(), String> {
    sys::docker_out(&["version", "--format", "{{.Server.Version}}"])
        .map_err(|e| format!("{e}\nhint: start the Docker daemon"))?;
    for image in NEEDED_IMAGES {
        if sys::docker_out(&["image", "inspect", "--format", "{{.Id}}", image]).is_err() {
            return Err(format!(
                "image {image} is missing\nhint: run `make sandbox-image`"
            ));
        }
    }
    if !runner_bin.is_file() {
        return Err(format!(
            "{} does not exist\nhint: run `cargo build --release --bin runner` (or `make bench`)",
            runner_bin.display()
        ));
    }
    Ok(())
}

/// `cargo test --all-targets` builds and runs bench targets too, without
/// `--bench` (and with test-harness flags such as `--test-threads=2`):
/// the suite only runs when `cargo bench` or a person asks for it.
fn asked_to_run() -> bool {
    std::env::args()
        .skip(1)
        .any(|a| matches!(a.as_str(), "--bench" | "--quick" | "--full"))
}

fn main() -> ExitCode {
    if !asked_to_run() {
        eprintln!("suite: not run under `cargo test`; use `make bench` or `make bench-quick`");
        return ExitCode::SUCCESS;
    }
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let runner_bin = std::env::var_os("RUNNER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/release/runner"));
    if let Err(e) = preflight(&runner_bin) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let plan = Plan::new(args.quick, runner_bin);
    let started = Instant::now();
    let mut fp = sys::Fingerprint::take();
    let (rows, failures) = run_all(&plan, args.only.as_deref());
    fp.load_end = sys::load_avg();
    let left = sys::remove_bench_containers();
    let mut failures = failures;
    if left > 0 {
        failures.push(format!(
            "{left} bench containers were left behind (now removed)"
        ));
    }
    let out = Outputs::new(&root, plan.quick, args.only.as_deref());
    let results = report::Results {
        mode: out.mode,
        command: &out.command,
        finished_at: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
        wall_secs: started.elapsed().as_secs_f64(),
        fingerprint: &fp,
        rows: &rows,
        failures: &failures,
    };
    let (json, md) = (out.dir.join("results.json"), &out.markdown);
    let written = results
        .write_json(&json)
        .and_then(|()| results.update_markdown(md));
    print!("{}", results.markdown());
    if let Err(e) = written {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    eprintln!("wrote {} and {}", json.display(), md.display());
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        for f in &failures {
            eprintln!("error: {f}");
        }
        ExitCode::from(1)
    }
}

/// Rows of the benchmarks that ran, and the reasons of those that failed.
#[derive(Default)]
struct Collected {
    rows: Vec<Row>,
    failures: Vec<String>,
}

impl Collected {
    fn record(&mut self, id: &str, r: Result<Vec<Row>, String>) {
        match r {
            Ok(mut v) => self.rows.append(&mut v),
            Err(e) => {
                eprintln!("error: {id}: {e}");
                self.failures.push(format!("{id}: {e}"));
            }
        }
    }
}

/// Runs the selected benchmarks in order; a failing one is recorded and
/// the others still run.
fn run_all(plan: &Plan, only: Option<&[String]>) -> (Vec<Row>, Vec<String>) {
    let mut out = Collected::default();
    sys::remove_bench_containers();
    if let Err(e) = run_selected(plan, only, &mut out) {
        out.failures.push(e);
    }
    out.rows.sort_by_key(|r| r.id);
    (out.rows, out.failures)
}

fn run_selected(plan: &Plan, only: Option<&[String]>, out: &mut Collected) -> Result<(), String> {
    let wanted = |id: &str| {
        let yes = only.is_none_or(|o| o.iter().any(|x| x == id));
        if yes {
            eprintln!("{id}: running");
        }
        yes
    };
    let tmp = tempfile::Builder::new()
        .prefix("runner-bench-")
        .tempdir()
        .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    if wanted("B7") {
        out.record("B7", model::b7(plan));
    }
    let rt = tokio::runtime::Runtime::new()
        .map_err(|e| format!("cannot build the Tokio runtime: {e}"))?;
    let peer =
        exec::peer_container(plan).map_err(|e| format!("cannot start the peer container: {e}"))?;
    if wanted("B1") {
        out.record("B1", rt.block_on(exec::b1(plan, &peer)));
    }
    if wanted("B2") {
        out.record("B2", rt.block_on(exec::b2(plan)));
    }
    if wanted("B4") {
        out.record("B4", process::b4(plan, tmp.path()));
    }
    if wanted("B5") {
        out.record("B5", process::b5(plan, tmp.path(), &peer));
    }
    if wanted("B6") {
        out.record("B6", rt.block_on(exec::b6(plan, &peer)));
    }
    sys::docker_out(&["rm", "-f", &peer])
        .map_err(|e| format!("removing the peer container: {e}"))?;
    if wanted("B3") {
        out.record("B3", suite::b3(plan, tmp.path()));
    }
    Ok(())
}
