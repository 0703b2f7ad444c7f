//! Egress allowlists: the host names a sandbox may reach through a
//! filtering proxy (`--allow-host`, a task's `network_mode = "allowlist"`
//! with `allowed_hosts`), as Harbor writes them.
//!
//! A pattern is a DNS name (`pypi.org`: that name only) or a leading
//! wildcard (`*.example.com`: every name below `example.com`, at any
//! depth, but not `example.com` itself), matched without regard to case,
//! as Harbor's docker environment (gost's matchers) does. Harbor also
//! takes IP addresses and CIDR ranges; runner refuses them: its proxy
//! decides by the name the client asked for, and an address is no name.
//! Any port of an admitted name is admitted, as in Harbor (whose proxy
//! takes every TCP connection).

/// Longest DNS name.
const MAX_NAME_BYTES: usize = 253;
/// Longest DNS label.
const MAX_LABEL_BYTES: usize = 63;

/// Why a host pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostPatternError {
    #[error("an allowed host is empty")]
    Empty,
    #[error("allowed host '{0}' is a URL, not a host name")]
    Url(String),
    #[error("allowed host '{0}' has a path")]
    Path(String),
    #[error("allowed host '{0}' has a port (or is an IPv6 address)")]
    Port(String),
    #[error("allowed host '{0}' is an IP address; the proxy admits names only")]
    Address(String),
    #[error("allowed host '{0}': a wildcard is only allowed as a leading '*.'")]
    Wildcard(String),
    #[error(
        "allowed host '{0}' is not a DNS name (labels of letters, digits and inner '-', \
         at most 63 each; the last one starting with a letter)"
    )]
    NotAName(String),
}

impl HostPatternError {
    /// What to write instead.
    pub fn hint(&self) -> &'static str {
        match self {
            HostPatternError::Address(_) => {
                "name the host (e.g. pypi.org): IP literals and CIDR ranges are refused"
            }
            HostPatternError::Port(_) => {
                "give the name alone (e.g. pypi.org): every port of an allowed name is allowed"
            }
            _ => {
                "give a DNS name such as pypi.org, or *.example.com for every name below example.com"
            }
        }
    }
}

/// `pattern` checked and normalized as Harbor does (trimmed, lower case,
/// one trailing dot dropped).
pub fn normalize_host_pattern(pattern: &str) -> Result<String, HostPatternError> {
    let p = pattern.trim().to_ascii_lowercase();
    let p = p.strip_suffix('.').unwrap_or(&p).to_string();
    if p.is_empty() {
        return Err(HostPatternError::Empty);
    }
    if p.contains("://") {
        return Err(HostPatternError::Url(p));
    }
    if p.contains('/') {
        return Err(HostPatternError::Path(p));
    }
    if p.contains(':') || p.contains('[') || p.contains(']') {
        return Err(HostPatternError::Port(p));
    }
    if p.parse::<std::net::IpAddr>().is_ok() {
        return Err(HostPatternError::Address(p));
    }
    let name = p.strip_prefix("*.").unwrap_or(&p);
    if name.contains('*') {
        return Err(HostPatternError::Wildcard(p));
    }
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Err(HostPatternError::Address(p));
    }
    if !is_dns_name(name) {
        return Err(HostPatternError::NotAName(p));
    }
    Ok(p)
}

/// Every pattern normalized, duplicates dropped, first error returned.
pub fn normalize_host_patterns(patterns: &[String]) -> Result<Vec<String>, HostPatternError> {
    let mut out: Vec<String> = Vec::new();
    for p in patterns {
        let p = normalize_host_pattern(p)?;
        if !out.contains(&p) {
            out.push(p);
        }
    }
    Ok(out)
}

/// Whether `name` is a DNS name whose last label starts with a letter:
/// no form of an IPv4 address (`10.0.0.1`, `0x0a000001`, `167772161`)
/// is one, so no pattern can admit an address written as a name.
fn is_dns_name(name: &str) -> bool {
    let labels: Vec<&str> = name.split('.').collect();
    name.len() <= MAX_NAME_BYTES
        && labels.iter().all(|l| {
            !l.is_empty()
                && l.len() <= MAX_LABEL_BYTES
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
        && labels
            .last()
            .is_some_and(|l| l.starts_with(|c: char| c.is_ascii_lowercase()))
}

/// Whether `name` can name the engine network an egress proxy reaches out
/// through: a plain object name (letters, digits, `-`, `_`, `.`), and not
/// `host` or `none` (`bridge`, the default, is one).
pub fn is_egress_network_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name != "host"
        && name != "none"
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// Whether the (normalized) `pattern` admits `host`, the name a client
/// asked for: exactly, or below the domain of a `*.` pattern.
pub fn host_matches(pattern: &str, host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    match pattern.strip_prefix("*.") {
        Some(domain) => host
            .strip_suffix(domain)
            .and_then(|rest| rest.strip_suffix('.'))
            .is_some_and(|sub| !sub.is_empty()),
        None => host == pattern,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_wildcards_are_normalized_like_harbor() {
        assert_eq!(normalize_host_pattern(" PyPI.org. ").unwrap(), "pypi.org");
        assert_eq!(
            normalize_host_pattern("*.Example.COM").unwrap(),
            "*.example.com"
        );
        assert_eq!(
            normalize_host_pattern("allowed.runner-test").unwrap(),
            "allowed.runner-test"
        );
        assert_eq!(normalize_host_pattern("db1").unwrap(), "db1");
        let dup = normalize_host_patterns(&["a.com".into(), "A.com".into()]).unwrap();
        assert_eq!(dup, vec!["a.com".to_string()]);
    }

    #[test]
    fn urls_ports_paths_addresses_and_odd_wildcards_are_refused() {
        use HostPatternError as E;
        let err = |p: &str| normalize_host_pattern(p).unwrap_err();
        assert_eq!(err(""), E::Empty);
        assert_eq!(err(" . "), E::Empty);
        assert!(matches!(err("https://pypi.org"), E::Url(_)));
        assert!(matches!(err("pypi.org/simple"), E::Path(_)));
        assert!(matches!(err("10.0.0.0/8"), E::Path(_)));
        assert!(matches!(err("pypi.org:443"), E::Port(_)));
        assert!(matches!(err("::1"), E::Port(_)));
        assert!(matches!(err("[::1]"), E::Port(_)));
        assert!(matches!(err("10.0.0.1"), E::Address(_)));
        assert!(matches!(err("*.10.0.0.1"), E::Address(_)));
        assert!(matches!(err("a*.example.com"), E::Wildcard(_)));
        assert!(matches!(err("*.*.example.com"), E::Wildcard(_)));
        assert!(matches!(err("*"), E::NotAName(_) | E::Wildcard(_)));
        assert!(matches!(err("*."), E::Wildcard(_)));
        assert!(matches!(err("*.."), E::NotAName(_)));
        for bad in [
            "a b.com",
            "-a.com",
            "a-.com",
            "a..com",
            "a_b.com",
            "0x0a000001",
            "167772161",
            "1.2.3.4.5",
            "x.123",
        ] {
            assert!(matches!(err(bad), E::NotAName(_)), "{bad}");
        }
        let long = format!("{}.com", "a".repeat(64));
        assert!(matches!(err(&long), E::NotAName(_)));
    }

    #[test]
    fn egress_networks_are_plain_names() {
        for ok in ["bridge", "runner-test-egress-1", "my_net.2"] {
            assert!(is_egress_network_name(ok), "{ok}");
        }
        for bad in ["", "host", "none", "container:abc", "a b", "a/b"] {
            assert!(!is_egress_network_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_wildcard_admits_names_below_its_domain_only() {
        assert!(host_matches("pypi.org", "pypi.org"));
        assert!(host_matches("pypi.org", "PyPI.org"));
        assert!(!host_matches("pypi.org", "files.pypi.org"));
        assert!(!host_matches("pypi.org", "pypi.org.evil.com"));
        assert!(host_matches("*.example.com", "a.example.com"));
        assert!(host_matches("*.example.com", "a.b.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
        assert!(!host_matches("*.example.com", "badexample.com"));
        assert!(!host_matches("*.example.com", ".example.com"));
        assert!(!host_matches("*.example.com", "example.com.evil.org"));
    }
}
