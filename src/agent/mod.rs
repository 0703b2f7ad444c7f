//! The ReAct loop: send the conversation and the tool schemas to the model,
//! run the tool calls it answers with, feed the results back, until it
//! answers without tools or a limit is reached. It emits events and never
//! prints.

pub mod call_ids;
pub mod context;
mod limits;
pub mod replay;

use crate::hostfs::OutputDir;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

pub use limits::Limits;

use crate::approve::{self, Answer, Approver, Review};
use crate::event::{Event, Outcome, Sink};
use crate::exec::ExecError;
use crate::model::{
    Block, Message, Model, ModelError, ModelProgress, ModelReply, ModelRequest, Role, StopReason,
    ToolSpec, Usage,
};
use crate::tools::{Registry, ToolContext};

/// How many replies in a row may be cut off by `max_tokens` before the run
/// gives up.
pub const MAX_CONSECUTIVE_CUTOFFS: u32 = 3;

/// Empty replies (see [`is_empty_reply`]) asked again before the run ends
/// with [`Outcome::EmptyReply`]: one, as a broken upstream body (seen
/// through a LiteLLM proxy) can be a one-off.
pub const EMPTY_REPLY_RETRIES: u32 = 1;

/// What to do when even the newest turn does not fit the window.
pub const CONTEXT_HINT: &str = "give the server a larger context (llama.cpp: --n_ctx; vLLM: --max-model-len), lower --max-tokens or --output-limit, or pass --context-window N below the server's size";

/// The user turn the loop adds after a reply cut off by `max_tokens`.
pub const CUT_OFF_NOTE: &str =
    "Your reply was cut off by the max_tokens limit. Continue, more briefly.";

/// A reply that says nothing: no text, no tool call, no other block, and
/// 0 output tokens. Ending the run as `completed` on it would count a
/// broken upstream as an answer.
pub fn is_empty_reply(reply: &ModelReply) -> bool {
    reply.usage.output_tokens == 0
        && reply
            .message
            .content
            .iter()
            .all(|b| matches!(b, Block::Text { text } if text.trim().is_empty()))
}

/// Settings of the loop.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    pub system: String,
    pub limits: Limits,
    pub max_tokens: u32,
    pub context_window_tokens: u64,
    /// `--context-window auto`: ask the server first; the tokens above
    /// are the fallback.
    pub context_window_auto: bool,
}

/// Prices one model call's usage in USD.
pub type CostFn<'a> = &'a (dyn Fn(&Usage) -> f64 + Send + Sync);

/// The state of a conversation; kept across REPL turns.
#[derive(Debug, Clone)]
pub struct Conversation {
    pub messages: Vec<Message>,
    pub steps: u32,
    pub usage: Usage,
    pub cost_usd: f64,
    pub started: Instant,
    /// Model calls made before a continuation (`runner continue`): step
    /// numbers go on from them, the step limit counts only the calls after.
    pub replayed_steps: u32,
    /// The context window learned from the server (its answer to `auto`,
    /// or the limit a "prompt is too long" error stated), over the
    /// configured one.
    pub context_window: Option<u64>,
}

impl Default for Conversation {
    fn default() -> Self {
        Conversation {
            messages: Vec::new(),
            steps: 0,
            usage: Usage::default(),
            cost_usd: 0.0,
            started: Instant::now(),
            replayed_steps: 0,
            context_window: None,
        }
    }
}

/// How one `run` ended.
#[derive(Debug, Clone)]
pub struct RunEnd {
    pub outcome: Outcome,
    pub error: Option<String>,
    pub final_text: Option<String>,
    /// What the user can do about an error, when there is something.
    pub hint: Option<String>,
}

impl RunEnd {
    fn new(outcome: Outcome) -> Self {
        RunEnd {
            outcome,
            error: None,
            final_text: None,
            hint: None,
        }
    }

    fn error(message: String) -> Self {
        RunEnd {
            outcome: Outcome::Error,
            error: Some(message),
            final_text: None,
            hint: None,
        }
    }

    /// A panic caught around the loop: a bug in runner, ended as an error
    /// so the run still finishes and records `run_finished`.
    pub fn from_panic(payload: &(dyn std::any::Any + Send)) -> Self {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        RunEnd::error(format!(
            "internal error: {what} (a bug in runner; please report it)"
        ))
    }

    fn model_error(e: &ModelError) -> Self {
        RunEnd {
            hint: e.hint().map(|h| crate::hints::model(&h)),
            ..RunEnd::error(e.to_string())
        }
    }
}

/// The loop's collaborators.
pub struct Agent<'a> {
    pub model: &'a dyn Model,
    pub tools: &'a Registry,
    pub settings: &'a AgentSettings,
    pub cost: CostFn<'a>,
    /// Where full command outputs are written (one file per call).
    pub outputs: Option<OutputDir>,
    /// Who approves commands before they run (`--approve`); `None`: nobody.
    pub approver: Option<&'a Approver>,
}

/// What a person decided about a tool call before it ran.
enum Approved {
    Run,
    /// Run this command line instead.
    Edited(String),
    Declined,
    /// `q`: the run stops as on Ctrl-C.
    Stopped,
}

/// What the loop remembers from one reply to the next.
#[derive(Debug, Default)]
struct LoopState {
    /// Replies in a row cut off by `max_tokens`.
    cutoffs: u32,
    /// Empty replies in a row.
    empty_replies: u32,
    /// Old outputs were trimmed after an overflow and nothing has been
    /// answered since.
    trimmed_after_overflow: bool,
    /// The no-usage notice was given.
    usage_noticed: bool,
}

impl LoopState {
    /// Makes the reply's calls one id each and says what was changed, and
    /// (once) that the server reports no usage.
    fn tidy(&mut self, reply: &mut ModelReply, sink: Sink<'_>) {
        let mut notes = call_ids::join_split_calls(&mut reply.message);
        notes.extend(call_ids::make_unique(&mut reply.message));
        for note in notes {
            sink(&Event::Notice { message: note });
        }
        if !self.usage_noticed && reply.usage == Usage::default() && !is_empty_reply(reply) {
            self.usage_noticed = true;
            sink(&Event::Notice {
                message:
                    "the server reported no token usage: tokens and cost of its replies count as 0"
                        .into(),
            });
        }
    }

    /// An empty reply: asked again once, then the run ends. `None`: ask.
    fn empty_reply(&mut self, sink: Sink<'_>) -> Option<RunEnd> {
        self.empty_replies += 1;
        if self.empty_replies > EMPTY_REPLY_RETRIES {
            return Some(RunEnd {
                outcome: Outcome::EmptyReply,
                error: Some(format!(
                    "the model sent an empty reply {} in a row (no text, no tool call, 0 output tokens)",
                    crate::plural::count(self.empty_replies, "time", "times"),
                )),
                final_text: None,
                hint: Some(
                    "the model API (or a proxy in front of it) returned nothing; check its logs, or try again later".into(),
                ),
            });
        }
        sink(&Event::Notice {
            message: "the model sent an empty reply (no text, no tool call, 0 output tokens); asking again".into(),
        });
        None
    }
}

/// What the loop does after a reply.
enum Next {
    Continue,
    End(RunEnd),
}

impl Agent<'_> {
    /// Runs the loop until the model stops calling tools, a limit is hit,
    /// the model or sandbox fails, or `cancel` fires. The last message of
    /// `convo` must be the user's.
    pub async fn run(
        &self,
        convo: &mut Conversation,
        sink: Sink<'_>,
        cancel: &CancellationToken,
    ) -> RunEnd {
        let specs = self.tools.specs();
        let tools_bytes = serde_json::to_string(&specs).map(|s| s.len()).unwrap_or(0);
        let mut state = LoopState::default();
        if self.settings.context_window_auto && convo.context_window.is_none() {
            self.ask_context_window(convo, sink).await;
        }
        loop {
            let window = match self.before_call(convo, tools_bytes, sink, cancel) {
                Ok(window) => window,
                Err(end) => return end,
            };
            convo.steps += 1;
            let step = convo.steps;
            let mut reply = match self.call_model(step, convo, &specs, sink, cancel).await {
                Ok(reply) => reply,
                Err(ModelError::Cancelled) => return RunEnd::new(Outcome::Interrupted),
                Err(e @ ModelError::PromptTooLong { .. }) => {
                    // A refused prompt is no step: the limit counts answers.
                    convo.steps -= 1;
                    match self.after_overflow(&mut state, convo, &e, window, sink) {
                        Some(end) => return end,
                        None => continue,
                    }
                }
                Err(e) => return RunEnd::model_error(&e),
            };
            state.tidy(&mut reply, sink);
            self.account(step, convo, &reply, sink);
            if is_empty_reply(&reply) {
                match state.empty_reply(sink) {
                    Some(end) => return end,
                    None => continue,
                }
            }
            state.empty_replies = 0;
            if reply.stop_reason == StopReason::ModelContextWindowExceeded
                && reply.message.tool_calls().next().is_none()
            {
                match self.after_window_exceeded(&mut state, convo, sink) {
                    Some(end) => return end,
                    None => continue,
                }
            }
            // A later overflow, many steps on, gets its own trim.
            state.trimmed_after_overflow = false;
            match self
                .handle_reply(step, convo, reply, &mut state.cutoffs, sink, cancel)
                .await
            {
                Next::Continue => {}
                Next::End(end) => return end,
            }
        }
    }

    /// Before each model call: stops on cancellation or a limit, and fits
    /// the conversation to the window (returned).
    fn before_call(
        &self,
        convo: &mut Conversation,
        tools_bytes: usize,
        sink: Sink<'_>,
        cancel: &CancellationToken,
    ) -> Result<u64, RunEnd> {
        if cancel.is_cancelled() {
            return Err(RunEnd::new(Outcome::Interrupted));
        }
        if let Some(outcome) = self.settings.limits.check(convo) {
            sink(&Event::Notice {
                message: self.settings.limits.describe(outcome),
            });
            return Err(RunEnd::new(outcome));
        }
        let window = convo
            .context_window
            .unwrap_or(self.settings.context_window_tokens);
        let elided = context::fit(
            &self.settings.system,
            &mut convo.messages,
            tools_bytes,
            window,
        );
        if elided > 0 {
            sink(&Event::Notice {
                message: format!("elided {elided} old tool outputs to fit the context window"),
            });
        }
        Ok(window)
    }

    /// A "prompt is too long" error: a stated window smaller than `window`
    /// becomes the run's; otherwise old outputs are trimmed once. `None`:
    /// ask again.
    fn after_overflow(
        &self,
        state: &mut LoopState,
        convo: &mut Conversation,
        e: &ModelError,
        window: u64,
        sink: Sink<'_>,
    ) -> Option<RunEnd> {
        if let Some(limit) = e.context_limit().filter(|l| *l < window) {
            convo.context_window = Some(limit);
            sink(&Event::Notice {
                message: format!(
                    "the server's context window is {limit} tokens (from its error); fitting the conversation to it"
                ),
            });
            return None;
        }
        if state.trimmed_after_overflow {
            return Some(RunEnd::error(format!(
                "the prompt is still too long after trimming old tool outputs: {e}"
            )));
        }
        state.trimmed_after_overflow = true;
        if self.trim_after_overflow(convo, sink) == 0 {
            return Some(RunEnd {
                hint: Some(CONTEXT_HINT.into()),
                ..RunEnd::error(format!("{e}; no old tool output is left to elide"))
            });
        }
        None
    }

    /// A reply that stopped on `model_context_window_exceeded` without a
    /// call: trimmed once, then the run ends. `None`: ask again.
    fn after_window_exceeded(
        &self,
        state: &mut LoopState,
        convo: &mut Conversation,
        sink: Sink<'_>,
    ) -> Option<RunEnd> {
        if state.trimmed_after_overflow {
            return Some(RunEnd::error(
                "the model's context window is still exceeded after trimming old tool outputs"
                    .into(),
            ));
        }
        state.trimmed_after_overflow = true;
        if self.trim_after_overflow(convo, sink) == 0 {
            return Some(RunEnd {
                hint: Some(CONTEXT_HINT.into()),
                ..RunEnd::error(
                    "the model's context window was exceeded and no old tool output is left to elide"
                        .into(),
                )
            });
        }
        None
    }

    async fn call_model(
        &self,
        step: u32,
        convo: &Conversation,
        specs: &[ToolSpec],
        sink: Sink<'_>,
        cancel: &CancellationToken,
    ) -> Result<ModelReply, ModelError> {
        sink(&Event::ModelRequest {
            step,
            messages: convo.messages.len(),
            tools: specs.len(),
            max_tokens: self.settings.max_tokens,
        });
        let progress = |p: ModelProgress| match p {
            ModelProgress::TextDelta { text } => sink(&Event::TextDelta { text }),
            ModelProgress::Retry {
                attempt,
                status,
                wait_ms,
                reason,
            } => sink(&Event::ModelRetry {
                step,
                attempt,
                status,
                wait_ms,
                reason,
            }),
        };
        let req = ModelRequest {
            system: &self.settings.system,
            messages: &convo.messages,
            tools: specs,
            max_tokens: self.settings.max_tokens,
        };
        tokio::select! {
            _ = cancel.cancelled() => Err(ModelError::Cancelled),
            r = self.model.complete(req, &progress) => r,
        }
    }

    /// After an overflow: elides every old tool output; says how many
    /// (none: nothing was trimmed, and the caller ends the run).
    fn trim_after_overflow(&self, convo: &mut Conversation, sink: Sink<'_>) -> usize {
        let n = context::trim_hard(&mut convo.messages);
        if n > 0 {
            sink(&Event::Notice {
                message: format!(
                    "the context window was exceeded: elided {n} old tool outputs and retrying once"
                ),
            });
        }
        n
    }

    /// `--context-window auto`: the server's own number, or the
    /// configured one, said either way.
    async fn ask_context_window(&self, convo: &mut Conversation, sink: Sink<'_>) {
        let fallback = self.settings.context_window_tokens;
        let message = match self.model.context_window().await {
            Some(w) => {
                convo.context_window = Some(w.tokens);
                format!("context window: {} tokens (from {})", w.tokens, w.source)
            }
            None => format!(
                "context window: the server does not say its size; using {fallback} tokens (pass --context-window N to set it)"
            ),
        };
        sink(&Event::Notice { message });
    }

    fn account(&self, step: u32, convo: &mut Conversation, reply: &ModelReply, sink: Sink<'_>) {
        let cost = (self.cost)(&reply.usage);
        convo.usage.add(&reply.usage);
        convo.cost_usd += cost;
        sink(&Event::ModelReply {
            step,
            message: reply.message.clone(),
            stop_reason: reply.stop_reason.clone(),
            usage: reply.usage,
            cost_usd: cost,
            total_cost_usd: convo.cost_usd,
        });
    }

    async fn handle_reply(
        &self,
        step: u32,
        convo: &mut Conversation,
        reply: ModelReply,
        cutoffs: &mut u32,
        sink: Sink<'_>,
        cancel: &CancellationToken,
    ) -> Next {
        let text = reply.message.text();
        let has_calls = reply.message.tool_calls().next().is_some();
        if reply.stop_reason == StopReason::Refusal {
            return Next::End(RunEnd {
                outcome: Outcome::Refused,
                error: None,
                final_text: Some(text),
                hint: None,
            });
        }
        let cut_off = reply.stop_reason == StopReason::MaxTokens;
        if cut_off {
            *cutoffs += 1;
            if *cutoffs > MAX_CONSECUTIVE_CUTOFFS {
                return Next::End(RunEnd::error(format!(
                    "the model's reply was cut off by max_tokens {} times in a row; raise --max-tokens",
                    *cutoffs
                )));
            }
        } else {
            *cutoffs = 0;
        }
        if !has_calls {
            if reply.message.content.is_empty() && !cut_off {
                return Next::End(RunEnd {
                    outcome: Outcome::Completed,
                    error: None,
                    final_text: Some(text),
                    hint: None,
                });
            }
            convo.messages.push(reply.message);
            return match reply.stop_reason {
                StopReason::PauseTurn => Next::Continue,
                StopReason::MaxTokens => {
                    let note = CUT_OFF_NOTE;
                    sink(&Event::Notice {
                        message:
                            "the reply was cut off by max_tokens; asking the model to continue"
                                .into(),
                    });
                    convo.messages.push(Message::user_text(note));
                    Next::Continue
                }
                _ => Next::End(RunEnd {
                    outcome: Outcome::Completed,
                    error: None,
                    final_text: Some(text),
                    hint: None,
                }),
            };
        }
        let (results, fatal) = self
            .run_tools(step, &reply.message, cut_off, sink, cancel)
            .await;
        convo.messages.push(reply.message);
        convo.messages.push(Message {
            role: Role::User,
            content: results,
        });
        if let Some(e) = fatal {
            let hint = match e {
                ExecError::SandboxDied { .. } => Some(
                    "the container was killed or ran out of memory; its workspace is kept; \
                     `runner gc` removes anything left"
                        .to_string(),
                ),
                ExecError::Unrecoverable { .. } => Some(
                    "a command left processes that could not be killed, so no further command \
                     was run; the container was removed; its workspace is kept"
                        .to_string(),
                ),
                _ => None,
            };
            return Next::End(RunEnd {
                hint,
                ..RunEnd::error(e.to_string())
            });
        }
        if cancel.is_cancelled() {
            return Next::End(RunEnd::new(Outcome::Interrupted));
        }
        Next::Continue
    }

    /// Asks the approver, if any, about the command `call` would run, and
    /// records the decision. `q` cancels the run as Ctrl-C does: the
    /// calls after it are not run and the run ends `interrupted`.
    async fn approve(
        &self,
        step: u32,
        call: crate::model::ToolCall<'_>,
        sink: Sink<'_>,
        cancel: &CancellationToken,
    ) -> Approved {
        let Some(approver) = self.approver else {
            return Approved::Run;
        };
        let Some(command) = self.tools.command(call) else {
            return Approved::Run;
        };
        let decision = match approver.review(&command, cancel).await {
            Review::NotAsked => return Approved::Run,
            Review::Interrupted => return Approved::Stopped,
            Review::Decided(d) => d,
        };
        sink(&Event::Approval {
            step,
            id: call.id.to_string(),
            command,
            rule: decision.rule.to_string(),
            answer: decision.answer,
            asked: decision.asked,
            edited: decision.edited.clone(),
        });
        match (decision.answer, decision.edited) {
            (Answer::Yes | Answer::All, _) => Approved::Run,
            (Answer::Edit, Some(edited)) => Approved::Edited(edited),
            (Answer::Edit, None) | (Answer::No, _) => Approved::Declined,
            (Answer::Quit, _) => {
                cancel.cancel();
                Approved::Stopped
            }
        }
    }

    /// Runs `call` with its command replaced by the person's `command`;
    /// the model is told what ran.
    async fn run_edited(
        &self,
        call: crate::model::ToolCall<'_>,
        command: &str,
        ctx: &ToolContext,
    ) -> crate::tools::ToolOutcome {
        let Some(input) = self.tools.with_command(call, command) else {
            return crate::tools::ToolOutcome::error(approve::DECLINED);
        };
        let edited = crate::model::ToolCall {
            input: &input,
            ..call
        };
        let mut outcome = self.tools.dispatch(edited, ctx).await;
        outcome.content = format!(
            "[the user edited the command before it ran; it ran as: {command}]\n{}",
            outcome.content
        );
        outcome
    }

    /// Runs every tool call of `message` in order; each gets exactly one
    /// result. A call cut off by max_tokens is never run.
    async fn run_tools(
        &self,
        step: u32,
        message: &Message,
        cut_off: bool,
        sink: Sink<'_>,
        cancel: &CancellationToken,
    ) -> (Vec<Block>, Option<ExecError>) {
        let mut results = Vec::new();
        let mut fatal = None;
        for (idx, call) in message.tool_calls().enumerate() {
            sink(&Event::ToolCall {
                step,
                id: call.id.to_string(),
                name: call.name.to_string(),
                input: call.input.clone(),
            });
            let skip_reason = if fatal.is_some() {
                Some("error: not run: the sandbox failed on an earlier call.")
            } else if cancel.is_cancelled() {
                Some("error: not run: the run was interrupted by the user.")
            } else if cut_off && call.raw_input.is_some() {
                Some(
                    "error: this tool call was cut off by the max_tokens limit, so it was not run. \
                     Send it again, shorter.",
                )
            } else {
                None
            };
            let full_output = self
                .outputs
                .as_ref()
                .map(|d| d.file(&format!("step-{step:04}-call-{idx}.txt")));
            let outcome = match skip_reason {
                Some(reason) => crate::tools::ToolOutcome::error(reason),
                None => {
                    let ctx = ToolContext {
                        cancel: cancel.clone(),
                        full_output: full_output.clone(),
                    };
                    match self.approve(step, call, sink, cancel).await {
                        Approved::Run => self.tools.dispatch(call, &ctx).await,
                        Approved::Edited(command) => self.run_edited(call, &command, &ctx).await,
                        Approved::Declined => crate::tools::ToolOutcome::error(approve::DECLINED),
                        Approved::Stopped => crate::tools::ToolOutcome::error(approve::STOPPED),
                    }
                }
            };
            let exec = outcome.exec.as_ref();
            sink(&Event::ToolResult {
                step,
                id: call.id.to_string(),
                name: call.name.to_string(),
                is_error: outcome.is_error,
                exit_code: exec.and_then(|e| e.exit_code),
                timed_out: exec.is_some_and(|e| e.timed_out),
                oom_killed: exec.is_some_and(|e| e.oom_killed),
                bytes_seen: exec.map_or(0, |e| e.bytes_seen),
                duration_ms: exec.map_or(0, |e| e.duration_ms),
                output: outcome.content.clone(),
                full_output: full_output
                    .map(|f| f.path())
                    .filter(|p| exec.is_some() && p.exists())
                    .map(|p| p.display().to_string()),
            });
            results.push(Block::ToolResult {
                tool_use_id: call.id.to_string(),
                content: outcome.content,
                is_error: outcome.is_error,
            });
            if fatal.is_none() {
                fatal = outcome.fatal;
            }
        }
        (results, fatal)
    }
}
