//! Numeric conversions that saturate instead of wrapping. The crate denies
//! clippy's `cast_possible_truncation`, `cast_sign_loss` and
//! `cast_possible_wrap`: a bare `as` that wraps a byte count or a duration
//! turns a huge value into a small (or negative) one without a word. The
//! patterns that repeat live here, each saying what happens out of range;
//! one-off conversions use `try_from` where they are.

use std::time::Duration;

/// Whole milliseconds in `d`, `u64::MAX` past it (585 million years): for
/// durations reported in events, trajectories and reports.
pub fn millis_u64(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `x` rounded toward zero, clamped to `0..=u64::MAX`; NaN is 0. For
/// sizes, timeouts and delays parsed as floats (`1.5G`, `retry-after: 2.5`)
/// once they have been checked; the clamp is the answer for anything left.
// Float-to-int `as` saturates at both ends and maps NaN to 0 (the language
// guarantees it since Rust 1.45): that is exactly the clamp wanted, and no
// `try_from` exists for floats.
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float-to-int `as` saturates and maps NaN to 0"
)]
pub fn u64_from_f64(x: f64) -> u64 {
    x as u64
}

/// `x` rounded toward zero, clamped to `i64::MIN..=i64::MAX`; NaN is 0.
/// For Docker's signed byte and nano-CPU fields.
#[expect(
    clippy::cast_possible_truncation,
    reason = "float-to-int `as` saturates and maps NaN to 0"
)]
pub fn i64_from_f64(x: f64) -> i64 {
    x as i64
}

/// `n`, or `u32::MAX` past it: for counts shown to people or in reports.
pub fn u32_from_usize(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// `n` clamped to `i32::MIN..=i32::MAX`: for exit codes the engine reports
/// as `i64`, which a real process never takes past `i32`.
pub fn i32_from_i64(n: i64) -> i32 {
    i32::try_from(n).unwrap_or(if n < 0 { i32::MIN } else { i32::MAX })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_saturate() {
        assert_eq!(millis_u64(Duration::from_millis(1234)), 1234);
        assert_eq!(millis_u64(Duration::MAX), u64::MAX);
    }

    #[test]
    fn floats_clamp_to_the_integer_range() {
        assert_eq!(u64_from_f64(2.9), 2);
        assert_eq!(u64_from_f64(-1.0), 0);
        assert_eq!(u64_from_f64(f64::NAN), 0);
        assert_eq!(u64_from_f64(1e30), u64::MAX);
        assert_eq!(u64_from_f64(f64::INFINITY), u64::MAX);
        assert_eq!(i64_from_f64(-2.9), -2);
        assert_eq!(i64_from_f64(-1e30), i64::MIN);
        assert_eq!(i64_from_f64(1e30), i64::MAX);
        assert_eq!(i64_from_f64(f64::NAN), 0);
    }

    #[test]
    fn integers_saturate() {
        assert_eq!(u32_from_usize(7), 7);
        assert_eq!(u32_from_usize(usize::MAX), u32::MAX);
        assert_eq!(i32_from_i64(-1), -1);
        assert_eq!(i32_from_i64(i64::MAX), i32::MAX);
        assert_eq!(i32_from_i64(i64::MIN), i32::MIN);
    }
}
