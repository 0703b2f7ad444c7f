//! Samples, their summary, and the rows every benchmark reports.

use serde::Serialize;

/// Timings of one side of one benchmark, in milliseconds.
#[derive(Debug, Default, Clone)]
pub struct Samples(pub Vec<f64>);

impl Samples {
    pub fn push(&mut self, ms: f64) {
        self.0.push(ms);
    }

    fn sorted(&self) -> Vec<f64> {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        v
    }

    /// The middle value (mean of the two middle ones for an even count).
    pub fn median(&self) -> f64 {
        let v = self.sorted();
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }

    /// Nearest-rank 95th percentile (the maximum below 20 samples).
    pub fn p95(&self) -> f64 {
        let v = self.sorted();
        if v.is_empty() {
            return f64::NAN;
        }
        // ceil(0.95 n), in integers.
        let rank = (v.len() * 19).div_ceil(20);
        v[rank.clamp(1, v.len()) - 1]
    }
}

/// One line of the results table: one side of one benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// B1 ... B7.
    pub id: &'static str,
    /// Which side: "runner docker executor", "docker exec (CLI)", ...
    pub side: String,
    /// Unit of `median` and `p95`.
    pub unit: &'static str,
    pub n: usize,
    pub median: f64,
    pub p95: f64,
    /// runner / this peer (medians), on the runner row it is compared to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// The target from the issue, on the row it applies to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Whether the target was met (`None`: not judged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub met: Option<bool>,
    /// Everything else worth seeing next to the figure (CPU per op, bytes,
    /// RSS, orphans...).
    pub note: String,
}

impl Row {
    /// A row from samples, with no ratio or target yet.
    pub fn new(id: &'static str, side: impl Into<String>, unit: &'static str, s: &Samples) -> Row {
        Row {
            id,
            side: side.into(),
            unit,
            n: s.0.len(),
            median: s.median(),
            p95: s.p95(),
            ratio: None,
            target: None,
            met: None,
            note: String::new(),
        }
    }

    /// A row for a side that could not be measured (e.g. `runner eval`
    /// missing): no numbers, only the reason.
    pub fn unavailable(id: &'static str, side: impl Into<String>, why: impl Into<String>) -> Row {
        Row {
            id,
            side: side.into(),
            unit: "-",
            n: 0,
            median: f64::NAN,
            p95: f64::NAN,
            ratio: None,
            target: None,
            met: None,
            note: format!("not available: {}", why.into()),
        }
    }

    /// A row that only carries a finding (no figures of its own).
    pub fn info(id: &'static str, side: impl Into<String>, note: impl Into<String>) -> Row {
        let mut r = Row::unavailable(id, side, "");
        r.note = note.into();
        r
    }

    pub fn note(mut self, note: impl Into<String>) -> Row {
        self.note = note.into();
        self
    }

    /// Sets the ratio of this row's median to `peer`'s.
    pub fn versus(mut self, peer: &Row) -> Row {
        self.ratio = Some(self.median / peer.median);
        self
    }

    pub fn target(mut self, target: impl Into<String>, met: bool) -> Row {
        self.target = Some(target.into());
        self.met = Some(met);
        self
    }
}
