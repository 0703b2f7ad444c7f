//! The `runner` binary: parse, call `run`, map the result to an exit code.

use clap::Parser;

use runner::cli::{Cli, Command};

#[tokio::main]
async fn main() {
    // Precedence: flag > environment > .env (dotenvy never overrides).
    let _ = dotenvy::dotenv();
    runner::terminal::init_tracing();
    runner::terminal::install_panic_hook();
    let cli = Cli::parse();
    let code = match cli.command {
        None => runner::app::run(cli.run).await,
        Some(Command::Gc(_)) => runner::gc::run().await,
        Some(Command::Eval(args)) => runner::eval::run(*args).await,
    };
    std::process::exit(code);
}
