"""Reads a job directory `runner eval --harbor-job` wrote with Harbor's own
code (run inside Harbor's environment: sandbox/harbor/harbor.sh --python).

    check_job.py JOBS_DIR JOB_NAME

Fails (exit 1, the reason on stderr) when:
- a result or config does not validate with Harbor's pydantic models
  (JobResult, JobConfig, TrialResult, TrialConfig);
- a file says something Harbor does not read back the same: every key
  runner wrote must be in Harbor's re-serialization of the loaded model,
  with the same value (a field Harbor ignores or reads differently fails);
- a trial's task_checksum is not Harbor's Task.checksum of the task;
- the job's stats are not what Harbor computes from the trials
  (JobStats.from_trial_results, the Mean metric and pass@k, as Job.run does);
- Harbor's viewer (`harbor view`'s FastAPI app) does not list the job and
  its trials, or serves them differently.

Prints, as JSON on stdout, what Harbor's viewer says of each trial (task,
rewards, reward, error type), for the caller to compare with runner's report.
"""

import json
import sys
import warnings
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from fastapi.testclient import TestClient

from harbor.metrics.mean import Mean
from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult, JobStats
from harbor.models.task.task import Task
from harbor.models.trial.config import TrialConfig
from harbor.models.trial.result import TrialResult
from harbor.utils.pass_at_k import compute_pass_at_k_by_evals
from harbor.viewer.server import create_app

failures: list[str] = []


def fail(message: str) -> None:
    failures.append(message)


def norm(value):
    """Datetimes compared as instants, lists of names as sets."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return value
    if isinstance(value, dict):
        return {k: norm(v) for k, v in value.items()}
    if isinstance(value, list):
        items = [norm(v) for v in value]
        if all(isinstance(v, (str, float)) for v in items):
            return sorted(items, key=repr)
        return items
    return value


def same_as_harbor(where: str, written, dumped) -> None:
    """Every key runner wrote is in Harbor's dump, with the same value."""
    if isinstance(written, dict):
        if not isinstance(dumped, dict):
            fail(f"{where}: runner wrote an object, Harbor reads {dumped!r}")
            return
        for key, value in written.items():
            if key not in dumped:
                fail(f"{where}.{key}: written by runner, not a field Harbor reads")
                continue
            same_as_harbor(f"{where}.{key}", value, dumped[key])
        return
    if isinstance(written, list) and any(isinstance(v, dict) for v in written):
        if not isinstance(dumped, list) or len(dumped) != len(written):
            fail(f"{where}: runner wrote {written!r}, Harbor reads it as {dumped!r}")
            return
        for i, (w, d) in enumerate(zip(written, dumped)):
            same_as_harbor(f"{where}[{i}]", w, d)
        return
    if norm(written) != norm(dumped):
        fail(f"{where}: runner wrote {written!r}, Harbor reads it as {dumped!r}")


def load(model, path: Path):
    text = path.read_text()
    try:
        obj = model.model_validate_json(text)
    except Exception as e:  # pydantic's ValidationError, with every field
        fail(f"{path}: not a valid {model.__name__}: {e}")
        return None
    same_as_harbor(str(path), json.loads(text), obj.model_dump(mode="json"))
    return obj


def harbor_stats(trials: list[TrialResult], n_total: int) -> dict:
    """The stats Harbor's Job.run writes at the end of a job."""
    stats = JobStats.from_trial_results(trials, n_total_trials=n_total)
    rewards = defaultdict(list)
    for t in trials:
        key = JobStats.format_agent_evals_key(
            t.agent_info.name,
            t.agent_info.model_info.name if t.agent_info.model_info else None,
            t.source or "adhoc",
        )
        if t.reward_valid and t.verifier_result is not None:
            rewards[key].append(t.verifier_result.rewards)
    for key, rs in rewards.items():
        stats.evals[key].metrics.append(Mean().compute(rs))
    for key, pass_at_k in compute_pass_at_k_by_evals(trials).items():
        stats.evals[key].pass_at_k = pass_at_k
    return stats.model_dump(mode="json")


def main() -> int:
    jobs_dir, job_name = Path(sys.argv[1]), sys.argv[2]
    job_dir = jobs_dir / job_name
    job = load(JobResult, job_dir / "result.json")
    load(JobConfig, job_dir / "config.json")
    trials: list[TrialResult] = []
    for trial_dir in sorted(p for p in job_dir.iterdir() if p.is_dir()):
        result = load(TrialResult, trial_dir / "result.json")
        config = load(TrialConfig, trial_dir / "config.json")
        if result is None or config is None:
            continue
        trials.append(result)
        if result.trial_name != trial_dir.name:
            fail(f"{trial_dir}: trial_name {result.trial_name}")
        if config != result.config:
            fail(f"{trial_dir}: config.json differs from the result's config")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            want = Task(result.task_id.get_local_path()).checksum
        if result.task_checksum != want:
            fail(f"{trial_dir}: task_checksum {result.task_checksum}, Harbor's {want}")
        for name in ("verifier", "agent"):
            if not (trial_dir / name).is_dir():
                fail(f"{trial_dir}: no {name}/")
    if job is not None:
        same_as_harbor(
            f"{job_dir}/result.json stats (Harbor's own from the trials)",
            job.model_dump(mode="json")["stats"],
            harbor_stats(trials, job.n_total_trials),
        )

    # What `harbor view JOBS_DIR` serves.
    seen = {}
    with TestClient(create_app(jobs_dir)) as client:
        listed = client.get("/api/jobs").json()
        if job_name not in [j["name"] for j in listed.get("items", [])]:
            fail(f"the viewer does not list {job_name}: {listed}")
        got = client.get(f"/api/jobs/{job_name}")
        if got.status_code != 200 or job is None or got.json()["id"] != str(job.id):
            fail(f"the viewer's job: {got.status_code} {got.text[:500]}")
        got = client.get(f"/api/jobs/{job_name}/config")
        if got.status_code != 200:
            fail(f"the viewer's job config: {got.status_code} {got.text[:500]}")
        page = client.get(f"/api/jobs/{job_name}/trials").json()
        by_name = {t["name"]: t for t in page.get("items", [])}
        if sorted(by_name) != sorted(t.trial_name for t in trials):
            fail(f"the viewer lists trials {sorted(by_name)}, the job has {[t.trial_name for t in trials]}")
        for t in trials:
            summary = by_name.get(t.trial_name, {})
            got = client.get(f"/api/jobs/{job_name}/trials/{t.trial_name}")
            if got.status_code != 200:
                fail(f"the viewer's trial {t.trial_name}: {got.status_code}")
            out = client.get(
                f"/api/jobs/{job_name}/trials/{t.trial_name}/verifier-output"
            ).json()
            log = job_dir / t.trial_name / "verifier" / "test-stdout.txt"
            if log.exists() and out.get("stdout") != log.read_text():
                fail(f"the viewer's verifier output of {t.trial_name}: {str(out)[:300]}")
            seen[t.trial_name] = {
                "task_name": t.task_name,
                "rewards": t.verifier_result.rewards if t.verifier_result else None,
                "reward_valid": t.reward_valid,
                "viewer_reward": summary.get("reward"),
                "viewer_error_type": summary.get("error_type"),
                "exception_type": t.exception_info.exception_type
                if t.exception_info
                else None,
            }
    if failures:
        print("\n".join(failures), file=sys.stderr)
        return 1
    print(json.dumps({"trials": seen, "stats": job.model_dump(mode="json")["stats"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
