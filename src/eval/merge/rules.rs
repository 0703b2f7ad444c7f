//! Which output directories `runner eval merge` accepts together: the
//! shards of one suite (same fingerprint, same shard count, each shard
//! once, none missing unless allowed), or one whole-suite directory.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::eval::manifest::{ManifestError, Shard, SuiteManifest};

/// How many differing task names a message lists before "...".
const MAX_NAMES_SHOWN: usize = 3;

/// Why a set of directories cannot be merged (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("{0}")]
    Manifest(#[from] ManifestError),
    #[error("{} is given twice (as {} and {})", .first.display(), .first.display(), .other.display())]
    SameDir { first: PathBuf, other: PathBuf },
    #[error("{} is not the suite of {}: {differences}", .other.display(), .first.display())]
    DifferentSuite {
        first: PathBuf,
        other: PathBuf,
        differences: String,
    },
    #[error("{} is the whole suite, {} is shard {shard} of it: a whole-suite directory cannot be merged with shards", .whole.display(), .sharded.display())]
    WholeWithShards {
        whole: PathBuf,
        sharded: PathBuf,
        shard: Shard,
    },
    #[error("{} and {} are both the whole suite", .first.display(), .other.display())]
    WholeTwice { first: PathBuf, other: PathBuf },
    #[error("{} is shard {a} and {} is shard {b}: different shard counts", .first.display(), .other.display())]
    ShardCounts {
        first: PathBuf,
        a: Shard,
        other: PathBuf,
        b: Shard,
    },
    #[error("{} and {} are both shard {shard}", .first.display(), .other.display())]
    SameShard {
        first: PathBuf,
        other: PathBuf,
        shard: Shard,
    },
    #[error("{}", missing_message(.missing, .given, *.count))]
    MissingShards {
        missing: Vec<u32>,
        given: Vec<u32>,
        count: u32,
    },
    #[error("{}/suite.json does not hold together: {detail}", .dir.display())]
    Inconsistent { dir: PathBuf, detail: String },
    #[error("--min-pass-rate must be between 0 and 1")]
    MinPassRate,
    #[error("no directory to merge")]
    NoDirs,
}

impl MergeError {
    /// What to do about it.
    pub fn hint(&self) -> Option<String> {
        let h = match self {
            MergeError::Manifest(e) => e.hint(),
            MergeError::SameDir { .. } => "give each shard's output directory once",
            MergeError::DifferentSuite { .. } => {
                "merge only the shards of one suite: the same task paths, --filter, --attempts and agent flags, each run with --shard I/N"
            }
            MergeError::WholeWithShards { .. } => {
                "merge either the shards of one suite or a single whole-suite directory, not both"
            }
            MergeError::WholeTwice { .. } => {
                "a whole-suite directory has nothing to be merged with; give one (to rebuild its reports), or the shard directories"
            }
            MergeError::ShardCounts { .. } => {
                "every shard of a suite runs with the same N in --shard I/N; rerun the odd ones with it"
            }
            MergeError::SameShard { .. } => {
                "give each shard once: each machine runs its own --shard I/N with its own --output-dir"
            }
            MergeError::MissingShards { .. } => {
                "run the missing shards (runner eval ... --shard I/N --output-dir DIR) and give their directories too, or pass --allow-missing to report their attempts as not run"
            }
            MergeError::Inconsistent { .. } => {
                "suite.json is written by runner eval; rerun that shard into a fresh --output-dir"
            }
            MergeError::MinPassRate => "give a fraction such as 0.8",
            MergeError::NoDirs => {
                "give the output directories of the shards: runner eval merge DIR..."
            }
        };
        Some(h.to_string())
    }
}

fn missing_message(missing: &[u32], given: &[u32], count: u32) -> String {
    let (s, is) = if missing.len() == 1 {
        ("", "is")
    } else {
        ("s", "are")
    };
    format!(
        "shard{s} {} of {count} {is} missing (given: {})",
        list(missing),
        list(given)
    )
}

fn list(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

/// Directories accepted together, in shard order.
#[derive(Debug)]
pub struct Accepted {
    pub parts: Vec<(PathBuf, SuiteManifest)>,
    /// Shards of the suite not given (only with `--allow-missing`).
    pub missing: Vec<Shard>,
}

/// Checks that `parts` (directory and its manifest, as given) are the
/// shards of one suite, or one whole-suite directory. `canonical` is each
/// directory's resolved path, for spotting one given twice.
pub fn accept(
    parts: Vec<(PathBuf, SuiteManifest)>,
    canonical: &[PathBuf],
    allow_missing: bool,
) -> Result<Accepted, MergeError> {
    let mut seen: BTreeMap<&PathBuf, &PathBuf> = BTreeMap::new();
    for (c, (dir, _)) in canonical.iter().zip(&parts) {
        if let Some(first) = seen.insert(c, dir) {
            return Err(MergeError::SameDir {
                first: first.clone(),
                other: dir.clone(),
            });
        }
    }
    for (dir, m) in &parts {
        check_own(dir, m)?;
    }
    let Some((first_dir, first)) = parts.first() else {
        return Err(MergeError::NoDirs);
    };
    for (dir, m) in &parts[1..] {
        if m.fingerprint != first.fingerprint
            || m.tasks != first.tasks
            || m.attempts_per_task != first.attempts_per_task
        {
            return Err(MergeError::DifferentSuite {
                first: first_dir.clone(),
                other: dir.clone(),
                differences: differences(first, m),
            });
        }
    }
    let whole = parts.iter().find(|(_, m)| m.shard.is_none());
    let sharded = parts.iter().find_map(|(d, m)| m.shard.map(|s| (d, s)));
    if let (Some((w, _)), Some((s, shard))) = (whole, sharded) {
        return Err(MergeError::WholeWithShards {
            whole: w.clone(),
            sharded: s.clone(),
            shard,
        });
    }
    if whole.is_some() {
        if let Some((other, _)) = parts.get(1) {
            return Err(MergeError::WholeTwice {
                first: first_dir.clone(),
                other: other.clone(),
            });
        }
        return Ok(Accepted {
            parts,
            missing: Vec::new(),
        });
    }
    let mut by_index: BTreeMap<u32, &PathBuf> = BTreeMap::new();
    let mut count_of: Option<(&PathBuf, Shard)> = None;
    for (dir, m) in &parts {
        let Some(s) = m.shard else { continue };
        match count_of {
            Some((d0, s0)) if s0.count != s.count => {
                return Err(MergeError::ShardCounts {
                    first: d0.clone(),
                    a: s0,
                    other: dir.clone(),
                    b: s,
                });
            }
            None => count_of = Some((dir, s)),
            _ => {}
        }
        if let Some(first) = by_index.insert(s.index, dir) {
            return Err(MergeError::SameShard {
                first: first.clone(),
                other: dir.clone(),
                shard: s,
            });
        }
    }
    let count = count_of.map_or(1, |(_, s)| s.count);
    let missing: Vec<Shard> = (1..=count)
        .filter(|i| !by_index.contains_key(i))
        .map(|index| Shard { index, count })
        .collect();
    if !missing.is_empty() && !allow_missing {
        return Err(MergeError::MissingShards {
            missing: missing.iter().map(|s| s.index).collect(),
            given: by_index.keys().copied().collect(),
            count,
        });
    }
    let mut parts = parts;
    parts.sort_by_key(|(_, m)| m.shard.map_or(0, |s| s.index));
    Ok(Accepted { parts, missing })
}

/// The tasks of `all` (in name order) that `shard` holds.
pub fn tasks_of(all: &[String], shard: Option<Shard>) -> Vec<String> {
    all.iter()
        .enumerate()
        .filter(|(i, _)| shard.is_none_or(|s| s.holds(*i)))
        .map(|(_, t)| t.clone())
        .collect()
}

/// A manifest must agree with itself: its names are sorted, unique and
/// usable as one path component (merge reads `DIR/<task>/<n>/`, and the
/// directory may come from another machine), and its shard's tasks are
/// the ones `--shard` gives.
fn check_own(dir: &Path, m: &SuiteManifest) -> Result<(), MergeError> {
    let bad = |detail: String| {
        Err(MergeError::Inconsistent {
            dir: dir.to_path_buf(),
            detail,
        })
    };
    if let Some(t) = m.tasks.iter().find(|t| !is_plain_name(t)) {
        return bad(format!("task name {t:?} is not a plain directory name"));
    }
    if m.tasks.windows(2).any(|w| w[0] >= w[1]) {
        return bad("its task list is not sorted and unique".into());
    }
    if m.attempts_per_task == 0 {
        return bad("attempts_per_task is 0".into());
    }
    if m.shard.is_some_and(|s| s.index == 0 || s.index > s.count) {
        return bad("its shard is not I/N with 1 <= I <= N".into());
    }
    if m.shard_tasks != tasks_of(&m.tasks, m.shard) {
        let which = m
            .shard
            .map_or("the whole suite".into(), |s| format!("shard {s}"));
        return bad(format!("shard_tasks are not the tasks of {which}"));
    }
    Ok(())
}

fn is_plain_name(t: &str) -> bool {
    !t.is_empty() && t != "." && t != ".." && !t.contains(['/', '\0'])
}

/// What differs between two manifests, in one line: the attempts, the
/// public settings by key, the task lists; or that only hashed settings
/// (secret values) can differ.
pub fn differences(a: &SuiteManifest, b: &SuiteManifest) -> String {
    let mut out = Vec::new();
    if a.attempts_per_task != b.attempts_per_task {
        out.push(format!(
            "attempts_per_task {} vs {}",
            a.attempts_per_task, b.attempts_per_task
        ));
    }
    let empty = serde_json::Map::new();
    let (sa, sb) = (
        a.settings.as_object().unwrap_or(&empty),
        b.settings.as_object().unwrap_or(&empty),
    );
    let keys: BTreeSet<&String> = sa.keys().chain(sb.keys()).collect();
    let null = serde_json::Value::Null;
    for k in keys {
        let (va, vb) = (sa.get(k).unwrap_or(&null), sb.get(k).unwrap_or(&null));
        if va != vb {
            out.push(format!("{k} {va} vs {vb}"));
        }
    }
    let (ta, tb): (BTreeSet<&String>, BTreeSet<&String>) =
        (a.tasks.iter().collect(), b.tasks.iter().collect());
    let only = |x: &BTreeSet<&String>, y: &BTreeSet<&String>| -> Vec<String> {
        x.difference(y).map(|s| s.to_string()).collect()
    };
    let (oa, ob) = (only(&ta, &tb), only(&tb, &ta));
    if !oa.is_empty() || !ob.is_empty() {
        out.push(format!(
            "tasks: {} only in the first ({}), {} only in the other ({})",
            oa.len(),
            names(&oa),
            ob.len(),
            names(&ob)
        ));
    }
    if out.is_empty() {
        "only settings kept as a hash differ (--env values, --system, --price)".into()
    } else {
        out.join("; ")
    }
}

fn names(v: &[String]) -> String {
    let mut s = v
        .iter()
        .take(MAX_NAMES_SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if v.len() > MAX_NAMES_SHOWN {
        s.push_str(", ...");
    }
    if s.is_empty() { "none".into() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::manifest::{MANIFEST_VERSION, fingerprint};
    use serde_json::json;

    /// A manifest as `runner eval` writes it for `tasks`, `shard` and `settings`.
    fn manifest(
        tasks: &[&str],
        attempts: u32,
        shard: Option<(u32, u32)>,
        settings: serde_json::Value,
    ) -> SuiteManifest {
        let tasks: Vec<String> = tasks.iter().map(|t| t.to_string()).collect();
        let shard = shard.map(|(index, count)| Shard { index, count });
        SuiteManifest {
            format: MANIFEST_VERSION,
            id: "eval-test".into(),
            fingerprint: fingerprint(&tasks, attempts, &settings, b""),
            shard_tasks: tasks_of(&tasks, shard),
            tasks,
            attempts_per_task: attempts,
            settings,
            shard,
            started_at: chrono::Local::now(),
            invocation: None,
        }
    }

    const TASKS: [&str; 5] = ["a", "b", "c", "d", "e"];

    fn oracle() -> serde_json::Value {
        json!({"agent": "oracle", "max_steps": 50})
    }

    /// Hand-written suite.json files in temp dirs, read back as merge reads them.
    fn dirs(ms: Vec<SuiteManifest>) -> (tempfile::TempDir, Vec<(PathBuf, SuiteManifest)>) {
        let root = tempfile::tempdir().unwrap();
        let mut out = Vec::new();
        for (i, m) in ms.into_iter().enumerate() {
            let d = root.path().join(format!("out{i}"));
            std::fs::create_dir_all(&d).unwrap();
            let text = serde_json::to_string_pretty(&m).unwrap();
            std::fs::write(d.join("suite.json"), text).unwrap();
            let back = crate::eval::manifest::read_suite(&d).unwrap();
            out.push((d, back));
        }
        (root, out)
    }

    fn check(ms: Vec<SuiteManifest>, allow_missing: bool) -> Result<Accepted, MergeError> {
        let (_root, parts) = dirs(ms);
        let canon: Vec<PathBuf> = parts.iter().map(|(d, _)| d.clone()).collect();
        accept(parts, &canon, allow_missing)
    }

    fn shards(n: u32, attempts: u32) -> Vec<SuiteManifest> {
        (1..=n)
            .map(|i| manifest(&TASKS, attempts, Some((i, n)), oracle()))
            .collect()
    }

    #[test]
    fn the_shards_of_one_suite_are_accepted_in_shard_order() {
        let mut ms = shards(3, 2);
        ms.swap(0, 2);
        let ok = check(ms, false).unwrap();
        let order: Vec<u32> = ok
            .parts
            .iter()
            .map(|(_, m)| m.shard.unwrap().index)
            .collect();
        assert_eq!(order, [1, 2, 3]);
        assert!(ok.missing.is_empty());
        // Together they hold every task once.
        let mut all: Vec<String> = ok
            .parts
            .iter()
            .flat_map(|(_, m)| m.shard_tasks.clone())
            .collect();
        all.sort();
        assert_eq!(all, TASKS);
        // One whole-suite directory alone is accepted (its reports rebuilt).
        assert!(check(vec![manifest(&TASKS, 1, None, oracle())], false).is_ok());
    }

    #[test]
    fn different_attempts_settings_or_tasks_are_refused_naming_what_differs() {
        let mut ms = shards(2, 1);
        ms[1] = manifest(&TASKS, 2, Some((2, 2)), oracle());
        let e = check(ms, false).unwrap_err();
        assert!(matches!(e, MergeError::DifferentSuite { .. }), "{e}");
        assert!(e.to_string().contains("attempts_per_task 1 vs 2"), "{e}");
        assert!(e.hint().unwrap().contains("--shard I/N"));

        let mut ms = shards(2, 1);
        ms[1] = manifest(
            &TASKS,
            1,
            Some((2, 2)),
            json!({"agent": "nop", "max_steps": 50}),
        );
        let e = check(ms, false).unwrap_err().to_string();
        assert!(e.contains(r#"agent "oracle" vs "nop""#), "{e}");
        assert!(!e.contains("max_steps"), "only what differs: {e}");

        let mut ms = shards(2, 1);
        ms[1] = manifest(&["a", "b", "c", "x"], 1, Some((2, 2)), oracle());
        let e = check(ms, false).unwrap_err().to_string();
        assert!(
            e.contains("tasks: 2 only in the first (d, e), 1 only in the other (x)"),
            "{e}"
        );

        // The same visible settings, another secret: only the hash says so.
        let mut ms = shards(2, 1);
        let tasks: Vec<String> = TASKS.iter().map(|t| t.to_string()).collect();
        ms[1].fingerprint = fingerprint(&tasks, 1, &oracle(), b"K=other");
        let e = check(ms, false).unwrap_err().to_string();
        assert!(e.contains("only settings kept as a hash differ"), "{e}");
    }

    #[test]
    fn shard_counts_duplicates_whole_suites_and_dirs_twice_are_refused() {
        let ms = vec![
            manifest(&TASKS, 1, Some((1, 2)), oracle()),
            manifest(&TASKS, 1, Some((2, 3)), oracle()),
        ];
        let e = check(ms, false).unwrap_err();
        assert!(matches!(e, MergeError::ShardCounts { .. }), "{e}");
        assert!(e.to_string().contains("shard 1/2"), "{e}");

        let ms = vec![
            manifest(&TASKS, 1, Some((1, 2)), oracle()),
            manifest(&TASKS, 1, Some((1, 2)), oracle()),
        ];
        let e = check(ms, false).unwrap_err();
        assert!(matches!(e, MergeError::SameShard { .. }), "{e}");

        let ms = vec![
            manifest(&TASKS, 1, Some((1, 2)), oracle()),
            manifest(&TASKS, 1, None, oracle()),
        ];
        let e = check(ms, false).unwrap_err();
        assert!(matches!(e, MergeError::WholeWithShards { .. }), "{e}");

        let ms = vec![
            manifest(&TASKS, 1, None, oracle()),
            manifest(&TASKS, 1, None, oracle()),
        ];
        assert!(matches!(
            check(ms, false),
            Err(MergeError::WholeTwice { .. })
        ));

        // One directory under two names.
        let (_root, parts) = dirs(shards(2, 1));
        let link = parts[0].0.with_file_name("again");
        std::os::unix::fs::symlink(&parts[0].0, &link).unwrap();
        let again = (link.clone(), parts[0].1.clone());
        let parts = vec![parts[0].clone(), again];
        let canon: Vec<PathBuf> = parts
            .iter()
            .map(|(d, _)| d.canonicalize().unwrap())
            .collect();
        let e = accept(parts, &canon, false).unwrap_err();
        assert!(matches!(e, MergeError::SameDir { .. }), "{e}");
    }

    #[test]
    fn a_missing_shard_is_refused_unless_allowed() {
        let mut ms = shards(3, 1);
        ms.remove(1);
        let e = check(ms.clone(), false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "shard 2 of 3 is missing (given: 1, 3)",
            "{e}"
        );
        assert!(e.hint().unwrap().contains("--allow-missing"));
        let ok = check(ms, true).unwrap();
        assert_eq!(ok.missing, [Shard { index: 2, count: 3 }]);
        assert_eq!(ok.parts.len(), 2);
    }

    #[test]
    fn a_manifest_that_does_not_hold_together_is_refused() {
        // A shard claiming another shard's tasks.
        let mut ms = shards(2, 1);
        ms[0].shard_tasks = ms[1].shard_tasks.clone();
        let e = check(ms, false).unwrap_err();
        assert!(matches!(e, MergeError::Inconsistent { .. }), "{e}");
        // A task name that would climb out of the directory.
        let tasks: Vec<&str> = vec!["..", "a"];
        let m = manifest(&tasks, 1, None, oracle());
        let e = check(vec![m], false).unwrap_err();
        assert!(e.to_string().contains("not a plain directory name"), "{e}");
        let m = manifest(&["a/../../etc", "b"], 1, None, oracle());
        assert!(check(vec![m], false).is_err());
        // An unsorted list is not what runner writes.
        let m = manifest(&["b", "a"], 1, None, oracle());
        assert!(check(vec![m], false).is_err());
    }
}
