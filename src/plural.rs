//! Counted nouns in messages: "1 attempt", "2 attempts", "0 attempts".

/// `n` and the noun, singular for exactly one.
pub fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// [`count`] for a `usize` (a length).
pub fn count_of(n: usize, one: &str, many: &str) -> String {
    count(u64::try_from(n).unwrap_or(u64::MAX), one, many)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1u32, "attempt", "attempts"), "1 attempt");
        assert_eq!(count(0u32, "attempt", "attempts"), "0 attempts");
        assert_eq!(count(2u64, "process", "processes"), "2 processes");
        assert_eq!(count_of(1, "task", "tasks"), "1 task");
    }
}
