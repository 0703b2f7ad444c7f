//! The `runner` binary: parse, call `run`, map the result to an exit code.

use std::process::ExitCode;

use clap::Parser;

use runner::cli::{Cli, Command};
use runner::runtime::Shutdown;

/// Runs before `main` (and before the async runtime starts its threads):
/// a Ctrl-C from then on is noted, not fatal (see `catch_early_signals`).
#[used]
#[unsafe(link_section = ".init_array")]
static CATCH_EARLY_SIGNALS: extern "C" fn() = runner::runtime::signals::catch_early_signals;

#[tokio::main]
async fn main() -> ExitCode {
    // First, before any work: from here on Ctrl-C and SIGTERM cancel the
    // run (which still writes its trajectory) instead of killing runner.
    let shutdown = Shutdown::install();
    // Precedence: flag > environment > .env (dotenvy never overrides).
    let _ = dotenvy::dotenv();
    runner::terminal::init_tracing();
    runner::terminal::install_panic_hook();
    let cli = Cli::parse();
    let result = match cli.command {
        None => runner::app::run(cli.run.builder(), cli.run.task, shutdown.token()).await,
        Some(Command::Gc(_)) => runner::gc::run()
            .await
            .map(|clean| if clean { 0 } else { 2 }),
        Some(Command::Eval(args)) => runner::eval::run(args.settings(), shutdown.token()).await,
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            failure.print();
            ExitCode::from(2)
        }
    }
}
