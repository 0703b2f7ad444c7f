//! Building HTML from hostile text: every string from a trajectory, an
//! attempt record or a log goes through [`Html::text`] (or [`esc`]), and
//! data for the page's script through [`script_json`]. Nothing else
//! writes into the page except the page's own fixed markup.

use std::fmt::Write as _;

use crate::terminal::visible;

/// `s` made safe as HTML text or a quoted attribute value: `& < > " '`
/// become entities, and the characters a terminal acts on or that
/// reorder text (escape sequences, bidi overrides) are shown as escapes
/// (see [`crate::terminal::visible`]), so a log cannot disguise itself.
pub fn esc(s: &str) -> String {
    let s = visible(s);
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `value` as JSON that can sit inside `<script type="application/json">`:
/// `<`, `>` and `&` (so no `</script>` or `<!--` can appear) and U+2028 /
/// U+2029 are written as `\uXXXX` escapes. They only occur inside JSON
/// strings, where the escape means the same character.
pub fn script_json(value: &serde_json::Value) -> String {
    let raw = value.to_string();
    let mut out = String::with_capacity(raw.len() + 16);
    for c in raw.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// The longest prefix of `s` of at most `max` bytes that ends on a
/// character boundary, and whether anything was cut.
pub fn cap_str(s: &str, max: usize) -> (&str, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

/// A byte count for people: `812 B`, `3.4 KiB`, `12.0 MiB`.
pub fn bytes(n: u64) -> String {
    const KIB: f64 = 1024.0;
    let f = n as f64;
    if f < KIB {
        format!("{n} B")
    } else if f < KIB * KIB {
        format!("{:.1} KiB", f / KIB)
    } else {
        format!("{:.1} MiB", f / KIB / KIB)
    }
}

/// Milliseconds for people: `850 ms`, `12.3 s`, `4m 05s`.
pub fn millis(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{}m {:02}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

/// A page being written. Fixed markup goes in with [`Html::raw`] (only
/// ever string literals or output of this module), text with
/// [`Html::text`].
#[derive(Debug, Default)]
pub struct Html {
    out: String,
}

impl Html {
    pub fn new() -> Html {
        Html::default()
    }

    /// Appends runner's own markup.
    pub fn raw(&mut self, markup: &str) -> &mut Html {
        self.out.push_str(markup);
        self
    }

    /// Appends `text`, escaped.
    pub fn text(&mut self, text: &str) -> &mut Html {
        self.out.push_str(&esc(text));
        self
    }

    /// Appends `<tag class="class">text</tag>`, the text escaped.
    pub fn el(&mut self, tag: &str, class: &str, text: &str) -> &mut Html {
        let _ = write!(self.out, "<{tag} class=\"{}\">", esc(class));
        self.text(text);
        let _ = write!(self.out, "</{tag}>");
        self
    }

    /// Appends a `<pre>` of `text` cut at `max` bytes, saying what was cut.
    pub fn pre(&mut self, text: &str, max: usize) -> &mut Html {
        let (shown, cut) = cap_str(text, max);
        self.raw("<pre>").text(shown).raw("</pre>");
        self.cut_note(shown, text, cut)
    }

    /// After a capped text: `cut: N of M shown` when it was cut.
    fn cut_note(&mut self, shown: &str, text: &str, cut: bool) -> &mut Html {
        if cut {
            let note = format!(
                "cut: {} of {} shown",
                bytes(shown.len() as u64),
                bytes(text.len() as u64)
            );
            self.el("p", "cut", &note);
        }
        self
    }

    /// Appends `<div class="reason">` of `text` cut at `max` bytes,
    /// saying what was cut.
    pub fn reason(&mut self, text: &str, max: usize) -> &mut Html {
        let (shown, cut) = cap_str(text, max);
        self.el("div", "reason", shown);
        self.cut_note(shown, text, cut)
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.out.len()
    }

    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// The page.
    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = "</script><script>alert(1)</script><img src=x onerror=alert(1)>";

    #[test]
    fn hostile_text_has_no_markup_left() {
        let e = esc(HOSTILE);
        assert!(!e.contains('<') && !e.contains('>'), "{e}");
        assert_eq!(
            e,
            "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;"
        );
        assert_eq!(esc("a\"b'c&d"), "a&quot;b&#39;c&amp;d");
        // Escape sequences and bidi overrides are shown, not acted on.
        assert_eq!(esc("\u{1b}[2J\u{202e}x"), "\\x1b[2J\\u{202e}x");
    }

    #[test]
    fn script_json_cannot_close_its_script_and_reads_back_the_same() {
        let v = serde_json::json!({"task": HOSTILE, "sep": "a\u{2028}b\u{2029}c", "amp": "&<!--"});
        let s = script_json(&v);
        for bad in ["<", ">", "&", "\u{2028}", "\u{2029}"] {
            assert!(!s.contains(bad), "{bad:?} in {s}");
        }
        let back: serde_json::Value = serde_json::from_str(&s).expect("still JSON");
        assert_eq!(back, v);
    }

    #[test]
    fn cuts_land_on_character_boundaries_and_say_so() {
        assert_eq!(cap_str("héllo", 2), ("h", true));
        assert_eq!(cap_str("abc", 3), ("abc", false));
        let mut h = Html::new();
        h.pre(&"é".repeat(100), 11);
        let page = h.finish();
        assert!(page.contains("cut: 10 B of 200 B shown"), "{page}");
        assert_eq!(bytes(3 * 1024 * 1024), "3.0 MiB");
        assert_eq!(millis(65_000), "1m 05s");
    }
}
