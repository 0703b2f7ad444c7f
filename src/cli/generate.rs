//! What clap generates from runner's own flags: shell completion scripts
//! and man pages.

use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory};

use super::Cli;
use crate::hints::Failure;

/// Flags of `runner completions`.
#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Flags of `runner man`.
#[derive(Debug, Clone, Args)]
pub struct ManArgs {
    /// Write every page into this directory instead.
    pub dir: Option<PathBuf>,
}

/// `runner completions SHELL`: the script on stdout.
pub fn completions(shell: clap_complete::Shell) -> Result<u8, Failure> {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "runner", &mut std::io::stdout());
    Ok(0)
}

/// `runner man [DIR]`: runner.1 on stdout, or every page into DIR.
pub fn man(dir: Option<&Path>) -> Result<u8, Failure> {
    let written = match dir {
        None => clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()),
        Some(d) => clap_mangen::generate_to(Cli::command(), d),
    };
    written.map(|()| 0).map_err(|e| {
        Failure::new(
            format!(
                "cannot write the man pages{}: {e}",
                dir.map(|d| format!(" into {}", d.display()))
                    .unwrap_or_default()
            ),
            Some("give a directory that exists and is writable".into()),
        )
    })
}
