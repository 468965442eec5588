"""The `opl` client drives a sweep end to end against a running server: installed from
client/ without Django, it submits a sweep file, cancels a run, lists runs with the filter
language, and exports a finished run's metrics as CSV; a wrong key names the known ones."""

import csv
import io
import json
import subprocess
import sys
import time

import pytest
import yaml

from orchestrator.accounts.services import api_token_create
from tests.integration.test_end_to_end import celery_worker  # noqa: F401 (a real worker and beat)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
NO_DJANGO = "import sys; sys.modules['django'] = None; from opl_client.cli import main; raise SystemExit(main())"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """`pip install ./client` into a folder of its own (no dependencies fetched: PyYAML is here)."""
    target = tmp_path_factory.mktemp("opl-site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(ROOT / "client"),
        ],
        check=True,
        capture_output=True,
    )
    assert (target / "bin" / "opl").exists()  # the console script
    return target


def opl(installed, url, token, *args):
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(installed),
        "OPL_URL": url,
        "OPL_TOKEN": token,
        "HOME": str(installed),
    }
    return subprocess.run(
        [sys.executable, "-c", NO_DJANGO, *map(str, args)], env=env, capture_output=True, text=True, timeout=60
    )


def test_opl_drives_a_sweep_end_to_end(installed, celery_worker, live_server, alice, tiny_config, tmp_path):  # noqa: F811
    token = api_token_create(user=alice, name="cli")
    tiny_config["train"]["steps"] = 2
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        yaml.safe_dump({"name": "cli-sweep", "project": "lab", "sweep": {"staleness.k": [0, 1]}, "config": tiny_config})
    )
    url = live_server.url

    preview = opl(installed, url, token, "submit", sweep, "--preview")
    assert preview.returncode == 0, preview.stderr
    assert "2 run(s) would be queued" in preview.stdout and "s2" in preview.stdout  # k=1 x 2 updates per step

    submitted = opl(installed, url, token, "submit", sweep)
    assert submitted.returncode == 0, submitted.stderr
    head, ids = submitted.stdout.split(": ", 1)[0], submitted.stdout.rsplit(": ", 1)[1].split()
    experiment = int(head.split()[1])
    kept, cancelled = int(ids[0]), int(ids[1])

    stop = opl(installed, url, token, "cancel", cancelled)
    assert stop.returncode == 0 and stop.stdout.startswith(f"run {cancelled}: "), stop.stderr

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        listed = opl(installed, url, token, "runs", "-q", f"sweep = {experiment}", "--json")
        assert listed.returncode == 0, listed.stderr
        states = {r["id"]: r["state"] for r in json.loads(listed.stdout)}
        if states[kept] in ("succeeded", "failed", "lost") and states[cancelled] == "cancelled":
            break
        time.sleep(2)
    assert states == {kept: "succeeded", cancelled: "cancelled"}, (celery_worker / "worker.log").read_text()[-3000:]

    table = opl(
        installed, url, token, "runs", "-q", f"experiment = cli-sweep and sweep = {experiment} and state = succeeded"
    )
    assert [line.split()[0] for line in table.stdout.splitlines()] == ["id", str(kept)]

    exported = opl(installed, url, token, "metrics", kept, "train/reward_mean", "--csv")
    assert exported.returncode == 0, exported.stderr
    rows = list(csv.reader(io.StringIO(exported.stdout)))
    assert rows[0] == ["run", "key", "step", "value"]
    steps = [int(r[2]) for r in rows[1:]]
    assert steps and steps == sorted(steps) and steps[-1] == 4  # steps are updates: 2 training steps x 2
    assert all(r[:2] == [str(kept), "train/reward_mean"] for r in rows[1:])

    samples = opl(installed, url, token, "samples", kept, "--json")  # the trainer's own samples, pushed by the run
    assert samples.returncode == 0, samples.stderr
    got = json.loads(samples.stdout)
    assert got["kind"] == "train" and got["step"] == 2 and len(got["samples"]) == 8  # the first training step
    assert all(
        len(s["tokens"]) == len(s["log_ratio"]) and all(i < len(s["tokens"]) for i in s["masked"] + s["clipped"])
        for s in got["samples"]
    )
    shown = opl(installed, url, token, "samples", kept, "--marks")
    assert shown.returncode == 0 and shown.stdout.startswith(f"run {kept} · train step 2 · 8 samples"), shown.stderr

    wrong = opl(installed, url, token, "metrics", kept, "train/reward")
    assert wrong.returncode == 1 and "known keys:" in wrong.stderr and "train/reward_mean" in wrong.stderr
    refused = opl(installed, url, "not-a-token", "runs")
    assert refused.returncode == 1 and "HTTP 401" in refused.stderr


def test_opl_shows_a_runs_rollout_samples(installed, live_server, alice, tiny_config):
    """Samples posted with the run's token are read back by `opl samples` (the newest step by
    default, --step, --marks, --json, --steps) and by Client.samples, from a Django-free install."""
    import httpx

    from tests.unit.metrics.helpers import make_run
    from tests.unit.samples.helpers import sample

    run, run_token = make_run(alice, tiny_config)
    token, url = api_token_create(user=alice, name="cli"), live_server.url
    posted = [
        sample(2, 0, reward=0.0),
        sample(
            6,
            0,
            tokens=[" The", " sum", " is", " 12", "."],
            masked=[1, 2],
            clipped=[3],
            reward=1.0,
            prompt="Tom has 5 apples and buys 7.\nHow many?",
        ),
        sample(6, 1, tokens=[" 1", "3"], masked=[0], reward=0.0, prompt="Tom has 5 apples and buys 7.\nHow many?"),
        sample(6, 0, kind="eval", prompt="What is 17 * 3?", response="51", reward=1.0),
    ]
    answer = httpx.post(
        f"{url}/api/v1/runs/{run.pk}/samples",
        json={"attempt": 1, "samples": posted},
        headers={"Authorization": f"Bearer {run_token}"},
        timeout=30,
    )
    assert answer.json() == {"stored": 4, "duplicates": 0, "dropped": 0}

    shown = opl(installed, url, token, "samples", run.pk, "--marks")
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert text.startswith(f"run {run.pk} · train step 6 · 2 samples · reward mean 0.500")
    assert "3 masked, 1 clipped of 7 tokens" in text and "train steps recorded, newest first: 6, 2" in text
    assert "The [[sum is]] __12__." in text and "[[1]]3" in text  # marks, no colour (not a terminal)
    assert "\x1b[" not in text and "#0  right  reward 1  policy v4  staleness 2  2 masked  1 clipped" in text
    assert "Tom has 5 apples" in text and "(same as #0)" in text and "reference 4" in text
    one = opl(installed, url, token, "samples", run.pk, "--index", 1, "--marks").stdout
    assert "· 2 samples ·" in one and "#1  wrong" in one and "#0  right" not in one  # the step line stays whole
    plain = opl(installed, url, token, "samples", run.pk, "--step", 2).stdout
    assert "train step 2 · 1 sample" in plain and "[[" not in plain and "wrong  reward 0" in plain
    coloured = opl(installed, url, token, "samples", run.pk, "--color", "always").stdout
    assert "The\x1b[9;35m sum is\x1b[0m" not in coloured and " \x1b[9;35msum is\x1b[0m" in coloured

    steps = opl(installed, url, token, "samples", run.pk, "--steps")
    assert steps.stdout.splitlines() == [
        "step  samples  masked  clipped",
        "6     2        3       1",
        "2     1        0       0",
    ]
    evals = json.loads(opl(installed, url, token, "samples", run.pk, "--kind", "eval", "--json").stdout)
    assert evals["step"] == 6 and [s["response"] for s in evals["samples"]] == ["51"]
    missing = opl(installed, url, token, "samples", run.pk, "--step", 3)
    assert missing.returncode == 1 and "no train samples recorded at step 3" in missing.stderr

    library = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, json; sys.modules['django'] = None; from opl_client import Client; "
            f"print(json.dumps(Client().samples({run.pk}, 6, sort='masked')))",
        ],
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(installed),
            "OPL_URL": url,
            "OPL_TOKEN": token,
            "HOME": str(installed),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    got = json.loads(library.stdout)
    assert [s["index"] for s in got["samples"]] == [0, 1] and got["samples"][0]["masked"] == [1, 2]
    assert got["steps"][0] == {"step": 6, "n": 2, "masked": 3, "clipped": 1}
