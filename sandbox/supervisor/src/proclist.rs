//! The lines of the supervisor's process-list helper (`--procs`, see
//! [`crate::protocol::PROCS_FLAG`]): how one process is written, and how
//! runner reads it back. A command line is the sandbox's to choose, so it
//! is escaped to one line of printable ASCII and cut.

use crate::protocol::PROCS_CMDLINE_MAX;

/// A process's `/proc/PID/cmdline` as one printable line: the NULs
/// between arguments as spaces (trailing ones dropped), `\` and every byte
/// outside printable ASCII as `\xNN`, cut at [`PROCS_CMDLINE_MAX`]
/// characters with `...`.
pub fn escape_cmdline(raw: &[u8]) -> String {
    let raw = match raw.iter().rposition(|&b| b != 0) {
        Some(last) => &raw[..=last],
        None => &[],
    };
    let mut out = String::new();
    for &b in raw {
        let piece = match b {
            0 => " ".to_string(),
            b'\\' => "\\x5c".to_string(),
            0x20..=0x7e => char::from(b).to_string(),
            _ => format!("\\x{b:02x}"),
        };
        if out.len() + piece.len() > PROCS_CMDLINE_MAX {
            out.push_str("...");
            break;
        }
        out.push_str(&piece);
    }
    out
}

/// One line of the listing (without its newline).
pub fn format_line(pid: u32, uid: u32, cmdline: &str) -> String {
    format!("{pid} {uid} {cmdline}")
}

/// A line back as `(pid, uid, cmdline)`; `None` when it is not one.
pub fn parse_line(line: &str) -> Option<(u32, u32, String)> {
    let mut it = line.splitn(3, ' ');
    let pid = it.next()?.parse().ok()?;
    let uid = it.next()?.parse().ok()?;
    Some((pid, uid, it.next().unwrap_or_default().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdlines_become_one_bounded_printable_line() {
        assert_eq!(escape_cmdline(b"sleep\x00300\x00"), "sleep 300");
        assert_eq!(escape_cmdline(b""), "");
        assert_eq!(
            escape_cmdline(b"a\nb\\c\x00\xff"),
            "a\\x0ab\\x5cc \\xff",
            "newlines, backslashes and high bytes are escaped"
        );
        let long = escape_cmdline(&[b'\n'; 1000]);
        assert!(long.len() <= PROCS_CMDLINE_MAX + 3, "{}", long.len());
        assert!(long.ends_with("..."));
        assert!(!long.contains('\n'));
    }

    #[test]
    fn lines_round_trip_and_junk_is_refused() {
        let l = format_line(42, 1000, &escape_cmdline(b"python3\x00-m\x00http.server"));
        assert_eq!(
            parse_line(&l),
            Some((42, 1000, "python3 -m http.server".to_string()))
        );
        assert_eq!(parse_line("7 0 "), Some((7, 0, String::new())));
        assert_eq!(parse_line("x 0 a"), None);
        assert_eq!(parse_line("7"), None);
        assert_eq!(parse_line(""), None);
    }
}
