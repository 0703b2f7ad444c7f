//! Builds the in-sandbox supervisor (sandbox/supervisor) as a static
//! binary for the target runner is built for, and leaves it in OUT_DIR for
//! `include_bytes!` (src/exec/supervisor/binary.rs). Static, so it runs
//! in any image, whatever libc it has or lacks. A nested cargo with its
//! own target directory: `-C target-feature=+crt-static` must reach the
//! supervisor only (proc-macros cannot be static), which an explicit
//! `--target` guarantees.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=sandbox/supervisor/src");
    println!("cargo:rerun-if-changed=sandbox/supervisor/Cargo.toml");
    println!("cargo:rerun-if-changed=Cargo.lock");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    let target = std::env::var("TARGET").unwrap_or_default();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let target_dir = root.join("target").join("supervisor");
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args([
            "build",
            "--offline",
            "--locked",
            "--release",
            "-p",
            "runner-supervisor",
        ])
        .args(["--bin", "runner-supervisor", "--target", &target])
        .arg("--target-dir")
        .arg(&target_dir)
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols")
        // What the outer cargo set for its own crates must not leak in.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_MAKEFLAGS")
        .env_remove("MAKEFLAGS")
        .env_remove("MFLAGS")
        .env_remove("CLIPPY_ARGS")
        .env_remove("CARGO_PRIMARY_PACKAGE");
    let status = match cmd.status() {
        Ok(s) => s,
        Err(e) => panic!("cannot run cargo to build the supervisor: {e}"),
    };
    if !status.success() {
        panic!("building the supervisor (sandbox/supervisor) failed: {status}");
    }
    let built = target_dir
        .join(&target)
        .join("release")
        .join("runner-supervisor");
    let dest = out.join("runner-supervisor");
    let bytes = match std::fs::read(&built) {
        Ok(b) => b,
        Err(e) => panic!("cannot read {}: {e}", built.display()),
    };
    if let Err(e) = std::fs::write(&dest, &bytes) {
        panic!("cannot write {}: {e}", dest.display());
    }
    // Names the installed copy, so each build gets its own.
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    println!("cargo:rustc-env=RUNNER_SUPERVISOR_HASH={hash:016x}");
}
