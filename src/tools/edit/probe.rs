//! What is at a path of the sandbox, found with one short command so
//! that a missing file, a directory or a file too big gets a clear answer
//! on every backend (the files API's errors do not tell them apart).

/// The line the inspecting script starts its answer with.
const PROBE_MARK: &str = "runner-edit-probe";
const PROBE_END: &str = "runner-edit-probe-end";

/// What is at a path, as the sandbox sees it.
#[derive(Debug, PartialEq)]
pub enum Probe {
    Missing,
    Dir,
    File {
        /// Bytes; `None` when the sandbox has no `stat`.
        size: Option<u64>,
        /// Octal permission bits, when known (kept across a rewrite).
        mode: Option<String>,
        readable: bool,
        writable: bool,
        /// The path with its links resolved (the files API never follows
        /// a link), or the path itself when the sandbox cannot resolve it.
        real: String,
    },
    /// A symbolic link to nothing.
    Broken,
    /// A FIFO, socket or device.
    Other,
}

/// The script that inspects `path`: its answer is read by [`parse`].
pub fn script(path: &str) -> String {
    let q = quote(path);
    format!(
        "exec 2>/dev/null; p={q}\n\
             if [ -d \"$p\" ]; then k=dir; elif [ -f \"$p\" ]; then k=file; \
             elif [ -L \"$p\" ]; then k=broken; elif [ -e \"$p\" ]; then k=other; \
             else echo '{PROBE_MARK} missing'; exit 0; fi\n\
             r=$(readlink -f -- \"$p\") || r=\n\
             s=$(stat -L -c %s -- \"$p\") || s=-\n\
             m=$(stat -L -c %a -- \"$p\") || m=-\n\
             [ -r \"$p\" ] && a=r || a=-\n\
             [ -w \"$p\" ] && a=\"${{a}}w\" || a=\"${{a}}-\"\n\
             printf '{PROBE_MARK} %s %s %s %s\\n%s\\n{PROBE_END}\\n' \"$k\" \"$s\" \"$m\" \"$a\" \"$r\""
    )
}

/// `s` as one single-quoted shell word.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Reads the probe's answer: `MARK KIND SIZE MODE ACCESS`, the resolved
/// path, `END`. Anything else is `None`.
pub fn parse(out: &str, path: &str) -> Option<Probe> {
    let start = out.find(PROBE_MARK)?;
    let rest = &out[start + PROBE_MARK.len()..];
    if rest.trim_end() == " missing" || rest.starts_with(" missing\n") {
        return Some(Probe::Missing);
    }
    let (head, tail) = rest.split_once('\n')?;
    let real = tail.rsplit_once(&format!("\n{PROBE_END}"))?.0;
    let mut f = head.split(' ').filter(|s| !s.is_empty());
    let (kind, size, mode, access) = (f.next()?, f.next()?, f.next()?, f.next()?);
    Some(match kind {
        "dir" => Probe::Dir,
        "broken" => Probe::Broken,
        "other" => Probe::Other,
        "file" => Probe::File {
            size: size.parse().ok(),
            mode: Some(mode.to_string()).filter(|m| {
                !m.is_empty() && m.len() <= 4 && m.bytes().all(|b| (b'0'..=b'7').contains(&b))
            }),
            readable: access.starts_with('r'),
            writable: access.ends_with('w'),
            real: if real.is_empty() {
                path.to_string()
            } else {
                real.to_string()
            },
        },
        _ => return None,
    })
}
