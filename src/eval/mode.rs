//! How an attempt is graded: where `tests/test.sh` runs relative to the
//! container the agent worked in.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where the verifier runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GradingMode {
    /// `tests/test.sh` runs in the agent's own container after the agent
    /// phase, with the services the agent started still running (Harbor's
    /// default).
    Shared,
    /// A fresh container of the verifier's environment, with the task's
    /// artifacts handed over (Harbor's `environment_mode = "separate"`).
    Separate,
    /// A fresh container from a commit of the agent's container: its whole
    /// filesystem, none of its processes.
    Snapshot,
    /// The pristine task image plus only WORKDIR from the agent's container
    /// (runner's previous behaviour).
    Isolated,
}

impl GradingMode {
    /// Every mode, in the order they are documented.
    pub const ALL: [GradingMode; 4] = [
        GradingMode::Shared,
        GradingMode::Separate,
        GradingMode::Snapshot,
        GradingMode::Isolated,
    ];

    /// The name used in task.toml, on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            GradingMode::Shared => "shared",
            GradingMode::Separate => "separate",
            GradingMode::Snapshot => "snapshot",
            GradingMode::Isolated => "isolated",
        }
    }
}

impl fmt::Display for GradingMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a grading mode; its message lists the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a grading mode: expected one of shared, separate, snapshot, isolated")]
pub struct UnknownGradingMode(pub String);

impl FromStr for GradingMode {
    type Err = UnknownGradingMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        GradingMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| UnknownGradingMode(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_lists_all() {
        for m in GradingMode::ALL {
            assert_eq!(m.as_str().parse::<GradingMode>(), Ok(m));
            assert_eq!(
                serde_json::to_value(m).expect("serializes"),
                serde_json::json!(m.as_str())
            );
        }
        let err = "Shared".parse::<GradingMode>().expect_err("case matters");
        let msg = err.to_string();
        for m in GradingMode::ALL {
            assert!(msg.contains(m.as_str()), "{msg}");
        }
    }
}
