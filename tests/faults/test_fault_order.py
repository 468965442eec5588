"""The live Slurm fault tests pass in either order. The submit-race tests once met a refused
connection from the slurmrestd the fault rows use: green alone, red in the README's `pytest -m
slurm`. Here the slurmrestd outage row runs, then the race tests, and the reverse, each step a
pytest process of its own on explicit node ids, started as the one before it ends. (In one
process pytest-django runs tests that use the database before those that do not, so the race
tests would always come first.)"""

import os
import re
import subprocess
import sys
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.faults.stack import REPO
from tests.slurm_rest import ENV_DIR

pytestmark = [pytest.mark.slurm, pytest.mark.integration]

OUTAGE_ROW = "tests/faults/test_fault_rows.py::test_fault_row_loses_nothing[restd-outage]"
RACE_TESTS = [
    "tests/faults/test_submit_race.py::test_a_second_submit_task_of_a_claimed_run_does_not_submit_it_again",
    "tests/faults/test_submit_race.py::test_a_stale_claim_taken_over_by_two_at_once_gets_one_job",
]


def own_database(url: str, suffix: str) -> str:
    """The same server under another database name: the inner pytest makes its test database from
    it, which must not be the one this session already holds."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}_{suffix}"))


def run_pytest(node_ids: list[str], env: dict[str, str]) -> tuple[list[tuple[str, str]], str]:
    """Run pytest on these node ids, in this order; each test's node id and outcome, and the output's tail."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-v", *node_ids],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    ran = re.findall(r"^(tests/\S+) (PASSED|FAILED|ERROR|SKIPPED)", done.stdout, re.MULTILINE)
    return ran, f"exit {done.returncode}\n{done.stdout[-4000:]}{done.stderr[-2000:]}"


@pytest.mark.timeout(1500)
@pytest.mark.parametrize(
    "steps",
    [
        pytest.param([[OUTAGE_ROW], RACE_TESTS], id="outage-row-then-race"),
        pytest.param([RACE_TESTS, [OUTAGE_ROW]], id="race-then-outage-row"),
    ],
)
def test_the_outage_row_and_the_submit_race_pass_in_either_order(steps, tmp_path):
    if not (ENV_DIR / "host.env").exists():
        pytest.skip("the Slurm test cluster is not up (scripts/slurm/cluster-up.sh)")
    env = {
        **os.environ,
        "DATABASE_URL": own_database(os.environ["DATABASE_URL"], "order"),
        "OPL_VAR_DIR": str(tmp_path / "var"),
    }
    for node_ids in steps:
        ran, tail = run_pytest(node_ids, env)
        assert ran == [(node, "PASSED") for node in node_ids], tail
