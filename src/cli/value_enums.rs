//! clap's names and help for the domain's choices (`--provider`,
//! `--executor`, `--network`...): the types themselves stay free of clap.

use clap::ValueEnum;
use clap::builder::PossibleValue;

use crate::approve::ApproveMode;
use crate::backend_kind::BackendKind;
use crate::eval::settings::AgentKind;
use crate::exec::backend::{Network, WorkspaceMode};
use crate::exec::shell::ShellMode;
use crate::model::provider::Provider;

/// Implements `ValueEnum` for a domain type: its variants and each one's
/// name and help.
macro_rules! value_enum {
    ($ty:ty, $all:expr, $($v:pat => ($name:literal, $help:expr)),+ $(,)?) => {
        impl ValueEnum for $ty {
            fn value_variants<'a>() -> &'a [Self] {
                &$all
            }
            fn to_possible_value(&self) -> Option<PossibleValue> {
                Some(match *self {
                    $($v => PossibleValue::new($name).help($help),)+
                })
            }
        }
    };
}

value_enum!(Provider, Provider::ALL,
    Provider::Anthropic => ("anthropic", Provider::Anthropic.info().about),
    Provider::Openai => ("openai", Provider::Openai.info().about),
    Provider::Scripted => ("scripted", Provider::Scripted.info().about),
);
value_enum!(BackendKind, BackendKind::ALL,
    BackendKind::Docker => ("docker", "A hardened container per run (the default)"),
    BackendKind::Local => ("local", "A child process on this host: NOT a sandbox"),
);
value_enum!(Network, [Network::None, Network::Bridge],
    Network::None => ("none", "No network (only loopback)"),
    Network::Bridge => ("bridge", "The engine's default bridge network"),
    Network::Allowlist => ("allowlist", "Only the --allow-host names, through a filtering proxy"),
);
value_enum!(WorkspaceMode, [WorkspaceMode::Auto, WorkspaceMode::Bind, WorkspaceMode::Copy],
    WorkspaceMode::Auto => ("auto", "Bind mount for a local engine, copy for a remote one"),
    WorkspaceMode::Bind => ("bind", "Bind mount"),
    WorkspaceMode::Copy => ("copy", "Copied in at the start and back at the end"),
);
value_enum!(ShellMode, ShellMode::ALL,
    ShellMode::Fresh => ("fresh", "Each command starts in the workdir with the sandbox's environment"),
    ShellMode::Persistent => ("persistent", "cd, export and unset carry over to the next commands"),
);
value_enum!(ApproveMode, ApproveMode::ALL,
    ApproveMode::Never => ("never", "Run every command without asking (the default)"),
    ApproveMode::Risky => ("risky", "Ask before risky commands (the deny list's patterns and the risky list)"),
    ApproveMode::Always => ("always", "Ask before every command"),
);
value_enum!(AgentKind, AgentKind::ALL,
    AgentKind::Model => ("model", "The runner loop with the configured model"),
    AgentKind::Oracle => ("oracle", "The task's reference solution, solution/solve.sh"),
    AgentKind::Nop => ("nop", "Nothing: checks that the untouched start fails"),
);
