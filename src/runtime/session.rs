//! A session: the tools, loop settings and pricing of a configuration on
//! a started sandbox, ready to run tasks (one, or a conversation's turns).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, AgentSettings, Conversation, Limits, RunEnd};
use crate::config::{Config, ToolKind};
use crate::event::{Event, Sink};
use crate::exec::Executor;
use crate::exec::ExecutorExt;
use crate::hostfs::OutputDir;
use crate::model::provider::Provider;
use crate::model::{Model, Usage};
use crate::tools::Registry;
use crate::tools::bash::{BashSettings, BashTool};
use crate::tools::edit::EditTool;

/// Prices one model call's usage.
type Pricer = Box<dyn Fn(&Usage) -> f64 + Send + Sync>;

/// The tools and loop settings of one run.
pub struct Session {
    tools: Registry,
    settings: AgentSettings,
    cost: Pricer,
    outputs: Option<OutputDir>,
}

impl Session {
    /// Wires the configured tools (`bash`, `edit`) to `executor` under
    /// the configuration's policy and limits; `warn` hears what the user
    /// should know (an unknown price).
    pub fn new(
        config: &Config,
        executor: Arc<dyn Executor>,
        outputs: Option<OutputDir>,
        warn: &(dyn Fn(&str) + Sync),
    ) -> Session {
        let system = config.system_prompt.clone().unwrap_or_else(|| {
            crate::prompt::system_prompt(&executor.workdir(), &config.tools, config.shell)
        });
        let mut tools = Registry::new();
        for kind in &config.tools {
            match kind {
                ToolKind::Bash => tools.register(Box::new(BashTool::new(
                    executor.clone(),
                    config.policy.clone(),
                    BashSettings {
                        default_timeout: config.timeout,
                        max_timeout: config.max_command_timeout,
                        max_output_bytes: config.output_limit_bytes,
                        shell: config.shell,
                        native: config.provider == Provider::Anthropic,
                    },
                ))),
                ToolKind::Edit => tools.register(Box::new(EditTool::new(executor.clone()))),
            }
        }
        let settings = AgentSettings {
            system,
            limits: Limits {
                max_steps: Some(config.max_steps),
                max_time: config.max_time,
                max_cost_usd: config.max_cost_usd,
            },
            max_tokens: config.max_tokens,
            context_window_tokens: config.context_window_tokens,
            context_window_auto: config.context_window_auto,
        };
        let price = config
            .price
            .or_else(|| crate::model::pricing::lookup(&config.model));
        if price.is_none() && config.provider != Provider::Scripted {
            warn(&format!(
                "warning: no price known for model '{}': cost counts as $0; pass --price to set one",
                config.model
            ));
        }
        Session {
            tools,
            settings,
            cost: Box::new(move |u: &Usage| price.map_or(0.0, |p| p.cost_usd(u))),
            outputs,
        }
    }

    /// The loop over `model` with this session's tools.
    pub fn agent<'a>(&'a self, model: &'a dyn Model) -> Agent<'a> {
        Agent {
            model,
            tools: &self.tools,
            settings: &self.settings,
            cost: &self.cost,
            outputs: self.outputs.clone(),
            approver: None,
        }
    }

    /// Runs `turn` (which drives the agent) so that a bug that panics in
    /// the loop, a tool or a model client ends the run as an error: the
    /// caller still shuts the sandbox down and records run_finished.
    /// Nothing the loop shares is left half-updated in a way that
    /// matters: the conversation is only read for its totals.
    pub async fn guarded<F>(turn: F) -> RunEnd
    where
        F: std::future::Future<Output = RunEnd>,
    {
        AssertUnwindSafe(turn)
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| RunEnd::from_panic(panic.as_ref()))
    }
}

/// Adds `text` as the next user turn of `convo` (recorded through
/// `sink`) and runs `agent` on it, a panic caught as [`Session::guarded`]
/// says: the one way every front end runs a task's turn.
pub async fn run_turn(
    agent: &Agent<'_>,
    convo: &mut Conversation,
    text: String,
    sink: Sink<'_>,
    cancel: &CancellationToken,
) -> RunEnd {
    Session::guarded(async {
        sink(&Event::UserMessage { text: text.clone() });
        crate::agent::replay::push_user_text(&mut convo.messages, text);
        agent.run(convo, sink, cancel).await
    })
    .await
}
