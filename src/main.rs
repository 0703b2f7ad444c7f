//! The `runner` binary: parse, call `run`, map the result to an exit code.

use std::process::ExitCode;

use clap::Parser;

use runner::cli::{Cli, Command, EvalAction};
use runner::runtime::Shutdown;

/// Runs before `main` (and before the async runtime starts its threads):
/// a Ctrl-C from then on is noted, not fatal (see `catch_early_signals`).
#[used]
#[unsafe(link_section = ".init_array")]
static CATCH_EARLY_SIGNALS: extern "C" fn() = runner::runtime::signals::catch_early_signals;

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let code = runtime.block_on(run());
    // Not waiting for blocking reads nobody can cancel (the REPL's stdin
    // after Ctrl-C): everything that matters was written before.
    runtime.shutdown_background();
    code
}

async fn run() -> ExitCode {
    // First, before any work: from here on Ctrl-C and SIGTERM cancel the
    // run (which still writes its trajectory) instead of killing runner.
    let shutdown = Shutdown::install();
    // Precedence: flag > environment > .env (dotenvy never overrides).
    let _ = dotenvy::dotenv();
    runner::terminal::init_tracing();
    runner::terminal::install_panic_hook();
    let cli = Cli::parse();
    let cancel = shutdown.token();
    let result = match cli.command {
        None => runner::app::run(cli.run.builder(), cli.run.task, cancel).await,
        // A sweep has nothing to save: Ctrl-C stops it where it is.
        Some(Command::Gc(_)) => tokio::select! {
            r = runner::gc::run() => r.map(|clean| if clean { 0 } else { 2 }),
            _ = cancel.cancelled() => Ok(130),
        },
        Some(Command::Eval(args)) => match &args.action {
            Some(EvalAction::Merge(m)) => runner::eval::merge::run(&m.settings()),
            None => {
                let typed = runner::cli::recorded::typed_after_eval();
                match runner::cli::recorded::complete(*args, typed.clone()) {
                    Ok(args) => {
                        let mut settings = args.settings();
                        settings.invocation = typed;
                        runner::eval::run(settings, cancel).await
                    }
                    Err(f) => Err(f),
                }
            }
        },
        Some(Command::View(args)) => {
            runner::view::run(&args.dir, args.output.as_deref(), args.open)
        }
        Some(Command::Continue(args)) => runner::continuation::run(&args, cancel).await,
        Some(Command::Completions(args)) => runner::cli::generate::completions(args.shell),
        Some(Command::Man(args)) => runner::cli::generate::man(args.dir.as_deref()),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            failure.print();
            ExitCode::from(2)
        }
    }
}
