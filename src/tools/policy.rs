//! The permission policy: a deny list of command patterns that are refused
//! before they reach any executor. Not a sandbox: a guard against the
//! obviously destructive, which matters most on the local executor.

use regex::Regex;

/// Patterns refused unless `--no-default-deny` is given.
pub const DEFAULT_DENY: &[&str] = &[
    // rm -rf / (and /*), with any flag order or --no-preserve-root
    r"\brm\s+(-[a-zA-Z-]+\s+)*(--no-preserve-root\s+)?(-[a-zA-Z-]+\s+)*/(\*)?(\s|;|&|\||$)",
    r"(^|[\s;&|(])sudo(\s|$)",
    r"(^|[\s;&|(])su\s+(-|root)",
    r"(^|[\s;&|(])(shutdown|reboot|halt|poweroff)(\s|;|&|\||$)",
    r"\binit\s+[06]\b",
    r">\s*/dev/(sd|hd|nvme|vd|xvd)[a-z0-9]*",
    r"\bmkfs(\.[a-z0-9]+)?\s",
    r"\bdd\b[^\n]*\bof=/dev/(sd|hd|nvme|vd|xvd)",
];

/// A compiled deny list.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    deny: Vec<Regex>,
}

/// A pattern that is not a valid regular expression.
#[derive(Debug, thiserror::Error)]
#[error("invalid --deny pattern '{pattern}': {detail}")]
pub struct PolicyError {
    pub pattern: String,
    pub detail: String,
}

impl Policy {
    /// Builds the policy from the defaults (when `defaults`) plus `extra`.
    pub fn new(defaults: bool, extra: &[String]) -> Result<Self, PolicyError> {
        let base = if defaults { DEFAULT_DENY } else { &[] };
        let patterns = base
            .iter()
            .map(|s| s.to_string())
            .chain(extra.iter().cloned());
        let mut deny = Vec::new();
        for pattern in patterns {
            let re = Regex::new(&pattern).map_err(|e| PolicyError {
                detail: e.to_string(),
                pattern,
            })?;
            deny.push(re);
        }
        Ok(Policy { deny })
    }

    /// The pattern that blocks `command`, if any.
    pub fn check(&self, command: &str) -> Option<&str> {
        self.deny
            .iter()
            .find(|re| re.is_match(command))
            .map(|re| re.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_block_the_destructive() {
        let p = Policy::new(true, &[]).expect("defaults compile");
        for cmd in [
            "rm -rf /",
            "rm -rf /*",
            "rm -fr / ",
            "rm -r -f --no-preserve-root /",
            "cd x && sudo apt-get install y",
            "sudo -i",
            "shutdown -h now",
            "reboot",
            "echo x > /dev/sda",
            "mkfs.ext4 /dev/sdb1",
            "dd if=/dev/zero of=/dev/sda bs=1M",
        ] {
            assert!(p.check(cmd).is_some(), "should block: {cmd}");
        }
    }

    #[test]
    fn defaults_allow_ordinary_work() {
        let p = Policy::new(true, &[]).expect("defaults compile");
        for cmd in [
            "rm -rf /tmp/build",
            "rm -rf ./target",
            "ls /",
            "echo pseudo sudoku",
            "grep -r reboot_handler src/",
            "cat /dev/null > out.txt",
            "python3 -m pytest",
        ] {
            assert!(p.check(cmd).is_none(), "should allow: {cmd}");
        }
    }

    #[test]
    fn extra_patterns_and_bad_patterns() {
        let p = Policy::new(false, &[r"\bcurl\b".into()]).expect("compiles");
        assert!(p.check("curl example").is_some());
        assert!(p.check("sudo ls").is_none());
        assert!(Policy::new(false, &["(".into()]).is_err());
    }
}
