use super::*;

fn run(max: usize, chunks: &[&[u8]]) -> (String, u64) {
    let mut cap = Capture::new(max);
    for c in chunks {
        cap.feed(c).unwrap();
    }
    cap.finish().unwrap()
}

/// What the capture must produce for `all`, written without a ring buffer.
fn reference(all: &[u8], max: usize) -> String {
    if all.len() <= max {
        return String::from_utf8_lossy(all).into_owned();
    }
    let head = &all[..max / 2];
    let head = &head[..head.len() - incomplete_suffix_len(head)];
    let tail = &all[all.len() - (max - max / 2)..];
    let skip = tail
        .iter()
        .take(3)
        .take_while(|b| is_continuation(**b))
        .count();
    let tail = &tail[skip..];
    let omitted = (all.len() - head.len() - tail.len()) as u64;
    format!(
        "{}{}{}",
        String::from_utf8_lossy(head),
        omission_marker(omitted, all.len() as u64),
        String::from_utf8_lossy(tail)
    )
}

fn random_chunks(rng: &mut fastrand::Rng, data: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let n = rng.usize(0..=(data.len() - at).min(40));
        out.push(data[at..at + n].to_vec());
        at += n;
    }
    out
}

#[test]
fn small_output_is_returned_whole() {
    let (text, seen) = run(100, &[b"hello ", b"world\n"]);
    assert_eq!(text, "hello world\n");
    assert_eq!(seen, 12);
}

#[test]
fn exact_fit_has_no_marker_and_one_more_byte_does() {
    let (text, _) = run(10, &[b"0123456789"]);
    assert_eq!(text, "0123456789");
    let (text, seen) = run(10, &[b"0123456789", b"X"]);
    assert_eq!(seen, 11);
    assert_eq!(text, format!("01234{}6789X", omission_marker(1, 11)));
}

#[test]
fn marker_states_omitted_and_total() {
    assert_eq!(
        omission_marker(5, 1000),
        "\n[... 5 bytes omitted of 1000 total ...]\n"
    );
}

#[test]
fn zero_budget_keeps_only_the_marker() {
    let (text, seen) = run(0, &[b"abc"]);
    assert_eq!(seen, 3);
    assert_eq!(text, omission_marker(3, 3));
}

#[test]
fn random_chunkings_match_the_reference() {
    let mut rng = fastrand::Rng::with_seed(7);
    // Mixed ASCII and multi-byte text plus stray invalid bytes.
    let alphabet: Vec<&[u8]> = vec![
        b"a",
        b"\n",
        "é".as_bytes(),
        "€".as_bytes(),
        "𝄞".as_bytes(),
        b"\xff",
    ];
    for _ in 0..2000 {
        let len = rng.usize(0..200);
        let mut data = Vec::new();
        while data.len() < len {
            data.extend_from_slice(alphabet[rng.usize(0..alphabet.len())]);
        }
        let max = rng.usize(0..80);
        let mut cap = Capture::new(max);
        for c in random_chunks(&mut rng, &data) {
            cap.feed(&c).unwrap();
        }
        let (text, seen) = cap.finish().unwrap();
        assert_eq!(seen, data.len() as u64);
        assert_eq!(text, reference(&data, max), "max={max} data={data:?}");
    }
}

#[test]
fn cut_multibyte_chars_do_not_become_replacement_chars() {
    let data = "é".repeat(100);
    for max in 1..40 {
        let (text, _) = run(max, &[data.as_bytes()]);
        assert!(!text.contains('\u{FFFD}'), "max={max}: {text}");
        assert!(text.contains("bytes omitted of 200 total"), "{text}");
    }
}

#[test]
fn invalid_utf8_is_decoded_lossily() {
    let (text, _) = run(100, &[b"ok \xff\xfe end"]);
    assert_eq!(text, "ok \u{FFFD}\u{FFFD} end");
}

#[test]
fn truncate_middle_keeps_fitting_text() {
    assert_eq!(truncate_middle("short", 5), "short");
    assert_eq!(truncate_middle("", 0), "");
}

#[test]
fn truncate_middle_matches_capture_for_ascii() {
    let text = "0123456789".repeat(10);
    assert_eq!(truncate_middle(&text, 10), reference(text.as_bytes(), 10));
    assert_eq!(truncate_middle(&text, 10), run(10, &[text.as_bytes()]).0);
}

#[test]
fn truncate_middle_is_char_boundary_safe_for_every_budget() {
    let text = "aé€𝄞b".repeat(7);
    for max in 0..=text.len() + 1 {
        let out = truncate_middle(&text, max);
        if text.len() <= max {
            assert_eq!(out, text);
            continue;
        }
        let marker_at = out.find("\n[... ").expect("marker");
        let marker_end = marker_at + out[marker_at..].find(" ...]\n").expect("marker end") + 6;
        let (head, tail) = (&out[..marker_at], &out[marker_end..]);
        assert!(text.starts_with(head) && text.ends_with(tail), "max={max}");
        assert!(head.len() + tail.len() <= max, "max={max}");
        assert!(head.len() + tail.len() + 6 >= max, "max={max}");
        let omitted = text.len() - head.len() - tail.len();
        assert_eq!(
            &out[marker_at..marker_end],
            omission_marker(omitted as u64, text.len() as u64)
        );
    }
}

fn redactor(secrets: &[&str]) -> Redactor {
    Redactor::new(secrets.iter().map(|s| s.to_string()).collect()).unwrap()
}

#[test]
fn secrets_split_at_every_boundary_are_redacted_in_text_and_file() {
    let data = b"key=sk-SECRET-123 and again sk-SECRET-123!";
    let want = "key=[REDACTED] and again [REDACTED]!";
    let secrets = redactor(&["sk-SECRET-123"]);
    for cut in 0..=data.len() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("full.txt");
        let mut cap = Capture::new(1000)
            .with_full_output(&path)
            .unwrap()
            .with_redactor(&secrets);
        cap.feed(&data[..cut]).unwrap();
        cap.feed(&data[cut..]).unwrap();
        let (text, seen) = cap.finish().unwrap();
        assert_eq!(text, want, "cut={cut}");
        assert_eq!(seen, data.len() as u64);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), want, "cut={cut}");
    }
}

#[test]
fn redacted_binary_output_keeps_its_bytes_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("full.txt");
    let mut cap = Capture::new(1000)
        .with_full_output(&path)
        .unwrap()
        .with_redactor(&redactor(&["secret-42"]));
    cap.feed(b"A\xff\xfe\x00\x80Bsecr").unwrap();
    cap.feed(b"et-42\n").unwrap();
    let (text, _) = cap.finish().unwrap();
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"A\xff\xfe\x00\x80B[REDACTED]\n"
    );
    assert_eq!(text, "A\u{fffd}\u{fffd}\0\u{fffd}B[REDACTED]\n");
}

#[test]
fn redaction_happens_before_head_and_tail_are_cut() {
    // The secret straddles where head ends and the tail begins: neither
    // half may survive in the kept text.
    let secrets = redactor(&["0123456789abcdef"]);
    let mut cap = Capture::new(20).with_redactor(&secrets);
    for _ in 0..50 {
        cap.feed(b"xx0123456789abcdefyy").unwrap();
    }
    let (text, seen) = cap.finish().unwrap();
    assert_eq!(seen, 1000);
    assert!(!text.contains("0123") && !text.contains("cdef"), "{text}");
}

#[test]
fn full_output_file_gets_everything_below_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out");
    let mut cap = Capture::new(4).with_full_output(&path).unwrap();
    cap.feed(b"line one\n").unwrap();
    cap.feed(b"line two\n").unwrap();
    let (text, _) = cap.finish().unwrap();
    assert!(text.contains("bytes omitted of 18 total"));
    assert_eq!(std::fs::read(&path).unwrap(), b"line one\nline two\n");
}

#[test]
fn full_output_file_stops_at_the_cap_with_a_marker() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out");
    let mut cap = Capture::new(4).with_full_output_capped(&path, 10).unwrap();
    cap.feed(b"0123456").unwrap();
    cap.feed(b"789abcdef").unwrap();
    let (_, seen) = cap.finish().unwrap();
    assert_eq!(seen, 16);
    let file = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        file,
        "0123456789\n[... 6 bytes not written: full-output file capped at 10 bytes ...]\n"
    );
}

#[test]
fn unwritable_full_output_path_is_an_error_naming_it() {
    let err = Capture::new(10)
        .with_full_output(Path::new("/nonexistent-dir/out.txt"))
        .unwrap_err();
    assert!(
        err.to_string().contains("/nonexistent-dir/out.txt"),
        "{err}"
    );
}

/// A host that cannot take the full output (disk full) loses the file,
/// never the command's result: the run goes on and is told.
#[test]
fn a_full_output_file_that_cannot_be_written_is_dropped_not_fatal() {
    let mut c = Capture::new(1000)
        .with_full_output(Path::new("/dev/full"))
        .expect("/dev/full opens");
    c.feed(&vec![b'x'; 100_000])
        .expect("feeding never fails on the file");
    c.feed(b"tail").expect("feeding never fails on the file");
    let (text, seen) = c.finish().expect("finish never fails on the file");
    assert_eq!(seen, 100_004);
    assert!(text.contains("tail"), "{text}");
    assert!(text.contains("could not save the full output"), "{text}");
}
