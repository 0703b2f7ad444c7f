//! The typed events a run emits. The loop only emits; the human renderer,
//! the JSONL renderer and the trajectory writer all consume the same stream.

use serde::Serialize;
use serde_json::Value;

use crate::approve::Answer;
use crate::model::{Message, StopReason, Usage};
use crate::run_header::StartedConfig;

/// The trajectory format this binary writes (in `run_started`) and the
/// newest it reads back (`runner continue`). A trajectory without one is
/// version 1. Raised only when a reader of the old format would misread
/// the new one.
pub const TRAJECTORY_FORMAT_VERSION: u32 = 1;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The model answered without tool calls.
    Completed,
    StepLimit,
    TimeLimit,
    CostLimit,
    /// The model refused the task.
    Refused,
    /// Ctrl-C.
    Interrupted,
    /// The model API, the sandbox or the configuration failed.
    Error,
    /// The model answered nothing (no text, no tool call, 0 output
    /// tokens), twice in a row: a broken upstream, not an answer.
    EmptyReply,
}

impl Outcome {
    /// The process exit code for this outcome (documented in the README).
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Completed => 0,
            Outcome::StepLimit | Outcome::TimeLimit | Outcome::CostLimit | Outcome::Refused => 1,
            Outcome::Error | Outcome::EmptyReply => 2,
            Outcome::Interrupted => 130,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::StepLimit => "step_limit",
            Outcome::TimeLimit => "time_limit",
            Outcome::CostLimit => "cost_limit",
            Outcome::Refused => "refused",
            Outcome::Interrupted => "interrupted",
            Outcome::Error => "error",
            Outcome::EmptyReply => "empty_reply",
        }
    }
}

/// One thing that happened during a run.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    RunStarted {
        run_id: String,
        /// [`TRAJECTORY_FORMAT_VERSION`] of the binary that wrote it.
        format_version: u32,
        /// The run's header: the effective configuration, secrets left
        /// out, and what the run observed of its sandbox and workspace.
        config: StartedConfig,
    },
    /// `runner continue`: the run goes on in the same directory, with the
    /// conversation rebuilt from the events before this one and `message`
    /// as the next user turn (a `user_message` with it follows).
    Continuation {
        message: String,
        /// Messages rebuilt from the trajectory and sent again.
        replayed_messages: usize,
        /// Model calls before this one; the step numbers go on from here.
        replayed_steps: u32,
        /// How the run last ended; `None`: no `run_finished` (killed).
        previous_outcome: Option<Outcome>,
        /// The continuation's effective configuration, secrets left out.
        config: Value,
    },
    /// A message the user added (the task, or a REPL line).
    UserMessage { text: String },
    ModelRequest {
        step: u32,
        messages: usize,
        tools: usize,
        max_tokens: u32,
    },
    /// Streamed assistant text (live display only; not kept in the trajectory).
    TextDelta { text: String },
    ModelRetry {
        step: u32,
        attempt: u32,
        status: Option<u16>,
        wait_ms: u64,
        reason: String,
    },
    ModelReply {
        step: u32,
        message: Message,
        stop_reason: StopReason,
        usage: Usage,
        cost_usd: f64,
        total_cost_usd: f64,
    },
    ToolCall {
        step: u32,
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        step: u32,
        id: String,
        name: String,
        is_error: bool,
        exit_code: Option<i32>,
        timed_out: bool,
        oom_killed: bool,
        bytes_seen: u64,
        duration_ms: u64,
        /// What the model was shown.
        output: String,
        /// The file holding the full, untruncated output, when one was written.
        #[serde(skip_serializing_if = "Option::is_none")]
        full_output: Option<String>,
    },
    /// A person's decision on a command before it ran (`--approve`).
    Approval {
        step: u32,
        /// The tool call's id.
        id: String,
        /// The command as the model sent it.
        command: String,
        /// Why it was asked: `always`, or the risky rule that matched.
        rule: String,
        answer: Answer,
        /// `false`: an earlier `a` approved it without asking.
        asked: bool,
        /// The command that ran instead (answer `edit`).
        #[serde(skip_serializing_if = "Option::is_none")]
        edited: Option<String>,
    },
    /// Something the loop did on its own (context trimmed, call cut off...).
    Notice { message: String },
    RunFinished {
        outcome: Outcome,
        steps: u32,
        usage: Usage,
        cost_usd: f64,
        duration_ms: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        final_text: Option<String>,
    },
}

/// Where events go: any number of consumers, called in order.
pub type Sink<'a> = &'a (dyn Fn(&Event) + Send + Sync);
