//! The images a Dockerfile builds on, read from its text: every `FROM`
//! (with `ARG` values substituted where that is simple) and every
//! `COPY --from=` naming an image rather than a stage. A task image's
//! cache key includes what these resolve to, so a rebuilt base image
//! means a rebuilt task image.

use std::collections::HashMap;

/// The images `text` (a Dockerfile) starts from or copies from, in order,
/// without duplicates, stage names or `scratch`. `build_args` override
/// the defaults of the global `ARG`s (those before the first `FROM`,
/// which are the only ones a `FROM` can use).
pub fn base_images(text: &str, build_args: &HashMap<String, String>) -> Vec<String> {
    let mut args: HashMap<String, String> = HashMap::new();
    let mut stages: Vec<String> = Vec::new();
    let mut out: Vec<String> = Vec::new();
    let mut seen_from = false;
    for line in instructions(text) {
        let mut words = line.split_whitespace();
        let Some(op) = words.next() else { continue };
        let rest: Vec<&str> = words.collect();
        match op.to_ascii_uppercase().as_str() {
            "ARG" if !seen_from => {
                for decl in rest {
                    let (name, default) = match decl.split_once('=') {
                        Some((n, v)) => (n, Some(unquote(v))),
                        None => (decl, None),
                    };
                    let value = build_args
                        .get(name)
                        .cloned()
                        .or(default)
                        .unwrap_or_default();
                    args.insert(name.to_string(), value);
                }
            }
            "FROM" => {
                seen_from = true;
                let mut plain = rest.iter().filter(|w| !w.starts_with("--"));
                let Some(image) = plain.next() else { continue };
                let image = substitute(image, &args);
                let is_as = plain.next().is_some_and(|w| w.eq_ignore_ascii_case("as"));
                let stage = if is_as { plain.next() } else { None };
                add(&mut out, &stages, &image);
                if let Some(s) = stage {
                    stages.push(s.to_ascii_lowercase());
                }
            }
            "COPY" | "ADD" => {
                for w in rest.iter().take_while(|w| w.starts_with("--")) {
                    if let Some(from) = w.strip_prefix("--from=") {
                        let from = substitute(from, &args);
                        if from.parse::<usize>().is_err() {
                            add(&mut out, &stages, &from);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Records `image` unless it is empty, `scratch`, a stage or already there.
fn add(out: &mut Vec<String>, stages: &[String], image: &str) {
    let lower = image.to_ascii_lowercase();
    if image.is_empty()
        || lower == "scratch"
        || stages.contains(&lower)
        || out.iter().any(|o| o == image)
    {
        return;
    }
    out.push(image.to_string());
}

/// The Dockerfile's instructions, one string each: continuation lines
/// joined, comments and blank lines dropped, the `escape` directive
/// honoured.
fn instructions(text: &str) -> Vec<String> {
    let escape = text
        .lines()
        .take_while(|l| l.trim_start().starts_with('#'))
        .find_map(|l| {
            let d = l.trim_start().trim_start_matches('#').trim();
            let (k, v) = d.split_once('=')?;
            (k.trim().eq_ignore_ascii_case("escape")).then(|| v.trim().chars().next())?
        })
        .unwrap_or('\\');
    let mut out = Vec::new();
    let mut cur = String::new();
    for raw in text.lines() {
        let t = raw.trim();
        if t.starts_with('#') {
            continue;
        }
        if let Some(body) = t.strip_suffix(escape) {
            cur.push_str(body);
            cur.push(' ');
            continue;
        }
        cur.push_str(t);
        if !cur.trim().is_empty() {
            out.push(cur.trim().to_string());
        }
        cur.clear();
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// `word` with `$NAME`, `${NAME}`, `${NAME:-default}` and `${NAME:+alt}`
/// replaced from `args` (an unknown name is empty, as in Docker).
fn substitute(word: &str, args: &HashMap<String, String>) -> String {
    let word = unquote(word);
    let mut out = String::new();
    let mut chars = word.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'{') {
            chars.next();
            let inner: String = chars.by_ref().take_while(|c| *c != '}').collect();
            let (name, op) = match inner.find(':') {
                Some(i) => (&inner[..i], Some(&inner[i..])),
                None => (inner.as_str(), None),
            };
            let value = args.get(name).filter(|v| !v.is_empty());
            match (op, value) {
                (Some(op), None) if op.starts_with(":-") => out.push_str(&op[2..]),
                (Some(op), Some(_)) if op.starts_with(":+") => out.push_str(&op[2..]),
                (Some(op), None) if op.starts_with(":+") => {}
                (_, Some(v)) => out.push_str(v),
                (_, None) => {}
            }
        } else {
            let name: String =
                std::iter::from_fn(|| chars.next_if(|c| c.is_ascii_alphanumeric() || *c == '_'))
                    .collect();
            if name.is_empty() {
                out.push('$');
            } else if let Some(v) = args.get(&name) {
                out.push_str(v);
            }
        }
    }
    out
}

/// `s` without one pair of surrounding quotes.
fn unquote(s: &str) -> String {
    for q in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return inner.to_string();
        }
    }
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bases(text: &str) -> Vec<String> {
        base_images(text, &HashMap::new())
    }

    #[test]
    fn every_from_is_an_image_unless_it_names_a_stage() {
        let text = "\
# syntax=docker/dockerfile:1
ARG BASE=python:3.12-slim
ARG TAG
FROM --platform=linux/amd64 ${BASE} AS Build
RUN echo hi \\
    && echo there
from build as second
FROM debian:bookworm
COPY --from=build /a /a
COPY --from=0 /b /b
COPY --chown=1:1 --from=busybox:1.36 /bin/busybox /bin/
FROM scratch
FROM alpine:${TAG:-3.20}
FROM debian:bookworm
";
        assert_eq!(
            bases(text),
            [
                "python:3.12-slim",
                "debian:bookworm",
                "busybox:1.36",
                "alpine:3.20"
            ]
        );
    }

    #[test]
    fn build_args_and_directives() {
        let args = HashMap::from([("BASE".to_string(), "mine:v2".to_string())]);
        let text = "ARG BASE=\"ubuntu:22.04\"\nFROM $BASE\nARG LATE=x\nFROM img:$LATE\n";
        // An ARG after the first FROM is not seen by a FROM (Docker's rule).
        assert_eq!(base_images(text, &args), ["mine:v2", "img:"]);
        assert_eq!(bases(text), ["ubuntu:22.04", "img:"]);
        let text = "# escape=`\nFROM `\n  windows:ltsc AS w\nFROM w\n";
        assert_eq!(bases(text), ["windows:ltsc"]);
        assert_eq!(
            bases("FROM ${A:+set}x\nFROM ${NOPE}y\n#FROM commented\n"),
            ["x", "y"]
        );
        assert!(bases("").is_empty());
    }
}
