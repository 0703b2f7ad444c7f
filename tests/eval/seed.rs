//! Seeding once per image: three attempts of one built image make one
//! seeding container, each attempt starts from its own copy of the image's
//! working directory (never another attempt's leftovers), and the links in
//! it stay links pointing where the image had them.

use crate::support::binary::Dir;
use crate::support::docker::docker_cli;
use crate::support::eval::{assert_clean, eval_cmd, prelude, report, run_with_pid, task};

const DOCKERFILE: &str = "FROM runner-sandbox:tiny\n\
WORKDIR /app\n\
RUN mkdir sub && echo start > sub/log.txt \
&& ln -s /etc/passwd passwd && ln -s ../sub/log.txt sub/up && chown -R 1000:1000 /app\n";

/// Checks the start state, then leaves a mark only this attempt made.
const SOLVE: &str = "#!/bin/sh\nset -e\n\
[ \"$(pwd)\" = /app ]\n\
[ \"$(cat sub/log.txt)\" = start ]\n\
! ls -d mark-* 2>/dev/null\n\
mktemp mark-XXXXXX\n\
echo agent >> sub/log.txt\n";

/// Reward 1 when the workspace is the image's plus this attempt's mark.
const TEST: &str = "#!/bin/sh\nmkdir -p /logs/verifier\ncd /app\n\
if [ \"$(ls -d mark-* | wc -l)\" -eq 1 ] \
&& [ \"$(cat sub/log.txt)\" = \"$(printf 'start\\nagent')\" ] \
&& [ -L passwd ] && [ \"$(readlink passwd)\" = /etc/passwd ] \
&& [ -L sub/up ] && [ \"$(readlink sub/up)\" = ../sub/log.txt ]; then\n\
echo 1 > /logs/verifier/reward.txt\nelse\nls -la . sub; cat sub/log.txt\n\
echo 0 > /logs/verifier/reward.txt\nfi\n";

#[test]
fn attempts_of_one_image_share_one_seeding_and_get_their_own_copy() {
    let _g = prelude();
    let d = Dir::new();
    let toml = "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\n\
                [environment]\ncpus = 1\nmemory_mb = 256\nallow_internet = false\n\
                build_timeout_sec = 120\n";
    task(
        &d.path().join("suite"),
        "linked",
        &[
            ("instruction.md", "leave a mark\n"),
            ("task.toml", toml),
            ("environment/Dockerfile", DOCKERFILE),
            ("tests/test.sh", TEST),
            ("solution/solve.sh", SOLVE),
        ],
    );
    let images_before = docker_cli(&[
        "images",
        "runner-task",
        "--format",
        "{{.Repository}}:{{.Tag}}",
    ]);
    let since = docker_cli(&["system", "info", "--format", "{{.SystemTime}}"]);
    let (ran, pid) = run_with_pid(eval_cmd(
        &d,
        &[
            "suite",
            "--agent",
            "oracle",
            "--attempts",
            "3",
            "--jobs",
            "2",
        ],
    ));
    let until = docker_cli(&["system", "info", "--format", "{{.SystemTime}}"]);
    assert_clean(pid, &ran.desc);
    let r = report(&d, &ran);
    let image = r["attempts"][0]["image"].as_str().map(str::to_string);
    let passed = r["totals"]["passed"].clone();

    // The seeding containers this runner created: one for the image.
    let owner = format!("label=runner.owner-pid={pid}");
    let created = docker_cli(&[
        "events",
        "--since",
        since.trim(),
        "--until",
        until.trim(),
        "--filter",
        "type=container",
        "--filter",
        "event=create",
        "--filter",
        &owner,
        "--format",
        "{{.Actor.Attributes.name}}",
    ]);
    let seeds: Vec<&str> = created.lines().filter(|n| n.ends_with("-seed")).collect();
    // The built image is a cache shared with others: removed only when
    // this test made it.
    if let Some(img) = image.filter(|i| !images_before.lines().any(|l| l == i)) {
        let _ = std::process::Command::new("docker")
            .args(["image", "rm", &img])
            .output();
    }
    ran.expect_code(0);
    assert_eq!(passed, 3, "{}", ran.explain());
    assert_eq!(seeds.len(), 1, "seeding containers: {created}");
    assert!(
        created.lines().count() >= 4,
        "3 agents (graded in their own sandboxes) + 1 seed, saw: {created}"
    );
}
