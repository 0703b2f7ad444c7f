//! One grader's verdict for one trial, read from each grader's own output.
//!
//! Harbor has no pass/fail of its own: a trial has rewards (reward.json's
//! metrics, or `{"reward": x}` from reward.txt) or an exception. The mapping
//! to runner's statuses: **pass** when Harbor holds the rewards valid
//! (`reward_valid`: rewards and no exception whose policy voids them) and
//! every reward is >= 1; **fail** when they are valid and one is < 1 (an
//! agent-side exception that keeps the rewards, such as AgentTimeoutError or
//! NonZeroAgentExitCodeError, is graded by them, as Harbor grades it);
//! **error** otherwise, with the exception's type: RewardFileNotFoundError,
//! RewardFileEmptyError, VerifierOutputParseError, VerifierTimeoutError and
//! the environment's (build, start, setup) errors.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Pass(Vec<(String, f64)>),
    Fail(Vec<(String, f64)>),
    /// The exception's type (Harbor), or runner's error reason.
    Error(String),
}

impl Verdict {
    pub fn class(&self) -> &'static str {
        match self {
            Verdict::Pass(_) => "pass",
            Verdict::Fail(_) => "fail",
            Verdict::Error(_) => "error",
        }
    }

    /// `pass`, `fail` or `error:ExceptionType`: what the differences file names.
    pub fn harbor_text(&self) -> String {
        match self {
            Verdict::Error(e) => format!("error:{e}"),
            v => v.class().to_string(),
        }
    }

    /// `pass`, `fail` or `error`.
    pub fn runner_text(&self) -> String {
        self.class().to_string()
    }
}

/// Harbor's verdict from a trial's result.json.
pub fn harbor_verdict(result: &Value) -> Verdict {
    let rewards: Vec<(String, f64)> = result["verifier_result"]["rewards"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_f64().unwrap_or(f64::NAN)))
                .collect()
        })
        .unwrap_or_default();
    let valid = result["reward_valid"].as_bool() == Some(true);
    if valid && !rewards.is_empty() {
        if rewards.iter().all(|(_, r)| *r >= 1.0) {
            Verdict::Pass(rewards)
        } else {
            Verdict::Fail(rewards)
        }
    } else {
        Verdict::Error(
            result["exception_info"]["exception_type"]
                .as_str()
                .unwrap_or("NoRewards")
                .to_string(),
        )
    }
}

/// runner's verdicts from its `--json` report, by task.
pub fn runner_verdicts(report: &Value) -> Vec<(String, Verdict)> {
    report["attempts"]
        .as_array()
        .expect("the report's attempts")
        .iter()
        .map(|a| {
            let task = a["task"].as_str().expect("an attempt's task").to_string();
            let reward = vec![(
                "reward".to_string(),
                a["reward"].as_f64().unwrap_or(f64::NAN),
            )];
            let v = match a["status"].as_str() {
                Some("pass") => Verdict::Pass(reward),
                Some("fail") => Verdict::Fail(reward),
                Some("error") => Verdict::Error(a["error"].to_string()),
                other => panic!("attempt of {task} has status {other:?}: {a}"),
            };
            (task, v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn harbor_rewards_and_exceptions_map_to_statuses() {
        let r = |rewards: Value, valid: bool, exc: Value| {
            harbor_verdict(&json!({"verifier_result": {"rewards": rewards},
                "reward_valid": valid, "exception_info": exc}))
        };
        assert_eq!(r(json!({"reward": 1.0}), true, Value::Null).class(), "pass");
        assert_eq!(
            r(json!({"a": 1.0, "b": 0.0}), true, Value::Null).class(),
            "fail"
        );
        assert_eq!(r(json!({"reward": 0.5}), true, Value::Null).class(), "fail");
        assert_eq!(
            r(
                json!({"reward": 1.0}),
                true,
                json!({"exception_type": "AgentTimeoutError"})
            )
            .class(),
            "pass"
        );
        assert_eq!(
            harbor_verdict(&json!({"verifier_result": null, "reward_valid": false,
                "exception_info": {"exception_type": "RewardFileNotFoundError"}}))
            .harbor_text(),
            "error:RewardFileNotFoundError"
        );
        assert_eq!(
            r(
                json!({"reward": 1.0}),
                false,
                json!({"exception_type": "VerifierTimeoutError"})
            )
            .harbor_text(),
            "error:VerifierTimeoutError"
        );
    }
}
