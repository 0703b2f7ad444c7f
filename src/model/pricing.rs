//! Model prices in USD per million tokens, and the cost of a call.
//!
//! Prices are list prices for the standard tier (Anthropic cache writes at
//! the 5-minute rate). Unknown models cost 0: [`lookup`] returns `None` so
//! the caller can say the cost is unknown, or pass a [`Price`] override.

use std::fmt;
use std::str::FromStr;

use super::Usage;

/// Anthropic's cache-write multiplier (5-minute cache) on the input price.
const CACHE_WRITE_FACTOR: f64 = 1.25;
/// Anthropic's cache-read multiplier on the input price.
const CACHE_READ_FACTOR: f64 = 0.1;
/// Tokens per price unit.
const TOKENS_PER_MTOK: f64 = 1_000_000.0;

/// USD per million tokens of each kind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// Uncached input.
    pub input: f64,
    /// Output.
    pub output: f64,
    /// Input written to the prompt cache.
    pub cache_write: f64,
    /// Input read from the prompt cache.
    pub cache_read: f64,
}

impl Price {
    /// A price with Anthropic's cache multipliers on `input`.
    pub const fn new(input: f64, output: f64) -> Self {
        Price {
            input,
            output,
            cache_write: input * CACHE_WRITE_FACTOR,
            cache_read: input * CACHE_READ_FACTOR,
        }
    }

    /// A price with explicit cache rates.
    pub const fn with_cache(input: f64, output: f64, cache_write: f64, cache_read: f64) -> Self {
        Price {
            input,
            output,
            cache_write,
            cache_read,
        }
    }

    /// The cost of `usage` at this price, in USD.
    pub fn cost_usd(&self, usage: &Usage) -> f64 {
        (usage.input_tokens as f64 * self.input
            + usage.output_tokens as f64 * self.output
            + usage.cache_creation_input_tokens as f64 * self.cache_write
            + usage.cache_read_input_tokens as f64 * self.cache_read)
            / TOKENS_PER_MTOK
    }
}

/// Why a price string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid price '{input}': {reason} (expected USD per million tokens as \"in,out[,cache_write,cache_read]\", e.g. \"3,15\")"
)]
pub struct PriceParseError {
    /// The text given.
    pub input: String,
    /// What was wrong with it.
    pub reason: String,
}

impl FromStr for Price {
    type Err = PriceParseError;

    /// Parses `"in,out"` or `"in,out,cache_write,cache_read"` (USD per
    /// million tokens). Missing cache rates follow Anthropic's multipliers.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fail = |reason: String| PriceParseError {
            input: s.to_string(),
            reason,
        };
        let mut nums = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            let n: f64 = part
                .parse()
                .map_err(|_| fail(format!("'{part}' is not a number")))?;
            if !n.is_finite() || n < 0.0 {
                return Err(fail(format!("'{part}' must be a non-negative number")));
            }
            nums.push(n);
        }
        match nums[..] {
            [i, o] => Ok(Price::new(i, o)),
            [i, o, w, r] => Ok(Price::with_cache(i, o, w, r)),
            _ => Err(fail(format!("{} numbers given, need 2 or 4", nums.len()))),
        }
    }
}

impl fmt::Display for Price {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{},{},{},{}",
            self.input, self.output, self.cache_write, self.cache_read
        )
    }
}

/// Known prices by model-name prefix; the longest matching prefix wins.
const PRICES: &[(&str, Price)] = &[
    // Claude Opus 4.5 and later.
    ("claude-opus-4", Price::new(5.0, 25.0)),
    ("claude-opus-4-0", Price::new(15.0, 75.0)),
    ("claude-opus-4-1", Price::new(15.0, 75.0)),
    ("claude-opus-4-20250514", Price::new(15.0, 75.0)),
    ("claude-3-opus", Price::new(15.0, 75.0)),
    ("claude-sonnet-4", Price::new(3.0, 15.0)),
    ("claude-3-7-sonnet", Price::new(3.0, 15.0)),
    ("claude-3-5-sonnet", Price::new(3.0, 15.0)),
    ("claude-haiku-4", Price::new(1.0, 5.0)),
    ("claude-3-5-haiku", Price::new(0.8, 4.0)),
    ("claude-3-haiku", Price::with_cache(0.25, 1.25, 0.3, 0.03)),
    // OpenAI: no cache-write charge; cached input at the listed rate.
    ("gpt-4o", Price::with_cache(2.5, 10.0, 2.5, 1.25)),
    ("gpt-4o-mini", Price::with_cache(0.15, 0.6, 0.15, 0.075)),
    ("gpt-4.1", Price::with_cache(2.0, 8.0, 2.0, 0.5)),
    ("gpt-4.1-mini", Price::with_cache(0.4, 1.6, 0.4, 0.1)),
    ("gpt-4.1-nano", Price::with_cache(0.1, 0.4, 0.1, 0.025)),
    ("gpt-5", Price::with_cache(1.25, 10.0, 1.25, 0.125)),
    ("gpt-5-mini", Price::with_cache(0.25, 2.0, 0.25, 0.025)),
    ("gpt-5-nano", Price::with_cache(0.05, 0.4, 0.05, 0.005)),
    ("o3", Price::with_cache(2.0, 8.0, 2.0, 0.5)),
    ("o4-mini", Price::with_cache(1.1, 4.4, 1.1, 0.275)),
];

/// Whether `prefix` names `model`: equal, or followed by a separator, so
/// `gpt-5` matches `gpt-5-2025-08-07` but not `gpt-5.2`.
fn matches(model: &str, prefix: &str) -> bool {
    match model.strip_prefix(prefix) {
        Some("") => true,
        Some(rest) => rest.starts_with(['-', '@', ':']),
        None => false,
    }
}

/// The list price of `model`, if this table knows it. A provider prefix
/// such as `anthropic/` or `openai/` is ignored.
pub fn lookup(model: &str) -> Option<Price> {
    let name = model.trim().to_ascii_lowercase();
    let name = name.rsplit('/').next().unwrap_or(&name);
    PRICES
        .iter()
        .filter(|(prefix, _)| matches(name, prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, p)| *p)
}

/// The cost of `usage` on `model` in USD; 0 for an unknown model (check
/// with [`lookup`]).
pub fn cost_usd(model: &str, usage: &Usage) -> f64 {
    lookup(model).map(|p| p.cost_usd(usage)).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(i: u64, o: u64, w: u64, r: u64) -> Usage {
        Usage {
            input_tokens: i,
            output_tokens: o,
            cache_creation_input_tokens: w,
            cache_read_input_tokens: r,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn families_match_by_prefix() {
        assert_eq!(
            lookup("claude-sonnet-4-5-20250929"),
            Some(Price::new(3.0, 15.0))
        );
        assert_eq!(lookup("claude-haiku-4-5"), Some(Price::new(1.0, 5.0)));
        assert_eq!(
            lookup("claude-opus-4-5-20251101"),
            Some(Price::new(5.0, 25.0))
        );
        assert_eq!(
            lookup("claude-opus-4-1-20250805"),
            Some(Price::new(15.0, 75.0))
        );
        assert_eq!(
            lookup("claude-opus-4-20250514"),
            Some(Price::new(15.0, 75.0))
        );
        assert_eq!(
            lookup("anthropic/claude-3-5-haiku-latest"),
            Some(Price::new(0.8, 4.0))
        );
        assert_eq!(
            lookup("gpt-4o-mini-2024-07-18").map(|p| p.input),
            Some(0.15)
        );
        assert_eq!(lookup("gpt-4o").map(|p| p.input), Some(2.5));
        assert_eq!(lookup("gpt-5.2-pro"), None);
        assert_eq!(lookup("gpt-oss:20b"), None);
        assert_eq!(lookup("zai/GLM-5.2"), None);
    }

    #[test]
    fn cost_counts_every_kind_of_token() {
        let u = usage(1_000_000, 1_000_000, 1_000_000, 1_000_000);
        assert!(close(
            cost_usd("claude-sonnet-4-5", &u),
            3.0 + 15.0 + 3.75 + 0.3
        ));
        assert!(close(
            cost_usd("claude-haiku-4-5", &usage(2000, 500, 0, 0)),
            0.0045
        ));
        assert_eq!(cost_usd("unknown-model", &u), 0.0);
    }

    #[test]
    fn overrides_parse() {
        assert_eq!("3,15".parse::<Price>(), Ok(Price::new(3.0, 15.0)));
        assert_eq!(
            " 1 , 2 , 3 , 0.5 ".parse::<Price>(),
            Ok(Price::with_cache(1.0, 2.0, 3.0, 0.5))
        );
        for bad in ["", "3", "3,x", "1,2,3", "-1,2", "1,2,3,4,5", "nan,1"] {
            let e = bad.parse::<Price>();
            assert!(e.is_err(), "{bad}");
        }
        let msg = "3"
            .parse::<Price>()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(msg.contains("need 2 or 4"), "{msg}");
        let p = Price::with_cache(1.0, 2.0, 3.0, 0.5);
        assert_eq!(p.to_string().parse::<Price>(), Ok(p));
    }
}
