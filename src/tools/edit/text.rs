//! The edit tool's text operations, on a file's content already read and
//! checked: numbering lines as `cat -n` does, a unique replacement, an
//! insertion after a line. Pure functions: no I/O, no panics on any input.

/// Lines of context shown around an edit.
const SNIPPET_LINES: usize = 4;
/// Most line numbers listed when `old_str` occurs more than once.
const MAX_LISTED_LINES: usize = 20;

/// The lines of `text` as `cat -n` counts them: a final newline ends the
/// last line rather than starting an empty one; an empty text has none.
/// Each line keeps what it holds (a `\r` of a CRLF file included).
pub fn lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    body.split('\n').collect()
}

/// `lines` numbered from `first` (1-based) as `cat -n` prints them:
/// the number right-aligned in six columns, a tab, the line.
pub fn numbered(lines: &[&str], first: usize) -> String {
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        out.push_str(&format!("{:6}\t{line}\n", first.saturating_add(i)));
    }
    out
}

/// What a view shows: the numbered lines `first..=last` (1-based, within
/// `all`), at most `max_chars` characters of them. Whole lines are kept
/// while they fit; the rest is left out with a note saying which lines
/// were shown and how to see the others.
pub fn view_body(all: &[&str], first: usize, last: usize, max_chars: usize) -> String {
    let wanted = all
        .get(first.saturating_sub(1)..last.min(all.len()))
        .unwrap_or(&[]);
    let mut out = String::new();
    let mut used = 0usize;
    for (i, line) in wanted.iter().enumerate() {
        let n = first.saturating_add(i);
        let row = format!("{n:6}\t{line}\n");
        let len = row.chars().count();
        if used.saturating_add(len) > max_chars {
            if i == 0 {
                // One line longer than the whole budget: show its start.
                out.extend(row.chars().take(max_chars));
                out.push('\n');
                out.push_str(&format!(
                    "[clipped: line {n} alone is longer than the {max_chars} characters a view may show]\n"
                ));
            } else {
                out.push_str(&format!(
                    "[clipped at {max_chars} characters: lines {first}-{} of {} shown; \
                     view the rest with view_range [{n}, -1] or a narrower range]\n",
                    n - 1,
                    all.len()
                ));
            }
            return out;
        }
        used += len;
        out.push_str(&row);
    }
    out
}

/// Byte offsets of every occurrence of `needle` in `hay`, overlapping
/// ones included (two overlapping matches make a replacement ambiguous).
pub fn occurrences(hay: &str, needle: &str) -> Vec<usize> {
    let mut found = Vec::new();
    if needle.is_empty() {
        return found;
    }
    let mut from = 0;
    while let Some(i) = hay.get(from..).and_then(|rest| rest.find(needle)) {
        let at = from + i;
        found.push(at);
        // Next char boundary after `at`.
        let step = hay[at..].chars().next().map_or(1, char::len_utf8);
        from = at + step;
    }
    found
}

/// The 1-based line holding byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(0, |t| t.bytes().filter(|b| *b == b'\n').count())
        + 1
}

/// Why `old_str` cannot be replaced: it occurs `offsets.len()` times
/// (none or several). `shown` names the file.
pub fn not_unique(text: &str, old: &str, offsets: &[usize], shown: &str) -> String {
    if offsets.is_empty() {
        let mut msg = format!(
            "No replacement was performed: old_str `{}` did not appear verbatim in {shown}.",
            preview(old)
        );
        let trimmed = old.trim();
        if !trimmed.is_empty() && trimmed != old && occurrences(text, trimmed).len() == 1 {
            msg.push_str(
                " It does occur once without its leading and trailing whitespace: \
                 check the indentation and line ends.",
            );
        } else if old.contains('\n') && text.contains("\r\n") && !old.contains("\r\n") {
            msg.push_str(" The file's lines end with \\r\\n (CRLF).");
        }
        msg.push_str(" View the file to see its exact content.");
        return msg;
    }
    let mut lines: Vec<usize> = offsets.iter().map(|o| line_of(text, *o)).collect();
    lines.dedup();
    let listed: Vec<String> = lines
        .iter()
        .take(MAX_LISTED_LINES)
        .map(ToString::to_string)
        .collect();
    let more = if lines.len() > MAX_LISTED_LINES {
        ", ..."
    } else {
        ""
    };
    format!(
        "No replacement was performed: old_str `{}` occurs {} times in {shown}, in lines [{}{more}]. \
         Include enough surrounding lines in old_str to make it occur exactly once.",
        preview(old),
        offsets.len(),
        listed.join(", ")
    )
}

/// `text` with the bytes `at..at + old_len` replaced by `new`, and the
/// success message showing the edited region with context.
pub fn replace_at(
    text: &str,
    at: usize,
    old_len: usize,
    new: &str,
    shown: &str,
) -> (String, String) {
    let end = at.saturating_add(old_len).min(text.len());
    let mut out = String::with_capacity(text.len() - (end - at) + new.len());
    out.push_str(text.get(..at).unwrap_or(""));
    out.push_str(new);
    out.push_str(text.get(end..).unwrap_or(""));
    let first = line_of(text, at);
    // The last line the new text reaches (a final newline ends it).
    let body = new.strip_suffix('\n').unwrap_or(new);
    let last = first + body.bytes().filter(|b| *b == b'\n').count();
    let message = format!(
        "The file {shown} has been edited. {}Review the changes and make sure they are as \
         expected. Edit the file again if necessary.",
        snippet(&out, first, last, shown)
    );
    (out, message)
}

/// `text` with `insert` added after its line `after` (0: at the start),
/// as whole lines: a newline ends the inserted text when it has none, and
/// one is added to a last line that lacks it. `after` must be at most the
/// number of lines (checked by the caller).
pub fn insert_after(text: &str, after: usize, insert: &str, shown: &str) -> (String, String) {
    let mut offset = 0;
    for _ in 0..after {
        match text.get(offset..).and_then(|rest| rest.find('\n')) {
            Some(i) => offset += i + 1,
            None => {
                offset = text.len();
                break;
            }
        }
    }
    let mut out = String::with_capacity(text.len() + insert.len() + 2);
    out.push_str(text.get(..offset).unwrap_or(""));
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(insert);
    if !insert.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(text.get(offset..).unwrap_or(""));
    let added = lines(insert).len().max(1);
    let message = format!(
        "The file {shown} has been edited. {}Review the changes and make sure they are as \
         expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary.",
        snippet(&out, after + 1, after + added, "the edited file")
    );
    (out, message)
}

/// Lines `first..=last` of `text` (1-based) with [`SNIPPET_LINES`] of
/// context each side, numbered.
fn snippet(text: &str, first: usize, last: usize, what: &str) -> String {
    let all = lines(text);
    let from = first.saturating_sub(SNIPPET_LINES).max(1);
    let to = last.saturating_add(SNIPPET_LINES).min(all.len());
    let shown = all.get(from - 1..to).unwrap_or(&[]);
    format!(
        "Here's the result of running `cat -n` on a snippet of {what}:\n{}",
        numbered(shown, from)
    )
}

/// At most 200 characters of `s`, for messages.
pub fn preview(s: &str) -> String {
    const MAX_PREVIEW_CHARS: usize = 200;
    if s.chars().count() <= MAX_PREVIEW_CHARS {
        return s.to_string();
    }
    let mut p: String = s.chars().take(MAX_PREVIEW_CHARS).collect();
    p.push_str("...");
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_as_cat_n_counts_them() {
        assert!(lines("").is_empty());
        assert_eq!(lines("a"), ["a"]);
        assert_eq!(lines("a\n"), ["a"]);
        assert_eq!(lines("a\n\n"), ["a", ""]);
        assert_eq!(lines("a\r\nb"), ["a\r", "b"]);
        assert_eq!(numbered(&["x", "y"], 9), "     9\tx\n    10\ty\n");
    }

    #[test]
    fn overlapping_occurrences_count() {
        assert_eq!(occurrences("aaa", "aa"), [0, 1]);
        assert_eq!(occurrences("héllo héllo", "héllo"), [0, 7]);
        assert!(occurrences("abc", "").is_empty());
        assert!(occurrences("abc", "d").is_empty());
    }

    #[test]
    fn insert_keeps_lines_whole() {
        let ins = |t: &str, after, s: &str| insert_after(t, after, s, "f").0;
        assert_eq!(ins("a\nb\n", 0, "X"), "X\na\nb\n");
        assert_eq!(ins("a\nb\n", 1, "X\n"), "a\nX\nb\n");
        assert_eq!(ins("a\nb\n", 2, "X"), "a\nb\nX\n");
        assert_eq!(ins("a\nb", 2, "X"), "a\nb\nX\n");
        assert_eq!(ins("", 0, "X\nY"), "X\nY\n");
    }

    #[test]
    fn replace_reports_a_snippet_with_context() {
        let text: String = (1..=20).map(|i| format!("line {i}\n")).collect();
        let at = text.find("line 10\n").unwrap_or(0);
        let (out, msg) = replace_at(&text, at, "line 10\n".len(), "ten\nTEN\n", "/f");
        assert!(out.contains("line 9\nten\nTEN\nline 11\n"));
        assert!(msg.contains("     6\tline 6\n"), "{msg}");
        assert!(msg.contains("    10\tten\n    11\tTEN\n"), "{msg}");
        assert!(
            msg.contains("    15\tline 14\n") && !msg.contains("line 15"),
            "{msg}"
        );
    }

    #[test]
    fn a_view_is_clipped_at_whole_lines_with_a_note() {
        let text: String = (1..=100).map(|i| format!("line {i}\n")).collect();
        let all = lines(&text);
        let body = view_body(&all, 1, 100, 100);
        assert!(body.chars().count() < 250);
        assert!(
            body.contains("[clipped at 100 characters: lines 1-"),
            "{body}"
        );
        assert!(body.contains("view_range ["), "{body}");
        let long = "x".repeat(500);
        let body = view_body(&[long.as_str()], 1, 1, 50);
        assert!(body.contains("line 1 alone is longer"), "{body}");
    }

    proptest::proptest! {
        #[test]
        fn text_operations_never_panic(
            text in "(a|é|\n|\r|x{0,3}|\t){0,40}",
            old in "(a|é|\n|x){1,4}",
            new in "(b|é|\n){0,4}",
            after in 0usize..50,
            first in 1usize..50,
            last in 0usize..60,
            max in 1usize..200,
        ) {
            let all = lines(&text);
            let _ = view_body(&all, first, last, max);
            let found = occurrences(&text, &old);
            let _ = not_unique(&text, &old, &found, "f");
            if let Some(at) = found.first() {
                let (out, _) = replace_at(&text, *at, old.len(), &new, "f");
                proptest::prop_assert_eq!(out.len(), text.len() - old.len() + new.len());
            }
            if after <= all.len() {
                let (out, _) = insert_after(&text, after, &new, "f");
                proptest::prop_assert!(out.len() >= text.len() + new.len());
            }
        }
    }
}
