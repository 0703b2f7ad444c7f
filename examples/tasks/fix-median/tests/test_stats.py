import subprocess

import pytest


def median_of(values):
    # The agent's code runs in its own isolated interpreter, as an
    # unprivileged user: it can change neither this process's verdict nor
    # /tests or /logs.
    code = "import sys; sys.path.insert(0, '/workspace'); import stats; print(stats.median(%r))" % (values,)
    cmd = ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "python3", "-I", "-c", code]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return float(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "values,expected",
    [([1], 1), ([3, 1, 2], 2), ([1, 2, 3, 4], 2.5), ([4, 1, 3, 2], 2.5), ([5, 5, 1, 9, 7, 2], 5)],
)
def test_median(values, expected):
    assert median_of(values) == expected
