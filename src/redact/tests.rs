use super::*;

fn redactor(secrets: &[&str]) -> Redactor {
    Redactor::new(secrets.iter().map(|s| s.to_string()).collect()).expect("builds")
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn credential_names() {
    for yes in [
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "GITHUB_TOKEN",
        "ghtoken",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "PGPASSWORD",
        "DB_PASSWD",
        "DB_PASS",
        "SSHPASS",
        "GPG_PASSPHRASE",
        "NPM_CONFIG__AUTH",
        "OAUTH",
        "HTTP_AUTHORIZATION",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "SSH_PRIVATE",
        "MYAPIKEY",
        "deploy-token",
    ] {
        assert!(is_credential_name(yes), "{yes}");
    }
    for no in [
        "PATH",
        "HOME",
        "LANG",
        "TOKENIZERS_PARALLELISM",
        "GIT_AUTHOR_NAME",
        "XAUTHORITY",
        "KEYBOARD_LAYOUT",
        "PASSTHROUGH",
        "VISIBLE",
    ] {
        assert!(!is_credential_name(no), "{no}");
    }
}

#[test]
fn collect_takes_the_key_credential_host_vars_and_credential_env_pairs() {
    let c = collect(
        pairs(&[
            ("GITHUB_TOKEN", "ghp-host-123"),
            ("LANG", "C.UTF-8-long-enough"),
            ("TOKENIZERS_PARALLELISM", "false"),
            ("HOST_PASS", "abc"),
        ]),
        Some("sk-the-api-key"),
        &pairs(&[
            ("DEPLOY_TOKEN", "dep1"),
            ("DB_PASS", "x7q"),
            ("USE_AUTH", "1"),
            ("EMPTY_KEY", ""),
            ("VISIBLE", "not-a-secret"),
        ]),
    )
    .expect("collects");
    let r = c.redactor;
    assert_eq!(
        r.redact("ghp-host-123 sk-the-api-key dep1 x7q not-a-secret C.UTF-8-long-enough false"),
        "[REDACTED] [REDACTED] [REDACTED] x7q not-a-secret C.UTF-8-long-enough false"
    );
    // Only --env credentials are reported, and flags and empty values are
    // not credentials at all.
    assert_eq!(
        c.too_short,
        vec![TooShort {
            name: "DB_PASS".into(),
            chars: 3
        }]
    );
}

#[test]
fn the_minimum_counts_characters_not_bytes() {
    let c = collect(
        Vec::new(),
        None,
        &pairs(&[("PIN_TOKEN", "äöü"), ("K_KEY", "äöüß")]),
    )
    .expect("collects");
    assert_eq!(c.too_short.len(), 1);
    assert_eq!(c.redactor.redact("äöü äöüß"), "äöü [REDACTED]");
}

#[test]
fn text_redaction_plain_escaped_and_longest_first() {
    let r = redactor(&["tok", "token-42", "a\"quoted\\key"]);
    assert_eq!(r.redact("token-42 tok t-ok"), "[REDACTED] [REDACTED] t-ok");
    assert_eq!(r.redact("x a\"quoted\\key y"), "x [REDACTED] y");
    // As a command printing JSON would show it.
    assert_eq!(
        r.redact(r#"{"k":"a\"quoted\\key"}"#),
        r#"{"k":"[REDACTED]"}"#
    );
    assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
    assert!(matches!(
        Redactor::default().redact("tok"),
        Cow::Borrowed("tok")
    ));
}

#[test]
fn debug_never_shows_a_secret() {
    let r = redactor(&["hunter2-secret"]);
    let shown = format!("{r:?} {:?}", r.stream());
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("1 secrets"), "{shown}");
}

#[test]
fn json_redaction_keeps_the_document_valid() {
    // Secrets that look like JSON structure or numbers.
    let r = redactor(&["false", "1234", "hidden-key", "line\nbreak \"q\"", "nabc"]);
    let doc = serde_json::json!({
        "type": "tool_result",
        "timed_out": false,
        "duration_ms": 12345,
        "output": "ok false 1234 and line\nbreak \"q\" then \nabc",
        "hidden-key": ["hidden-key", 1234],
    });
    let text = serde_json::to_string(&doc).expect("serializes");
    let clean = r.redact_json(&text);
    let back: serde_json::Value = serde_json::from_str(&clean).expect("still JSON");
    assert_eq!(back["timed_out"], false);
    assert_eq!(back["duration_ms"], 12345);
    // "\nabc" holds no "nabc": the escape's `n` is not text.
    assert_eq!(
        back["output"],
        "ok [REDACTED] [REDACTED] and [REDACTED] then \nabc"
    );
    assert_eq!(back["[REDACTED]"], serde_json::json!(["[REDACTED]", 1234]));
    assert_eq!(back["type"], "tool_result");
    assert!(matches!(r.redact_json("{\"a\":1}"), Cow::Borrowed(_)));
}

/// One pass over the whole stream, as the reference.
fn one_shot(r: &Redactor, data: &[u8]) -> Vec<u8> {
    r.redact_bytes(data).into_owned()
}

fn streamed(r: &Redactor, chunks: &[&[u8]]) -> Vec<u8> {
    let mut s = r.stream().expect("has secrets");
    let mut out = Vec::new();
    for c in chunks {
        out.extend(s.push(c));
        assert!(
            s.pending.len() < s.patterns.longest,
            "holds back at most longest - 1 bytes"
        );
    }
    out.extend(s.finish());
    out
}

#[test]
fn a_secret_split_at_every_boundary_is_caught() {
    let r = redactor(&["sk-SECRET-123"]);
    let data = b"key=sk-SECRET-123 and again sk-SECRET-123!";
    for cut in 0..=data.len() {
        assert_eq!(
            streamed(&r, &[&data[..cut], &data[cut..]]),
            b"key=[REDACTED] and again [REDACTED]!",
            "cut={cut}"
        );
    }
}

#[test]
fn random_chunking_equals_one_shot() {
    let mut rng = fastrand::Rng::with_seed(11);
    let r = redactor(&["abc", "abcabd", "x", "dd\"a"]);
    for _ in 0..2000 {
        let data: Vec<u8> = (0..rng.usize(0..120))
            .map(|_| b"abcdx\"\\\xff"[rng.usize(0..8)])
            .collect();
        let mut chunks = Vec::new();
        let mut at = 0;
        while at < data.len() {
            let n = rng.usize(1..=(data.len() - at).min(9));
            chunks.push(&data[at..at + n]);
            at += n;
        }
        let want = one_shot(&r, &data);
        assert_eq!(streamed(&r, &chunks), want, "{data:?} in {chunks:?}");
        assert!(!want.windows(3).any(|w| w == b"abc"));
        assert!(!want.contains(&b'x'));
    }
}

#[test]
fn binary_bytes_pass_through_unchanged() {
    let r = redactor(&["secret-1"]);
    let data = b"A\xff\xfe\x00\x80Bsecret-1\xc3";
    assert_eq!(
        streamed(&r, &[&data[..3], &data[3..10], &data[10..]]),
        b"A\xff\xfe\x00\x80B[REDACTED]\xc3"
    );
}

#[test]
fn text_stream_never_cuts_a_character() {
    let r = redactor(&["pässwörd-42"]);
    let text = "héllo pässwörd-42 wörld ✓";
    let bytes = text.as_bytes();
    for cut in 1..bytes.len() {
        if !text.is_char_boundary(cut) {
            continue;
        }
        let mut s = TextStream::new(&r).expect("has secrets");
        let shown = [s.push(&text[..cut]), s.push(&text[cut..]), s.finish()];
        assert_eq!(shown.concat(), "héllo [REDACTED] wörld ✓", "cut={cut}");
    }
    assert!(TextStream::new(&Redactor::default()).is_none());
}
