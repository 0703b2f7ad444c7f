//! Secret redaction: one [`Redactor`] per run (and one per eval suite),
//! applied while writing to every sink: command output (the model's view
//! and the full-output files), the trajectory, `--json` stdout, the human
//! output on stderr, eval reports and verifier logs.
//!
//! What is secret ([`collect`]): the runner's API key, the values of the
//! runner's own environment variables whose names look like credentials
//! ([`is_credential_name`]), and the values of such names among the `--env`
//! pairs given to commands. Values shorter than [`MIN_SECRET_CHARS`] would
//! match ordinary text: they are not redacted, and a `--env` one is
//! reported back ([`Collected::too_short`]) so the user can be told.
//!
//! Each secret is matched as written and in its JSON-escaped form (a
//! command printing JSON, a serialized event). Matching is exact,
//! leftmost-longest, with one Aho-Corasick automaton for all patterns.
//! Encoded copies (base64, hex, URL-encoding, compressed), a secret the
//! command splits with other text or reverses, and short values are not
//! caught: redaction guards against accidents, not against a command that
//! wants to exfiltrate a value it was given.

use std::borrow::Cow;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};

/// What a secret becomes.
pub const REDACTED: &str = "[REDACTED]";

/// Shortest value (in characters) that is redacted: below it a value
/// matches too much ordinary text to be replaced, or to be hidden at all.
pub const MIN_SECRET_CHARS: usize = 4;

/// Values of credential-looking names that are plain flags, not secrets
/// (`USE_AUTH=1`, `..._TOKEN_CACHE=false`): neither redacted nor warned about.
const FLAG_VALUES: &[&str] = &[
    "true", "false", "yes", "no", "on", "off", "none", "null", "0", "1",
];

/// Parts of a name that mark a credential wherever they appear.
const CREDENTIAL_ANYWHERE: &[&str] = &[
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "PRIVATE",
    "APIKEY",
    "AUTHORIZATION",
];

/// Endings of a word of a name (`_`-separated) that mark a credential:
/// `GITHUB_TOKEN`, `GHTOKEN`, `API_KEY`, `DB_PASS`, `NPM_AUTH`, but not
/// `TOKENIZERS_PARALLELISM`, `KEYBOARD` or `GIT_AUTHOR_NAME`.
const CREDENTIAL_WORD_ENDS: &[&str] = &["KEY", "KEYS", "TOKEN", "TOKENS", "PASS", "AUTH"];

/// Whether an environment variable's name says it holds a credential.
pub fn is_credential_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    CREDENTIAL_ANYWHERE.iter().any(|w| upper.contains(w))
        || upper
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|word| CREDENTIAL_WORD_ENDS.iter().any(|end| word.ends_with(end)))
}

/// The redactor could not be built (the automaton outgrew its limits; with
/// environment-sized secrets this does not happen).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the secret redactor: {0}")]
pub struct RedactError(#[from] aho_corasick::BuildError);

/// A credential given to commands that is too short to redact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooShort {
    /// The variable's name.
    pub name: String,
    /// Its value's length in characters.
    pub chars: usize,
}

/// The secrets of one run or suite.
#[derive(Debug, Clone)]
pub struct Collected {
    pub redactor: Redactor,
    /// `--env` credentials left unredacted because they are too short.
    pub too_short: Vec<TooShort>,
}

/// Collects the secrets of a run: `api_key`, the credential-looking
/// variables of the runner's environment `host_env`, and the
/// credential-looking pairs of `command_env` (the `--env` pairs).
pub fn collect(
    host_env: impl IntoIterator<Item = (String, String)>,
    api_key: Option<&str>,
    command_env: &[(String, String)],
) -> Result<Collected, RedactError> {
    let mut secrets: Vec<String> = api_key.map(str::to_string).into_iter().collect();
    secrets.extend(
        host_env
            .into_iter()
            .filter(|(name, _)| is_credential_name(name))
            .map(|(_, value)| value),
    );
    let mut too_short = Vec::new();
    for (name, value) in command_env {
        if !is_credential_name(name) {
            continue;
        }
        let chars = value.chars().count();
        if chars > 0 && chars < MIN_SECRET_CHARS && !is_flag(value) {
            too_short.push(TooShort {
                name: name.clone(),
                chars,
            });
        }
        secrets.push(value.clone());
    }
    secrets.retain(|s| s.chars().count() >= MIN_SECRET_CHARS && !is_flag(s));
    Ok(Collected {
        redactor: Redactor::new(secrets)?,
        too_short,
    })
}

/// The values of the credential-looking pairs among `pairs` that are long
/// enough to redact (a task's `[verifier].env`, say).
pub fn credential_values<'a>(
    pairs: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Vec<String> {
    pairs
        .into_iter()
        .filter(|(name, value)| {
            is_credential_name(name) && value.chars().count() >= MIN_SECRET_CHARS && !is_flag(value)
        })
        .map(|(_, value)| value.clone())
        .collect()
}

fn is_flag(value: &str) -> bool {
    FLAG_VALUES.iter().any(|f| value.eq_ignore_ascii_case(f))
}

/// Replaces known secrets with [`REDACTED`]. Cheap to clone (shared); the
/// default redacts nothing. Its `Debug` never shows a secret.
#[derive(Clone, Default)]
pub struct Redactor {
    patterns: Option<Arc<Patterns>>,
}

struct Patterns {
    automaton: AhoCorasick,
    /// Length in bytes of the longest pattern.
    longest: usize,
    /// The secrets themselves (not their escaped forms), so more can be
    /// added ([`Redactor::with`]).
    secrets: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.patterns.as_ref().map_or(0, |p| p.secrets.len());
        write!(f, "Redactor({n} secrets)")
    }
}

impl Redactor {
    /// A redactor for exactly these secrets (empty ones ignored; no
    /// minimum length: that is [`collect`]'s policy).
    pub fn new(secrets: Vec<String>) -> Result<Redactor, RedactError> {
        let mut secrets: Vec<String> = secrets.into_iter().filter(|s| !s.is_empty()).collect();
        secrets.sort();
        secrets.dedup();
        if secrets.is_empty() {
            return Ok(Redactor::default());
        }
        let mut patterns = secrets.clone();
        for s in &secrets {
            // Inside JSON strings (and in JSON a command prints) a quote,
            // backslash or control character is escaped.
            if let Ok(quoted) = serde_json::to_string(s) {
                let escaped = &quoted[1..quoted.len() - 1];
                if escaped != s {
                    patterns.push(escaped.to_string());
                }
            }
        }
        let automaton = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&patterns)?;
        Ok(Redactor {
            patterns: Some(Arc::new(Patterns {
                longest: automaton.max_pattern_len(),
                automaton,
                secrets,
            })),
        })
    }

    /// This redactor plus `more` secrets (under the same rules as
    /// [`Redactor::new`]: the caller applies any minimum length).
    pub fn with(&self, more: Vec<String>) -> Result<Redactor, RedactError> {
        let mut all = self
            .patterns
            .as_ref()
            .map(|p| p.secrets.clone())
            .unwrap_or_default();
        all.extend(more);
        Redactor::new(all)
    }

    /// True when there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_none()
    }

    /// `text` with every secret replaced; borrowed when none occurs.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match self.redact_bytes(text.as_bytes()) {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            // Patterns are whole UTF-8 strings, so they match on character
            // boundaries of valid UTF-8 and the result stays valid.
            Cow::Owned(bytes) => Cow::Owned(
                String::from_utf8(bytes)
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            ),
        }
    }

    /// `bytes` with every secret replaced; borrowed when none occurs.
    pub fn redact_bytes<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        let Some(p) = &self.patterns else {
            return Cow::Borrowed(bytes);
        };
        let mut out = Vec::new();
        let (mut copied, mut found) = (0, false);
        for m in p.automaton.find_iter(bytes) {
            out.extend_from_slice(&bytes[copied..m.start()]);
            out.extend_from_slice(REDACTED.as_bytes());
            copied = m.end();
            found = true;
        }
        if !found {
            return Cow::Borrowed(bytes);
        }
        out.extend_from_slice(&bytes[copied..]);
        Cow::Owned(out)
    }

    /// Redacts the string literals (values and keys) of serialized JSON,
    /// leaving its structure alone: a secret that happens to look like
    /// `false` or `1234` never turns a number or a keyword into invalid
    /// JSON. Each literal that may hold a secret is decoded, redacted and
    /// encoded again.
    pub fn redact_json<'a>(&self, json: &'a str) -> Cow<'a, str> {
        let Some(p) = &self.patterns else {
            return Cow::Borrowed(json);
        };
        if !p.automaton.is_match(json) {
            return Cow::Borrowed(json);
        }
        let b = json.as_bytes();
        let mut out = String::with_capacity(json.len());
        let (mut i, mut copied, mut found) = (0, 0, false);
        while i < b.len() {
            if b[i] != b'"' {
                i += 1;
                continue;
            }
            let start = i;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            let end = (i + 1).min(b.len());
            i = end;
            // Quotes and backslashes are ASCII: these are char boundaries.
            let Some(literal) = json.get(start..end) else {
                continue;
            };
            // A content holding a secret holds its escaped form here.
            if !p.automaton.is_match(literal) {
                continue;
            }
            let replacement = match serde_json::from_str::<String>(literal) {
                Ok(text) => match self.redact(&text) {
                    Cow::Borrowed(_) => continue,
                    Cow::Owned(clean) => {
                        serde_json::to_string(&clean).unwrap_or_else(|_| format!("\"{REDACTED}\""))
                    }
                },
                // Not a literal serde_json wrote: drop it whole.
                Err(_) => format!("\"{REDACTED}\""),
            };
            out.push_str(&json[copied..start]);
            out.push_str(&replacement);
            copied = end;
            found = true;
        }
        if !found {
            return Cow::Borrowed(json);
        }
        out.push_str(&json[copied..]);
        Cow::Owned(out)
    }

    /// A streaming redactor for one byte stream, or `None` when there is
    /// nothing to redact.
    pub fn stream(&self) -> Option<StreamRedactor> {
        self.patterns.as_ref().map(|p| StreamRedactor {
            patterns: p.clone(),
            pending: Vec::new(),
        })
    }
}

/// Redacts a byte stream fed in chunks. It holds back at most the longest
/// pattern's length minus one byte, so a secret split across chunks is
/// still caught, and never looks at more than that plus one chunk.
pub struct StreamRedactor {
    patterns: Arc<Patterns>,
    pending: Vec<u8>,
}

impl std::fmt::Debug for StreamRedactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StreamRedactor({} bytes held)", self.pending.len())
    }
}

impl StreamRedactor {
    /// Takes the next chunk; returns what can be decided now, redacted.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(chunk);
        // A match starting before `limit` has every byte it could cover in
        // `pending`, so it is the one a single pass over the whole stream
        // would find; later positions wait for more bytes.
        let limit = self
            .pending
            .len()
            .saturating_sub(self.patterns.longest.saturating_sub(1));
        self.emit(limit)
    }

    /// End of stream: returns everything held back, redacted.
    pub fn finish(&mut self) -> Vec<u8> {
        self.emit(self.pending.len())
    }

    fn emit(&mut self, limit: usize) -> Vec<u8> {
        let buf = &self.pending;
        let mut out = Vec::with_capacity(limit + REDACTED.len());
        let mut copied = 0;
        for m in self.patterns.automaton.find_iter(buf.as_slice()) {
            if m.start() >= limit {
                break;
            }
            out.extend_from_slice(&buf[copied..m.start()]);
            out.extend_from_slice(REDACTED.as_bytes());
            copied = m.end();
        }
        let cut = copied.max(limit);
        out.extend_from_slice(&buf[copied..cut]);
        self.pending.drain(..cut);
        out
    }
}

/// A [`StreamRedactor`] for text: what it returns always ends on a
/// character boundary (the stream must be valid UTF-8, as model text is).
#[derive(Debug)]
pub struct TextStream {
    inner: StreamRedactor,
    /// The start of a character cut by the byte stream's hold-back.
    partial: Vec<u8>,
}

impl TextStream {
    /// A text stream redacting `redactor`'s secrets, or `None` when there
    /// is nothing to redact.
    pub fn new(redactor: &Redactor) -> Option<TextStream> {
        redactor.stream().map(|inner| TextStream {
            inner,
            partial: Vec::new(),
        })
    }

    /// Takes the next piece of text; returns what can be shown now.
    pub fn push(&mut self, text: &str) -> String {
        let bytes = self.inner.push(text.as_bytes());
        self.complete(bytes, false)
    }

    /// End of the text: returns everything held back.
    pub fn finish(&mut self) -> String {
        let bytes = self.inner.finish();
        self.complete(bytes, true)
    }

    fn complete(&mut self, bytes: Vec<u8>, last: bool) -> String {
        self.partial.extend_from_slice(&bytes);
        let all = std::mem::take(&mut self.partial);
        match String::from_utf8(all) {
            Ok(s) => s,
            // Only the last character is incomplete: keep it for later.
            Err(e) if e.utf8_error().error_len().is_none() && !last => {
                let valid = e.utf8_error().valid_up_to();
                let mut all = e.into_bytes();
                self.partial = all.split_off(valid);
                String::from_utf8(all).unwrap_or_default()
            }
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }
}

#[cfg(test)]
mod tests;
