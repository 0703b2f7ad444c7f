//! runner's benchmark suite (issue 5): runner and its peers measured in the
//! same run, interleaved, after a warm-up. `make bench` writes
//! bench/results.json and the generated section of BENCHMARKS.md;
//! `make bench-quick` runs a reduced version, only to check that the
//! benchmark still works, and writes under target/bench-quick/.
//!
//! `make bench-peers` (`--peers`) measures runner against the tools users
//! pick instead (mini-swe-agent, SWE-ReX, Harbor) and runner on runc
//! against runsc, writing the `peers` part of bench/results.json and its
//! own section of BENCHMARKS.md.
//!
//! Usage: cargo bench --bench suite -- [--quick | --peers] [--only B1,B4,...]

mod calls;
mod exec;
mod harbor;
mod hostile;
mod model;
mod peers;
mod process;
mod report;
mod stats;
mod suite;
mod sys;
mod versions;

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
    /// B3 against Harbor: tasks, Ks and rounds (peers mode).
    pub b3h_tasks: usize,
    pub b3h_jobs: Vec<usize>,
    pub b3h_rounds: usize,
    /// B3 on each runtime (peers mode): the trivial tasks.
    pub b3rt_tasks: usize,
    /// B9: calls per scripted run through the binary, and rounds.
    pub b9_calls: usize,
    pub b9_rounds: usize,
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
            b3h_tasks: 8,
            b3h_jobs: vec![1, 4],
            b3h_rounds: 2,
            b3rt_tasks: 16,
            b9_calls: pick(200, 20),
            b9_rounds: pick(3, 1),
        }
    }
}

struct Args {
    quick: bool,
    peers: bool,
    only: Option<Vec<String>>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        quick: false,
        peers: false,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            // cargo bench passes --bench to harness-less targets.
            "--bench" | "--full" => {}
            "--quick" => args.quick = true,
            "--peers" => args.peers = true,
            "--only" => {
                let list = it.next().ok_or("--only needs a list like B1,B4")?;
                args.only = Some(list.split(',').map(|s| s.trim().to_uppercase()).collect());
            }
            other => {
                return Err(format!(
                    "unknown argument '{other}' (expected --quick, --full, --peers, --only B1,B2)"
                ));
            }
        }
    }
    if args.quick && args.peers {
        return Err("--quick and --peers do not go together".into());
    }
    Ok(args)
}

/// What `make bench` runs, spelled out in the results.
const FULL_COMMAND: &str =
    "`make bench` (= `cargo build --release --bin runner && cargo bench --bench suite -- --full`)";
/// What `make bench-peers` runs after its one-time installs.
const PEERS_COMMAND: &str = "`make bench-peers` (= `bash bench/peers/install.sh && make harbor && cargo build --release --bin runner && cargo bench --bench suite -- --peers`)";

/// Where a run's results go, and the command that reproduces it.
struct Outputs {
    mode: &'static str,
    command: String,
    dir: PathBuf,
    markdown: PathBuf,
}

/// The mode of a run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Quick,
    Full,
    Peers,
}

impl Outputs {
    /// Only a full run of every benchmark writes bench/ and BENCHMARKS.md;
    /// quick and partial runs write under target/, updating a copy of
    /// BENCHMARKS.md so that code path is still exercised.
    fn new(root: &Path, mode: Mode, only: Option<&[String]>) -> Outputs {
        let (mode, whole) = match mode {
            Mode::Quick => ("quick", None),
            Mode::Full => ("full", Some(FULL_COMMAND)),
            Mode::Peers => ("peers", Some(PEERS_COMMAND)),
        };
        let command = match (whole, only) {
            (Some(command), None) => {
                return Outputs {
                    mode,
                    command: command.into(),
                    dir: root.join("bench"),
                    markdown: root.join("BENCHMARKS.md"),
                };
            }
            (None, None) => "`make bench-quick`".to_string(),
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
    let mode = match (args.quick, args.peers) {
        (true, _) => Mode::Quick,
        (false, true) => Mode::Peers,
        (false, false) => Mode::Full,
    };
    let plan = Plan::new(args.quick, runner_bin);
    if mode != Mode::Quick {
        settle();
    }
    let started = Instant::now();
    let mut fp = sys::Fingerprint::take();
    let tools = versions::take(&root);
    let (rows, failures) = run_all(&plan, &root, mode, args.only.as_deref());
    fp.load_end = sys::load_avg();
    let left = sys::remove_bench_containers();
    let mut failures = failures;
    if left > 0 {
        failures.push(format!(
            "{left} bench containers were left behind (now removed)"
        ));
    }
    let out = Outputs::new(&root, mode, args.only.as_deref());
    let results = report::Results {
        section: if mode == Mode::Peers {
            report::Section::Peers
        } else {
            report::Section::Suite
        },
        tools: &tools,
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

/// Above this 1-minute load per CPU a measured run waits before it starts
/// (the builds just before it load the machine for a while).
const SETTLED_LOAD_PER_CPU: f64 = 0.35;
/// The longest it waits; the run is then flagged as busy in the results.
const SETTLE_MAX: std::time::Duration = std::time::Duration::from_secs(120);

/// Waits, up to [`SETTLE_MAX`], for the load left by what ran before (the
/// release build of `make bench`) to decay.
fn settle() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let t0 = Instant::now();
    let mut said = false;
    while sys::load_avg() / cpus > SETTLED_LOAD_PER_CPU && t0.elapsed() < SETTLE_MAX {
        if !said {
            eprintln!(
                "waiting up to {} s for the load ({:.2}) to settle below {:.2}",
                SETTLE_MAX.as_secs(),
                sys::load_avg(),
                SETTLED_LOAD_PER_CPU * cpus
            );
            said = true;
        }
        std::thread::sleep(std::time::Duration::from_secs(5));
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
fn run_all(
    plan: &Plan,
    root: &Path,
    mode: Mode,
    only: Option<&[String]>,
) -> (Vec<Row>, Vec<String>) {
    let mut out = Collected::default();
    sys::remove_bench_containers();
    if let Err(e) = run_selected(plan, root, mode, only, &mut out) {
        out.failures.push(e);
    }
    out.rows.sort_by_key(|r| r.id);
    (out.rows, out.failures)
}

/// The runtimes runner's rows run on: the engine's default (runc), and in
/// peers mode gVisor's runsc when the engine has it registered.
fn runtimes(mode: Mode, out: &mut Collected) -> Vec<Option<String>> {
    let mut v = vec![None];
    if mode != Mode::Peers {
        return v;
    }
    let listed = sys::docker_out(&["info", "--format", "{{json .Runtimes}}"]).unwrap_or_default();
    if listed.contains("\"runsc\"") {
        v.push(Some("runsc".to_string()));
    } else {
        for id in ["B1", "B2", "B3"] {
            out.rows.push(Row::unavailable(
                id,
                "runner docker executor on runsc",
                "runsc is not registered with the engine (.ci/run registers it: see README, gVisor)",
            ));
        }
    }
    v
}

/// The peers' drivers for B1, each with its environment up; a tool that
/// cannot start gets a row saying why.
fn start_peers(
    plan: &Plan,
    install: Result<&peers::Install, &String>,
    out: &mut Collected,
) -> Vec<peers::Peer> {
    let mut started = Vec::new();
    for tool in peers::Tool::ALL {
        let why = match install {
            Ok(install) => match peers::Peer::start(install, tool, &plan.image) {
                Ok(p) => {
                    started.push(p);
                    continue;
                }
                Err(e) => e,
            },
            Err(e) => e.clone(),
        };
        out.rows.push(Row::unavailable("B1", tool.label(""), why));
    }
    started
}

fn run_selected(
    plan: &Plan,
    root: &Path,
    mode: Mode,
    only: Option<&[String]>,
    out: &mut Collected,
) -> Result<(), String> {
    let wanted = |id: &str| {
        let in_mode = match mode {
            Mode::Peers => matches!(id, "B1" | "B2" | "B3" | "B8" | "B9"),
            Mode::Quick | Mode::Full => true,
        };
        let yes = in_mode && only.is_none_or(|o| o.iter().any(|x| x == id));
        if yes {
            eprintln!("{id}: running");
        }
        yes
    };
    let tmp = tempfile::Builder::new()
        .prefix("runner-bench-")
        .tempdir()
        .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    let install = peers::Install::find(root);
    let runtimes = runtimes(mode, out);
    if wanted("B7") {
        out.record("B7", model::b7(plan));
    }
    let rt = tokio::runtime::Runtime::new()
        .map_err(|e| format!("cannot build the Tokio runtime: {e}"))?;
    let peer =
        exec::peer_container(plan).map_err(|e| format!("cannot start the peer container: {e}"))?;
    if wanted("B1") {
        let mut started = start_peers(plan, install.as_ref(), out);
        out.record(
            "B1",
            rt.block_on(exec::b1(plan, &peer, &runtimes, &mut started)),
        );
        for p in started {
            let id = p.container.clone();
            if let Err(e) = p.close() {
                out.failures.push(format!("B1: closing a peer: {e}"));
            }
            // A tool that leaves its container is B8's finding, not a leak of the bench's.
            let _ = sys::docker_out(&["rm", "-f", &id]);
        }
    }
    if wanted("B2") {
        out.record("B2", rt.block_on(exec::b2(plan, &runtimes)));
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
    if wanted("B8") {
        out.record("B8", rt.block_on(hostile::b8_runner(plan, tmp.path())));
        out.rows.extend(hostile::b8_peers(plan, install.as_ref()));
    }
    if wanted("B9") {
        out.record("B9", calls::b9(plan, tmp.path(), install.as_ref()));
    }
    if wanted("B3") {
        if mode == Mode::Peers {
            out.rows.extend(harbor::b3_harbor(plan, root, tmp.path()));
            if runtimes.len() > 1 {
                out.record("B3", suite::b3_runtimes(plan, tmp.path(), &runtimes));
            }
        } else {
            out.record("B3", suite::b3(plan, tmp.path()));
        }
    }
    Ok(())
}
