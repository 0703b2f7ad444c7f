//! A multi-turn conversation on a terminal, the REPL's task source:
//! each line read is a user turn; `exit`, `q`, an empty line or EOF ends
//! it. The prompt is the only thing it prints.

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, Conversation, RunEnd};
use crate::event::{Event, Outcome, Sink};
use crate::model::Message;
use crate::render::Human;

/// Runs turns read from stdin until one does not complete or the person
/// ends the conversation; how the last turn ended.
pub async fn converse(
    agent: &Agent<'_>,
    convo: &mut Conversation,
    sink: Sink<'_>,
    cancel: &CancellationToken,
    human: &Human,
) -> RunEnd {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut last = ended(Outcome::Completed);
    loop {
        human.prompt();
        let line = tokio::select! {
            _ = cancel.cancelled() => return ended(Outcome::Interrupted),
            l = lines.next_line() => l,
        };
        let text = match line {
            Ok(Some(l)) => l.trim().to_string(),
            Ok(None) => return last,
            Err(e) => {
                human.say(&format!("error: cannot read stdin: {e}"));
                return last;
            }
        };
        if text.is_empty() || text == "exit" || text == "q" {
            return last;
        }
        sink(&Event::UserMessage { text: text.clone() });
        convo.messages.push(Message::user_text(text));
        last = agent.run(convo, sink, cancel).await;
        if last.outcome != Outcome::Completed {
            return last;
        }
    }
}

/// A turn's end with nothing to say.
fn ended(outcome: Outcome) -> RunEnd {
    RunEnd {
        outcome,
        error: None,
        final_text: None,
        hint: None,
    }
}
