//! The suite's concurrency in two stages, so that sandboxes start while
//! other attempts run (the warm pool):
//!
//! - a **place** in the pool: at most `--jobs` attempts set up ahead of
//!   their turn (image, workspace, sidecars, the agent's sandbox started
//!   and healthy);
//! - a **slot**: at most `--jobs` attempts run (agent, evidence, grading).
//!
//! An attempt sets up holding a place, then takes a slot and hands its
//! place to the next attempt, whose sandbox starts while this one runs.
//! Nothing is started for an attempt the suite will not run: every place
//! belongs to the next attempt in order, and one that gets no slot
//! (Ctrl-C, the budget spent meanwhile) removes what it started.
//!
//! How long a slot stood idle waiting for an attempt's sandbox is its
//! `sandbox_wait`: zero when the sandbox was ready before a slot freed.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// Why no more attempts start, once the suite decides so (the budget).
pub type Hold = Box<dyn Fn() -> Option<String> + Send + Sync>;

/// The pool's places and the running slots of one suite.
pub struct Slots {
    places: Arc<Semaphore>,
    running: Arc<Semaphore>,
    /// When each free slot was freed, oldest first.
    freed: Arc<Mutex<VecDeque<Instant>>>,
    /// The longest an attempt set up ahead can wait for its slot.
    pool_wait: Duration,
    hold: Hold,
}

/// Why an attempt that set up did not get to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoTurn {
    /// Ctrl-C while it waited.
    Interrupted,
    /// The suite stopped starting attempts (the message says why).
    Held(String),
}

/// An attempt's way through the two stages.
pub struct Turn {
    slots: Arc<Slots>,
    place: Option<OwnedSemaphorePermit>,
    slot: Option<Slot>,
}

/// A running slot; when it is given back, the time is noted.
struct Slot {
    _permit: OwnedSemaphorePermit,
    freed: Arc<Mutex<VecDeque<Instant>>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut f) = self.freed.lock() {
            f.push_back(Instant::now());
        }
    }
}

impl Slots {
    /// `jobs` places and `jobs` slots (at least one of each); an attempt
    /// set up ahead waits at most `pool_wait` for its slot; `hold` says
    /// why no attempt may start any more, if so.
    pub fn new(jobs: usize, pool_wait: Duration, hold: Hold) -> Arc<Slots> {
        let jobs = jobs.max(1);
        let now = Instant::now();
        Arc::new(Slots {
            places: Arc::new(Semaphore::new(jobs)),
            running: Arc::new(Semaphore::new(jobs)),
            freed: Arc::new(Mutex::new(std::iter::repeat_n(now, jobs).collect())),
            pool_wait,
            hold,
        })
    }

    /// Waits for a place in the pool, in the order asked; `None` after
    /// Ctrl-C.
    pub async fn place(self: &Arc<Self>, cancel: &CancellationToken) -> Option<Turn> {
        let permit = tokio::select! {
            _ = cancel.cancelled() => None,
            p = self.places.clone().acquire_owned() => p.ok(),
        };
        let permit = permit.filter(|_| !cancel.is_cancelled())?;
        Some(Turn {
            slots: self.clone(),
            place: Some(permit),
            slot: None,
        })
    }
}

impl Turn {
    /// Takes a running slot (at once when this attempt holds one already)
    /// and gives the place in the pool to the next attempt. Returns how
    /// long the slot stood idle before this attempt's sandbox was ready.
    pub async fn run(&mut self, cancel: &CancellationToken) -> Result<Duration, NoTurn> {
        if self.slot.is_some() {
            return Ok(Duration::ZERO);
        }
        let running = self.slots.running.clone();
        // A slot free at once stood idle for this sandbox; one waited for
        // was busy until now.
        let (permit, idle) = match running.clone().try_acquire_owned() {
            Ok(p) => (Some(p), true),
            Err(_) => tokio::select! {
                _ = cancel.cancelled() => (None, false),
                p = running.acquire_owned() => (p.ok(), false),
            },
        };
        let now = Instant::now();
        let Some(permit) = permit else {
            return Err(NoTurn::Interrupted);
        };
        // Freed before now: the slot waited; freed just now: this attempt did.
        let freed = self.slots.freed.lock().ok().and_then(|mut f| f.pop_front());
        let slot = Slot {
            _permit: permit,
            freed: self.slots.freed.clone(),
        };
        if cancel.is_cancelled() {
            return Err(NoTurn::Interrupted);
        }
        if let Some(why) = (self.slots.hold)() {
            return Err(NoTurn::Held(why));
        }
        self.slot = Some(slot);
        self.place = None;
        Ok(freed
            .filter(|_| idle)
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t)))
    }

    /// Whether the attempt holds a running slot.
    pub fn running(&self) -> bool {
        self.slot.is_some()
    }

    /// How long a sandbox started now may wait before it runs: the
    /// longest attempt of the suite while in the pool, nothing once
    /// running (a retry). Its lifetime is extended by that much.
    pub fn ahead(&self) -> Duration {
        if self.running() {
            Duration::ZERO
        } else {
            self.slots.pool_wait
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> Hold {
        Box::new(|| None)
    }

    #[tokio::test]
    async fn the_next_attempt_sets_up_while_one_runs_and_waits_for_its_slot() {
        let slots = Slots::new(1, Duration::from_secs(60), open());
        let cancel = CancellationToken::new();
        let mut first = slots.place(&cancel).await.expect("a place");
        assert_eq!(
            first.ahead(),
            Duration::from_secs(60),
            "may wait in the pool"
        );
        first.run(&cancel).await.expect("a slot");
        assert_eq!(first.ahead(), Duration::ZERO, "runs now");
        // The place is free again: the second attempt sets up now.
        let mut second = tokio::time::timeout(Duration::from_secs(1), slots.place(&cancel))
            .await
            .expect("a place while the first runs")
            .expect("a place");
        // A third waits for the second to take its slot.
        let third = tokio::time::timeout(Duration::from_millis(50), slots.place(&cancel)).await;
        assert!(third.is_err(), "at most --jobs set up ahead");
        let waiting = tokio::spawn(async move {
            let w = second.run(&CancellationToken::new()).await;
            (w, second.running())
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "the second waits for the slot");
        drop(first);
        let (waited, running) = waiting.await.expect("joined");
        // Its sandbox was ready before the slot freed: no wait for it.
        assert_eq!(waited, Ok(Duration::ZERO));
        assert!(running);
    }

    #[tokio::test]
    async fn an_idle_slot_counts_as_waiting_for_the_sandbox() {
        let slots = Slots::new(1, Duration::from_secs(60), open());
        let cancel = CancellationToken::new();
        let first = slots.place(&cancel).await.expect("a place");
        drop(first);
        tokio::time::sleep(Duration::from_millis(120)).await;
        let mut t = slots.place(&cancel).await.expect("a place");
        let waited = t.run(&cancel).await.expect("a slot");
        assert!(waited >= Duration::from_millis(100), "{waited:?}");
        // A second call (a retry) holds the slot already.
        assert_eq!(t.run(&cancel).await, Ok(Duration::ZERO));
    }

    #[tokio::test]
    async fn ctrl_c_or_a_hold_gives_no_turn() {
        let spent = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = spent.clone();
        let hold: Hold = Box::new(move || {
            s.load(std::sync::atomic::Ordering::SeqCst)
                .then(|| "spent".to_string())
        });
        let slots = Slots::new(1, Duration::from_secs(60), hold);
        let cancel = CancellationToken::new();
        let mut a = slots.place(&cancel).await.expect("a place");
        a.run(&cancel).await.expect("a slot");
        let mut b = slots.place(&cancel).await.expect("a place");
        let c2 = cancel.clone();
        let waiting = tokio::spawn(async move { b.run(&c2).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
        assert_eq!(waiting.await.expect("joined"), Err(NoTurn::Interrupted));
        assert!(
            slots.place(&cancel).await.is_none(),
            "no place after Ctrl-C"
        );

        drop(a);
        spent.store(true, std::sync::atomic::Ordering::SeqCst);
        let live = CancellationToken::new();
        let mut d = slots.place(&live).await.expect("a place");
        assert_eq!(d.run(&live).await, Err(NoTurn::Held("spent".into())));
        assert!(!d.running());
    }
}
