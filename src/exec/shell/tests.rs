use std::process::Command;

use proptest::prelude::*;

use super::*;

fn dump(cwd: &str, entries: &[&str]) -> Vec<u8> {
    let mut d = Vec::new();
    for item in [STATE_HEADER, cwd]
        .into_iter()
        .chain(entries.iter().copied())
        .chain([STATE_END])
    {
        d.extend_from_slice(item.as_bytes());
        d.push(0);
    }
    d
}

fn names_in(p: &PreparedCommand) -> Vec<String> {
    p.argv[7..].to_vec()
}

#[test]
fn the_first_command_starts_fresh_in_the_workdir() {
    let s = ShellSession::new("/ws");
    let p = s.prepare("ls");
    assert_eq!(p.argv[..4], ["bash", "-c", WRAPPER, WRAPPER_NAME]);
    assert_eq!(p.argv[4..], ["ls", "", "fresh"]);
    assert_eq!(p.cwd, "/ws");
    assert!(p.env.is_empty());
    assert_eq!(s.cwd(), "/ws");
}

#[test]
fn a_dump_becomes_the_next_commands_state() {
    let s = ShellSession::new("/ws");
    s.finish(&dump(
        "/tmp/x y",
        &["X=1", "MULTI=a\nb=c", "EMPTY=", "PWD=/no", "SHLVL=2"],
    ))
    .unwrap();
    let p = s.prepare("pwd");
    assert_eq!(p.argv[4..7], ["pwd", "/tmp/x y", "restore"]);
    assert_eq!(names_in(&p), ["X", "MULTI", "EMPTY"]);
    assert_eq!(
        p.env,
        [
            ("X".to_string(), "1".to_string()),
            ("MULTI".into(), "a\nb=c".into()),
            ("EMPTY".into(), String::new())
        ]
    );
    // The process still starts in the workdir; the wrapper moves on.
    assert_eq!(p.cwd, "/ws");
    assert_eq!(s.cwd(), "/tmp/x y");
    s.restart();
    assert_eq!(s.prepare("pwd").argv[5..], ["", "fresh"]);
    assert_eq!(s.cwd(), "/ws");
}

#[test]
fn a_bad_dump_is_refused_and_the_old_state_stays() {
    let s = ShellSession::new("/ws");
    s.finish(&dump("/good", &["A=1"])).unwrap();
    let before = s.prepare("x");
    let big_entry = format!("B={}", "x".repeat(MAX_ENTRY_BYTES));
    let many: Vec<String> = (0..MAX_STATE_BYTES / 8)
        .map(|i| format!("V{i}=1"))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let mut cut = dump("/new", &["A=2"]);
    cut.truncate(cut.len() - 3);
    let mut trailing = dump("/new", &[]);
    trailing.extend_from_slice(b"A=1\0");
    let mut not_utf8 = dump("/new", &["A=1"]);
    not_utf8[STATE_HEADER.len() + 6 + 2] = 0xff;
    let cases: Vec<(Vec<u8>, StateError)> = vec![
        (Vec::new(), StateError::Malformed),
        (b"garbage".to_vec(), StateError::Malformed),
        (cut, StateError::Malformed),
        (trailing, StateError::Malformed),
        (dump("relative", &[]), StateError::BadDirectory),
        (dump("", &[]), StateError::BadDirectory),
        (dump("/new", &["no-equals"]), StateError::BadEntry),
        (dump("/new", &["1X=1"]), StateError::BadEntry),
        (dump("/new", &["A-B=1"]), StateError::BadEntry),
        (dump("/new", &["=1"]), StateError::BadEntry),
        (not_utf8, StateError::BadEntry),
        (dump("/new", &["A=1", "A=2"]), StateError::Duplicate),
        (dump("/new", &[&big_entry]), StateError::EntryTooLarge),
        (dump("/new", &many), StateError::TooLarge),
    ];
    for (bad, why) in cases {
        assert_eq!(s.finish(&bad), Err(why.clone()), "{why}");
        assert_eq!(s.prepare("x"), before, "{why}");
    }
}

#[test]
fn modes_have_their_names_and_sentences() {
    assert_eq!(ShellMode::default(), ShellMode::Fresh);
    assert_eq!(ShellMode::Persistent.as_str(), "persistent");
    assert!(
        ShellMode::Fresh
            .semantics("/ws")
            .contains("fresh shell in /ws")
    );
    assert!(
        ShellMode::Persistent
            .semantics("/ws")
            .contains("carry over")
    );
}

proptest! {
    #[test]
    fn any_bytes_never_panic_and_a_refusal_changes_nothing(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let s = ShellSession::new("/ws");
        s.finish(&dump("/kept", &["K=v"])).unwrap();
        let before = s.prepare("c");
        if s.finish(&bytes).is_err() {
            prop_assert_eq!(s.prepare("c"), before);
        }
    }

    #[test]
    fn a_mutated_dump_never_panics(
        value in "[^\u{0}]{0,40}",
        at in 0usize..200,
        byte in any::<u8>(),
        cut in 0usize..200,
    ) {
        let entry = format!("NAME={value}");
        let mut d = dump("/dir", &[&entry, "OTHER=1"]);
        let i = at % d.len();
        d[i] = byte;
        d.truncate(d.len() - cut % d.len());
        let s = ShellSession::new("/ws");
        match s.finish(&d) {
            // What was taken is always well-formed.
            Ok(()) => {
                let p = s.prepare("c");
                prop_assert!(s.cwd().starts_with('/'));
                prop_assert!(p.env.iter().all(|(k, _)| is_name(k)));
            }
            Err(_) => prop_assert_eq!(&s.prepare("c").argv[6], "fresh"),
        }
    }

    #[test]
    fn a_well_formed_dump_round_trips(
        cwd in "/[^\u{0}]{0,30}",
        vars in proptest::collection::btree_map("[A-Za-z][A-Za-z0-9_]{0,8}", "[^\u{0}]{0,30}", 0..8),
    ) {
        let entries: Vec<String> = vars
            .iter()
            .filter(|(k, _)| !BASH_MANAGED.contains(&k.as_str()))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let refs: Vec<&str> = entries.iter().map(String::as_str).collect();
        let s = ShellSession::new("/ws");
        prop_assert_eq!(s.finish(&dump(&cwd, &refs)), Ok(()));
        prop_assert_eq!(s.cwd(), cwd);
        let p = s.prepare("c");
        let got: Vec<String> = p.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        prop_assert_eq!(got, entries);
    }
}

// ------------------------------------------------- the wrapper, in bash

/// Runs `command` through the session's wrapper in real bash, with
/// `base` as the environment under it and the state file on fd 3
/// (opened by `sh`, as a backend would give the pipe); saves the dump.
/// Returns stdout + stderr and the exit code.
fn run(s: &ShellSession, command: &str, base: &[(&str, &str)]) -> (String, Option<i32>) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let p = s.prepare(command);
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(r#"f=$1; shift; exec "$@" 3>"$f" 2>&1"#)
        .arg("sh")
        .arg(&state)
        .args(&p.argv)
        .current_dir(&p.cwd)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(base.iter().copied())
        .envs(p.env.iter().map(|(k, v)| (k, v)));
    let out = c.output().unwrap();
    let dump = std::fs::read(&state).unwrap_or_default();
    if !dump.is_empty() {
        s.finish(&dump).unwrap();
    }
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.code(),
    )
}

#[test]
fn cd_export_and_unset_carry_over_in_bash() {
    let ws = tempfile::tempdir().unwrap();
    let ws_path = ws.path().display().to_string();
    let s = ShellSession::new(ws_path.clone());
    let base = [("BASE", "b"), ("GONE", "g")];
    let (out, code) = run(
        &s,
        "mkdir -p sub && cd sub && export X='a b\nc=d' Y=2 && unset GONE && Z=local",
        &base,
    );
    assert_eq!((out.as_str(), code), ("", Some(0)));
    assert_eq!(s.cwd(), format!("{ws_path}/sub"));
    let (out, _) = run(
        &s,
        r#"pwd; printf '%s|' "$X" "$Y" "${GONE-unset}" "${Z-unset}" "$BASE" "$#"; cd -"#,
        &base,
    );
    assert_eq!(
        out,
        format!("{ws_path}/sub\na b\nc=d|2|unset|unset|b|0|{ws_path}\n")
    );
    // `cd -` went back to the workdir, and that carried over too.
    assert_eq!(s.cwd(), ws_path);
}

#[test]
fn exit_and_errexit_still_save_and_keep_their_code() {
    let ws = tempfile::tempdir().unwrap();
    let s = ShellSession::new(ws.path().display().to_string());
    let (_, code) = run(&s, "cd /; export A=1; exit 3", &[]);
    assert_eq!(code, Some(3));
    assert_eq!(s.cwd(), "/");
    let (_, code) = run(&s, "set -eu; cd /tmp; export B=2; false; echo never", &[]);
    assert_eq!(code, Some(1));
    assert_eq!(s.cwd(), "/tmp");
    let (out, code) = run(&s, r#"echo "$A$B""#, &[]);
    assert_eq!((out.as_str(), code), ("12\n", Some(0)));
}

#[test]
fn the_command_sees_no_state_descriptor_and_a_gone_directory_falls_back() {
    let ws = tempfile::tempdir().unwrap();
    let ws_path = ws.path().display().to_string();
    let s = ShellSession::new(ws_path.clone());
    let (out, _) = run(&s, "echo fake >&3; echo $?", &[]);
    assert!(out.ends_with("1\n"), "{out}");
    let (_, _) = run(&s, "mkdir d && cd d && rmdir ../d", &[]);
    let (out, code) = run(&s, "pwd", &[]);
    assert_eq!(code, Some(0));
    assert!(out.contains("is gone"), "{out}");
    assert!(out.ends_with(&format!("{ws_path}\n")), "{out}");
    assert_eq!(s.cwd(), ws_path);
}

#[test]
fn a_command_that_execs_leaves_the_state_as_it_was() {
    let ws = tempfile::tempdir().unwrap();
    let s = ShellSession::new(ws.path().display().to_string());
    run(&s, "cd /; export KEEP=1", &[]);
    let (out, code) = run(&s, "cd /tmp; export KEEP=2; exec true", &[]);
    assert_eq!((out.as_str(), code), ("", Some(0)));
    assert_eq!(s.cwd(), "/");
    let env = s.prepare("x").env;
    assert!(
        env.contains(&("KEEP".to_string(), "1".to_string())),
        "{env:?}"
    );
}
