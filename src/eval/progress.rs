//! What a suite is doing while it runs. On a terminal: a bar whose message
//! names the running attempts and their phase (`t01#1 agent step 3/100`,
//! `t02#1 image`). Elsewhere (CI logs, a pipe): each finished attempt's
//! line, and a one-line status at most every [`HEARTBEAT`] while anything
//! runs, so a log shows life during a long build or agent phase.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use tokio_util::sync::CancellationToken;

use crate::terminal::one_cell;

/// How often the status line is printed when stderr is not a terminal.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// Most running attempts named in one status line; the rest are counted.
const MAX_NAMED: usize = 4;

/// The suite's progress, shared by its attempts.
pub struct Progress {
    bar: ProgressBar,
    total: usize,
    started: Instant,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    done: usize,
    /// `task#n` -> what it is doing.
    running: BTreeMap<String, String>,
}

impl Progress {
    /// A bar on a terminal, plain lines otherwise.
    pub fn new(total: usize) -> Arc<Progress> {
        Arc::new(Progress {
            bar: bar(total as u64),
            total,
            started: Instant::now(),
            state: Mutex::new(State::default()),
        })
    }

    /// Progress that shows nothing (tests of the parts).
    pub fn hidden(total: usize) -> Arc<Progress> {
        Arc::new(Progress {
            bar: ProgressBar::hidden(),
            total,
            started: Instant::now(),
            state: Mutex::new(State::default()),
        })
    }

    /// Attempt `n` of `task` is now in `phase`.
    pub fn phase(&self, task: &str, n: u32, phase: &str) {
        if let Ok(mut s) = self.state.lock() {
            s.running.insert(format!("{task}#{n}"), phase.to_string());
        }
        self.refresh();
    }

    /// Attempt `n` of `task` ended (or never ran): one more done.
    pub fn ended(&self, task: &str, n: u32) -> usize {
        let done = match self.state.lock() {
            Ok(mut s) => {
                s.running.remove(&format!("{task}#{n}"));
                s.done += 1;
                s.done
            }
            Err(_) => 0,
        };
        if !self.bar.is_hidden() {
            self.bar.set_position(done as u64);
        }
        self.refresh();
        done
    }

    /// A line above the bar, or on stderr.
    pub fn println(&self, line: &str) {
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }

    /// `3/20 done; running: t01#1 agent step 2/100, t02#1 verifier; 45s`.
    pub fn status_line(&self) -> String {
        let Ok(s) = self.state.lock() else {
            return String::new();
        };
        let mut named: Vec<String> = s
            .running
            .iter()
            .take(MAX_NAMED)
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        if s.running.len() > MAX_NAMED {
            named.push(format!("{} more", s.running.len() - MAX_NAMED));
        }
        let running = if named.is_empty() {
            "nothing running".to_string()
        } else {
            format!("running: {}", named.join(", "))
        };
        let line = format!(
            "{}/{} done; {running}; {}s",
            s.done,
            self.total,
            self.started.elapsed().as_secs()
        );
        one_cell(&line)
    }

    /// Prints the status line every [`HEARTBEAT`] when not on a terminal,
    /// while anything runs, until `stop`.
    pub fn heartbeat(self: &Arc<Self>, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            if !me.bar.is_hidden() || std::io::stderr().is_terminal() {
                return;
            }
            let mut tick =
                tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let busy = me
                    .state
                    .lock()
                    .map(|s| !s.running.is_empty())
                    .unwrap_or(false);
                if busy {
                    eprintln!("eval: {}", me.status_line());
                }
            }
        })
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    fn refresh(&self) {
        if self.bar.is_hidden() {
            return;
        }
        let msg = self.status_line();
        // The counts are the bar's own; the message is what runs.
        let msg = msg.split_once("; ").map_or(msg.as_str(), |(_, rest)| rest);
        self.bar.set_message(msg.to_string());
    }
}

fn bar(len: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    let style = ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {wide_msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(500));
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_names_what_runs_and_counts_the_rest() {
        let p = Progress::hidden(8);
        assert_eq!(p.status_line().split("; ").nth(1), Some("nothing running"));
        for i in 0..6 {
            p.phase(&format!("t{i}"), 1, "agent step 1/100");
        }
        p.phase("t0", 1, "verifier");
        assert_eq!(p.ended("t5", 1), 1);
        let line = p.status_line();
        assert!(
            line.starts_with("1/8 done; running: t0#1 verifier, t1#1 agent step 1/100"),
            "{line}"
        );
        assert!(line.contains(", 1 more; "), "{line}");
        // Names come from the suite: control characters are made visible.
        p.phase("evil\x1b[2J", 1, "image");
        assert!(!p.status_line().contains('\x1b'));
    }
}
