//! What every container runner starts is held to, whatever asked for it:
//! the capability ceiling (Docker's own default set, never more), no new
//! privileges, never privileged, and the seccomp profile of the run. Each
//! HostConfig runner builds (the sandbox, a verifier's, a sidecar, the
//! egress proxy, a probe container) passes through [`harden`] last, so a
//! capability added anywhere upstream cannot get past it.

use bollard::models::HostConfig;

use crate::exec::seccomp::Seccomp;

/// The capability ceiling: Docker's default set. No container runner
/// starts holds a capability outside it.
pub const CAPABILITY_CEILING: [&str; 14] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

/// Capabilities that reach the host or the kernel itself, never given
/// (none is in [`CAPABILITY_CEILING`]; named so the tests say why).
/// DAC_READ_SEARCH is the one the engine's seccomp profile turns into
/// `open_by_handle_at`, a way out of any bind mount.
pub const NEVER_CAPS: [&str; 7] = [
    "DAC_READ_SEARCH",
    "SYS_ADMIN",
    "SYS_PTRACE",
    "SYS_MODULE",
    "NET_ADMIN",
    "BPF",
    "PERFMON",
];

/// A capability's Docker name: upper case, without `CAP_`.
fn normal(name: &str) -> String {
    let upper = name.trim().to_ascii_uppercase();
    upper
        .strip_prefix("CAP_")
        .map(str::to_string)
        .unwrap_or(upper)
}

/// Whether `name` is under the ceiling.
pub fn allowed(name: &str) -> bool {
    let n = normal(name);
    CAPABILITY_CEILING.contains(&n.as_str()) && !NEVER_CAPS.contains(&n.as_str())
}

/// `requested` clamped to the ceiling, each once, in their order.
pub fn clamp(requested: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in requested {
        let n = normal(c);
        if allowed(&n) && !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// Applies the ceiling and the run's filter to `hc`: every capability
/// dropped and only those under the ceiling added back, not privileged,
/// no new privileges, and `seccomp`'s profile inline (the engine's own
/// when it is [`Seccomp::EngineDefault`]). Any other security option is
/// replaced.
pub fn harden(hc: &mut HostConfig, seccomp: &Seccomp) {
    let caps = clamp(&hc.cap_add.take().unwrap_or_default());
    hc.cap_drop = Some(vec!["ALL".into()]);
    hc.cap_add = (!caps.is_empty()).then_some(caps);
    hc.privileged = Some(false);
    let mut opts = vec!["no-new-privileges:true".to_string()];
    if let Some(p) = seccomp.profile() {
        opts.push(format!("seccomp={}", p.json()));
    }
    hc.security_opt = Some(opts);
}

/// The number of a capability, by its Docker name (with or without
/// `CAP_`), as the kernel counts them.
pub fn cap_number(name: &str) -> Option<u32> {
    const NAMES: [&str; 41] = [
        "CHOWN",
        "DAC_OVERRIDE",
        "DAC_READ_SEARCH",
        "FOWNER",
        "FSETID",
        "KILL",
        "SETGID",
        "SETUID",
        "SETPCAP",
        "LINUX_IMMUTABLE",
        "NET_BIND_SERVICE",
        "NET_BROADCAST",
        "NET_ADMIN",
        "NET_RAW",
        "IPC_LOCK",
        "IPC_OWNER",
        "SYS_MODULE",
        "SYS_RAWIO",
        "SYS_CHROOT",
        "SYS_PTRACE",
        "SYS_PACCT",
        "SYS_ADMIN",
        "SYS_BOOT",
        "SYS_NICE",
        "SYS_RESOURCE",
        "SYS_TIME",
        "SYS_TTY_CONFIG",
        "MKNOD",
        "LEASE",
        "AUDIT_WRITE",
        "AUDIT_CONTROL",
        "SETFCAP",
        "MAC_OVERRIDE",
        "MAC_ADMIN",
        "SYSLOG",
        "WAKE_ALARM",
        "BLOCK_SUSPEND",
        "AUDIT_READ",
        "PERFMON",
        "BPF",
        "CHECKPOINT_RESTORE",
    ];
    let n = normal(name);
    NAMES
        .iter()
        .position(|c| *c == n)
        .and_then(|p| u32::try_from(p).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_is_dockers_default_set_and_holds_none_of_the_forbidden() {
        for c in NEVER_CAPS {
            assert!(!CAPABILITY_CEILING.contains(&c), "{c}");
            assert!(!allowed(c) && !allowed(&format!("cap_{c}")), "{c}");
            assert!(cap_number(c).is_some(), "{c}");
        }
        for c in CAPABILITY_CEILING {
            assert!(allowed(c) && cap_number(c).is_some(), "{c}");
        }
        assert_eq!(cap_number("CAP_DAC_READ_SEARCH"), Some(2));
        assert_eq!(cap_number("SETPCAP"), Some(8));
    }

    #[test]
    fn harden_clamps_whatever_was_asked_and_sets_the_filter() {
        let mut hc = HostConfig {
            cap_add: Some(
                [
                    "KILL",
                    "cap_dac_read_search",
                    "SYS_ADMIN",
                    "CAP_CHOWN",
                    "KILL",
                    "ALL",
                ]
                .iter()
                .map(|c| c.to_string())
                .collect(),
            ),
            cap_drop: None,
            privileged: Some(true),
            security_opt: Some(vec![
                "seccomp=unconfined".into(),
                "apparmor=unconfined".into(),
            ]),
            ..Default::default()
        };
        harden(&mut hc, &Seccomp::Runner);
        assert_eq!(hc.cap_add, Some(vec!["KILL".into(), "CHOWN".into()]));
        assert_eq!(hc.cap_drop, Some(vec!["ALL".into()]));
        assert_eq!(hc.privileged, Some(false));
        let opts = hc.security_opt.clone().unwrap();
        assert_eq!(opts.len(), 2);
        assert_eq!(opts[0], "no-new-privileges:true");
        assert_eq!(
            opts[1],
            format!("seccomp={}", crate::exec::seccomp::RUNNER_PROFILE.json())
        );

        let mut hc = HostConfig {
            cap_add: Some(vec!["NET_ADMIN".into()]),
            ..Default::default()
        };
        harden(&mut hc, &Seccomp::EngineDefault);
        assert_eq!(hc.cap_add, None);
        assert_eq!(hc.security_opt, Some(vec!["no-new-privileges:true".into()]));
    }
}
