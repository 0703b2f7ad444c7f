//! `${VAR}` and `${VAR:-default}` in task.toml's `env` tables, resolved from
//! the host environment as Harbor's `resolve_env_vars` does: only a value
//! that is wholly one template is resolved (anything else is a literal), a
//! set variable wins even when empty, and the default is used only when the
//! variable is unset.

/// A value's template: the variable and its default, if the whole value is
/// `${NAME}` or `${NAME:-default}` (Harbor's `\$\{([^}:]+)(?::-(.*))?\}`,
/// matched in full; `.` does not match a newline).
pub fn template(value: &str) -> Option<(&str, Option<&str>)> {
    let inner = value.strip_prefix("${")?.strip_suffix('}')?;
    let end = inner.find([':', '}']).unwrap_or(inner.len());
    let (name, rest) = inner.split_at(end);
    if name.is_empty() {
        return None;
    }
    if rest.is_empty() {
        return Some((name, None));
    }
    let default = rest.strip_prefix(":-")?;
    if default.contains('\n') {
        return None;
    }
    Some((name, Some(default)))
}

/// `value` resolved with `lookup`; `Err(VAR)` names an unset variable that
/// has no default.
pub fn resolve(value: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    match template(value) {
        None => Ok(value.to_string()),
        Some((name, default)) => match (lookup(name), default) {
            (Some(v), _) => Ok(v),
            (None, Some(d)) => Ok(d.to_string()),
            (None, None) => Err(name.to_string()),
        },
    }
}

/// Host variables whose names say they hold secrets, handed to tasks
/// anyway (`runner eval --pass-env NAME`); set once, before tasks load.
static SECRETS_ALLOWED: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Allows `${NAME}` for these secret-named host variables (first call wins).
pub fn allow_secrets(names: Vec<String>) {
    let _ = SECRETS_ALLOWED.set(names);
}

/// Whether the secret-named host variable `name` may reach a task.
pub fn secret_allowed(name: &str) -> bool {
    SECRETS_ALLOWED
        .get()
        .is_some_and(|names| names.iter().any(|n| n == name))
}

/// The host's value of `name`: unset when the name cannot be one (empty,
/// `=` or NUL in it) or the value is not UTF-8.
pub fn host_var(name: &str) -> Option<String> {
    if name.is_empty() || name.contains(['=', '\0']) {
        return None;
    }
    std::env::var(name).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "SET" => Some("value".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn templates_resolve_as_harbor_resolves_them() {
        assert_eq!(resolve("${SET}", env), Ok("value".into()));
        assert_eq!(resolve("${SET:-d}", env), Ok("value".into()));
        assert_eq!(resolve("${UNSET:-d}", env), Ok("d".into()));
        assert_eq!(resolve("${UNSET:-}", env), Ok(String::new()));
        // Set but empty is set: the default is not used.
        assert_eq!(resolve("${EMPTY:-d}", env), Ok(String::new()));
        assert_eq!(resolve("${UNSET}", env), Err("UNSET".into()));
        // Only a whole-value template is resolved; the rest is literal.
        assert_eq!(resolve("x${SET}", env), Ok("x${SET}".into()));
        assert_eq!(resolve("${SET}x", env), Ok("${SET}x".into()));
        assert_eq!(resolve("$SET", env), Ok("$SET".into()));
        assert_eq!(resolve("${}", env), Ok("${}".into()));
        assert_eq!(resolve("${A:b}", env), Ok("${A:b}".into()));
        // The default runs to the last brace.
        assert_eq!(resolve("${UNSET:-a}b}", env), Ok("a}b".into()));
        assert_eq!(resolve("${UNSET:-a\nb}", env), Ok("${UNSET:-a\nb}".into()));
        assert_eq!(template("${A}"), Some(("A", None)));
        assert_eq!(template("${A:-}"), Some(("A", Some(""))));
    }

    #[test]
    fn impossible_names_are_unset() {
        assert_eq!(host_var(""), None);
        assert_eq!(host_var("A=B"), None);
        assert_eq!(host_var("A\0"), None);
        assert!(host_var("PATH").is_some());
    }
}
