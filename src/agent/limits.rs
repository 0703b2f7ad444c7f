//! Run limits, checked before each model call.

use std::time::Duration;

use super::Conversation;
use crate::event::Outcome;

/// The limits of a run; `None` means unlimited.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    /// Model calls.
    pub max_steps: Option<u32>,
    /// Wall time of the whole run.
    pub max_time: Option<Duration>,
    /// Spend in USD, from token usage and the price table.
    pub max_cost_usd: Option<f64>,
}

impl Limits {
    /// The limit that ends the run before another model call, if any.
    pub fn check(&self, convo: &Conversation) -> Option<Outcome> {
        let steps = convo.steps.saturating_sub(convo.replayed_steps);
        if self.max_steps.is_some_and(|max| steps >= max) {
            return Some(Outcome::StepLimit);
        }
        if self
            .max_time
            .is_some_and(|max| convo.started.elapsed() >= max)
        {
            return Some(Outcome::TimeLimit);
        }
        if self.max_cost_usd.is_some_and(|max| convo.cost_usd >= max) {
            return Some(Outcome::CostLimit);
        }
        None
    }

    /// A one-line explanation of why the run stopped.
    pub fn describe(&self, outcome: Outcome) -> String {
        match outcome {
            Outcome::StepLimit => format!(
                "stopped: reached the step limit ({} model calls); raise --max-steps",
                self.max_steps.unwrap_or(0)
            ),
            Outcome::TimeLimit => format!(
                "stopped: reached the time limit ({}s); raise --max-time",
                self.max_time.map_or(0, |d| d.as_secs())
            ),
            Outcome::CostLimit => format!(
                "stopped: reached the cost limit (${:.4}); raise --max-cost",
                self.max_cost_usd.unwrap_or(0.0)
            ),
            other => format!("stopped: {}", other.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_names_its_outcome() {
        let mut c = Conversation::default();
        let l = Limits {
            max_steps: Some(2),
            max_time: None,
            max_cost_usd: Some(0.5),
        };
        assert_eq!(l.check(&c), None);
        c.steps = 2;
        assert_eq!(l.check(&c), Some(Outcome::StepLimit));
        c.steps = 0;
        c.cost_usd = 0.5;
        assert_eq!(l.check(&c), Some(Outcome::CostLimit));
        // After a continuation only the calls made since count.
        c.cost_usd = 0.0;
        c.steps = 5;
        c.replayed_steps = 4;
        assert_eq!(l.check(&c), None);
        c.steps = 6;
        assert_eq!(l.check(&c), Some(Outcome::StepLimit));
        let t = Limits {
            max_time: Some(Duration::ZERO),
            ..Limits::default()
        };
        assert_eq!(t.check(&Conversation::default()), Some(Outcome::TimeLimit));
    }
}
