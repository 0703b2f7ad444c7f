//! How an attempt is graded: where tests/test.sh runs.

use serde::Serialize;

/// Where the verifier runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GradingMode {
    /// test.sh in the agent's own container after the agent phase, its
    /// services still running (Harbor's default).
    Shared,
    /// A fresh container of the verifier environment, with the task's
    /// artifacts handed over (Harbor's separate mode).
    Separate,
    /// A fresh container from a commit of the agent's container: the whole
    /// filesystem, no processes.
    Snapshot,
    /// The pristine image plus only WORKDIR.
    Isolated,
}

impl GradingMode {
    pub const ALL: [GradingMode; 4] = [
        GradingMode::Shared,
        GradingMode::Separate,
        GradingMode::Snapshot,
        GradingMode::Isolated,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            GradingMode::Shared => "shared",
            GradingMode::Separate => "separate",
            GradingMode::Snapshot => "snapshot",
            GradingMode::Isolated => "isolated",
        }
    }
}

impl std::str::FromStr for GradingMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        GradingMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                format!("'{s}' is not a grading mode (shared, separate, snapshot, isolated)")
            })
    }
}
