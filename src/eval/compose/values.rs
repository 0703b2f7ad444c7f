//! The small value languages inside a Compose file: `${VAR}`
//! interpolation, shell-like command strings, durations (`1m30s`) and
//! env files. Interpolation reads only the variables runner hands it
//! (the task's own), never the host's environment.

use std::collections::BTreeMap;
use std::time::Duration;

/// Replaces `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR-default}`,
/// `${VAR:?message}`, `${VAR?message}` and `$$` in `text` from `vars`.
/// An unset variable without a default becomes empty and is named in
/// `unset` (as Compose warns); `:?`/`?` fail with the message.
pub fn interpolate(
    text: &str,
    vars: &BTreeMap<String, String>,
    unset: &mut Vec<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(r) = after.strip_prefix('$') {
            out.push('$');
            rest = r;
        } else if let Some(r) = after.strip_prefix('{') {
            let end = r
                .find('}')
                .ok_or_else(|| format!("unclosed '${{' in {text:?}"))?;
            out.push_str(&braced(&r[..end], vars, unset)?);
            rest = &r[end + 1..];
        } else {
            let len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            if len == 0 {
                out.push('$');
            } else {
                out.push_str(&lookup(&after[..len], vars, unset));
            }
            rest = &after[len..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The value of a variable, recording it when unset.
fn lookup(name: &str, vars: &BTreeMap<String, String>, unset: &mut Vec<String>) -> String {
    match vars.get(name) {
        Some(v) => v.clone(),
        None => {
            if !unset.iter().any(|u| u == name) {
                unset.push(name.to_string());
            }
            String::new()
        }
    }
}

/// The inside of `${...}`.
fn braced(
    expr: &str,
    vars: &BTreeMap<String, String>,
    unset: &mut Vec<String>,
) -> Result<String, String> {
    let name_len = expr
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(expr.len());
    let (name, op) = expr.split_at(name_len);
    if name.is_empty() {
        return Err(format!("'${{{expr}}}' names no variable"));
    }
    let value = vars.get(name);
    let empty_counts = op.starts_with(':');
    let op = op.strip_prefix(':').unwrap_or(op);
    let missing = value.is_none_or(|v| empty_counts && v.is_empty());
    if op.is_empty() {
        return Ok(lookup(name, vars, unset));
    }
    let (kind, arg) = op.split_at(1);
    match kind {
        "-" if missing => interpolate(arg, vars, unset),
        "-" => Ok(value.cloned().unwrap_or_default()),
        "?" if missing => Err(format!(
            "variable {name} is required: {}",
            if arg.is_empty() { "not set" } else { arg }
        )),
        "?" => Ok(value.cloned().unwrap_or_default()),
        "+" if missing => Ok(String::new()),
        "+" => interpolate(arg, vars, unset),
        _ => Err(format!("unsupported substitution '${{{expr}}}'")),
    }
}

/// Splits a command string the way a POSIX shell splits words (quotes and
/// backslashes; no expansion), as Compose does with `command: "a b"`.
pub fn split_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err(format!("unclosed single quote in {s:?}")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => cur.push(c),
                            Some(c) => {
                                cur.push('\\');
                                cur.push(c);
                            }
                            None => return Err(format!("unclosed double quote in {s:?}")),
                        },
                        Some(c) => cur.push(c),
                        None => return Err(format!("unclosed double quote in {s:?}")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    cur.push(c);
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// Parses a Compose duration (`1m30s`, `500ms`, `2h`, `10s`; a bare number
/// is seconds).
pub fn duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let bad = || format!("'{s}' is not a duration (e.g. 1m30s, 500ms)");
    let mut total = Duration::ZERO;
    let mut rest = s;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let value: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total += Duration::try_from_secs_f64(value * scale).map_err(|_| bad())?;
    }
    Ok(total)
}

/// Parses an env file (`KEY=VALUE` lines, `#` comments, `export `,
/// quoted values kept literally). No expansion: nothing of the host's
/// environment can come in through it.
pub fn env_file(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((k, v)) = line.split_once('=') else {
            return Err(format!("line {}: expected KEY=VALUE", n + 1));
        };
        let k = k.trim();
        if k.is_empty() || k.contains(char::is_whitespace) {
            return Err(format!("line {}: invalid name '{k}'", n + 1));
        }
        let v = v.trim();
        let v = ['"', '\'']
            .iter()
            .find_map(|q| v.strip_prefix(*q).and_then(|x| x.strip_suffix(*q)))
            .unwrap_or(v);
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolation_follows_compose() {
        let vars = BTreeMap::from([
            ("A".to_string(), "1".to_string()),
            ("E".to_string(), String::new()),
        ]);
        let mut unset = Vec::new();
        let mut i = |s: &str| interpolate(s, &vars, &mut unset);
        assert_eq!(i("x${A}y$A").unwrap(), "x1y1");
        assert_eq!(i("${B:-d}${E:-e}${E-f}").unwrap(), "de");
        assert_eq!(i("$$HOME ${A:+set}").unwrap(), "$HOME set");
        assert_eq!(i("${B}").unwrap(), "");
        assert!(i("${B:?needed}").unwrap_err().contains("needed"));
        assert!(i("${A").is_err());
        assert_eq!(unset, ["B"]);
    }

    #[test]
    fn words_durations_and_env_files() {
        assert_eq!(
            split_words(r#"sh -c 'echo "hi there"' a\ b "x\"y""#).unwrap(),
            ["sh", "-c", "echo \"hi there\"", "a b", "x\"y"]
        );
        assert!(split_words("'open").is_err());
        assert_eq!(duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(duration("5").unwrap(), Duration::from_secs(5));
        assert!(duration("5 parsecs").is_err() && duration("").is_err());
        let env = env_file("# c\nexport A=1\nB=\"two words\"\nC=$HOME\n").unwrap();
        assert_eq!(
            env,
            [
                ("A".into(), "1".into()),
                ("B".into(), "two words".into()),
                ("C".into(), "$HOME".into())
            ]
        );
        assert!(env_file("novalue").is_err());
    }
}
