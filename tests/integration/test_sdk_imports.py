"""`opl import`: a TensorBoard folder, a JSON-lines history (verl's `file` backend,
prime-rl's metrics.jsonl) and a CSV each become a run with its config, against the real ingestion
endpoint (uvicorn). An imported TensorBoard history equals what TensorBoard's own files hold, point
by point; importing again finds the same run, and a history that grew adds only its new points.
add_scalars sub-folders become keys of their own, keys and steps as users write them land whole,
and a point the dashboard refuses is named with its key, step and reason, and fails the command."""

import io
import json
import math

import numpy as np
import pytest
import yaml

from orchestrator.experiments.external_runs import logging_token_create
from orchestrator.experiments.models import Run
from orchestrator.metrics.chunks import live_series
from tests.unit.metrics.asgi_server import serve_asgi

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def opl(transactional_db, alice, tmp_path, monkeypatch):
    """`opl ...` in this process against a real uvicorn, with alice's logging token: (exit code, output)."""
    from opl_client import cli

    monkeypatch.setenv("OPL_IMPORT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("OPL_CONFIG", str(tmp_path / "no-config"))
    _, token = logging_token_create(user=alice)
    with serve_asgi() as url:

        def run(*args: str) -> tuple[int, str]:
            out = io.StringIO()
            code = cli.main(["--url", url, "--token", token, *map(str, args)], out=out)
            return code, out.getvalue()

        yield run


def stored(run: Run) -> dict[str, list[tuple[int, float]]]:
    return {key: list(zip(p.steps.tolist(), p.values.tolist(), strict=True)) for key, p in live_series(run.pk).items()}


def write_tensorboard(folder, steps, start=0):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for step in range(start, start + steps):
        writer.add_scalar("train/reward_mean", math.sin(step / 7) * 0.37 + 0.5, step)
        writer.add_scalar("actor/pg_loss", 1 / (step + 3), step)
        if step % 10 == 0:
            writer.add_scalar("val/acc", step / 1000, step)
    writer.close()


def tensorboard_holds(folder) -> dict[str, list[tuple[int, float]]]:
    """What TensorBoard's own accumulator reads from the folder (values as stored: float32)."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    out = {}
    for events in sorted(folder.iterdir()):
        acc = EventAccumulator(str(events), size_guidance={SCALARS: 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return {tag: sorted(points) for tag, points in out.items()}


def test_a_tensorboard_history_equals_its_source_point_by_point(opl, alice, tmp_path):
    logs = tmp_path / "tensorboard_log" / "m2po-stale4"
    write_tensorboard(logs, 300)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"algorithm": {"objective": "m2po"}, "staleness": 4, "seed": 2}))
    code, out = opl("import", logs, "--project", "lab", "--config", config, "--tag", "verl")
    assert code == 0, out
    run = Run.objects.get()
    assert (run.name, run.owner, run.state, run.experiment.project.name) == ("m2po-stale4", alice, "succeeded", "lab")
    assert run.config == {"algorithm": {"objective": "m2po"}, "staleness": 4, "seed": 2}
    assert [t.name for t in run.tags.all()] == ["verl"] and "tensorboard" in run.notes
    source = tensorboard_holds(logs)
    assert sorted(source) == ["actor/pg_loss", "train/reward_mean", "val/acc"] and len(source["actor/pg_loss"]) == 300
    assert stored(run) == source
    # float32 as TensorBoard stores it, not the float64 the script computed
    assert stored(run)["actor/pg_loss"][0] == (0, float(np.float32(1 / 3)))

    code, _ = opl("import", logs, "--project", "lab", "--config", config, "--tag", "verl")
    assert code == 0 and Run.objects.count() == 1 and stored(run) == source  # the same run, nothing doubled

    write_tensorboard(logs, 50, start=300)  # the run went on: a second event file
    code, _ = opl("import", logs, "--project", "lab", "--config", config, "--tag", "verl")
    assert code == 0 and Run.objects.count() == 1
    grown = tensorboard_holds(logs)
    assert len(grown["actor/pg_loss"]) == 350 and stored(run) == grown


def test_verl_and_prime_rl_json_lines_and_a_csv_each_become_a_run(opl, tmp_path):
    verl = tmp_path / "verl-metrics.jsonl"
    verl.write_text(
        "".join(
            json.dumps(
                {
                    "step": s,
                    "elapsed_seconds": s * 2.5,
                    "data": {"actor/pg_loss": 0.5 - s / 100, "critic/score/mean": s / 10, "val-core/acc": None},
                }
            )
            + "\n"
            for s in range(1, 21)
        )
    )
    prime = tmp_path / "prime" / "metrics.jsonl"
    prime.parent.mkdir()
    prime.write_text(
        json.dumps({"config": {"loss": {"kl_tau": 0.001}, "async_level": 2}})
        + "\n"
        + "".join(
            json.dumps({"step": s, "loss/mean": 1 / (s + 1), "reward": {"mean": s * 0.05}}) + "\n" for s in range(30)
        )
    )
    table = tmp_path / "wandb-export.csv"
    table.write_text("_step,train/reward_mean,notes\n" + "".join(f"{s},{s / 4},x\n" for s in range(10)) + "10,,y\n")
    for source, name in ((verl, "verl-metrics"), (prime, "metrics"), (table, "wandb-export")):
        code, out = opl("import", source, "--project", "lab")
        assert code == 0, out
        assert Run.objects.filter(name=name, state="succeeded").count() == 1
    verl_run, prime_run, csv_run = (Run.objects.get(name=n) for n in ("verl-metrics", "metrics", "wandb-export"))
    verl_points = stored(verl_run)
    # verl's file backend writes NaN as null (orjson): it stays NaN
    assert [s for s, v in verl_points.pop("val-core/acc") if math.isnan(v)] == list(range(1, 21))
    assert verl_points == {
        "actor/pg_loss": [(s, 0.5 - s / 100) for s in range(1, 21)],
        "critic/score/mean": [(s, s / 10) for s in range(1, 21)],
    }
    assert prime_run.config == {"loss": {"kl_tau": 0.001}, "async_level": 2}
    assert stored(prime_run) == {
        "loss/mean": [(s, 1 / (s + 1)) for s in range(30)],
        "reward/mean": [(s, s * 0.05) for s in range(30)],
    }
    assert stored(csv_run) == {"train/reward_mean": [(s, s / 4) for s in range(10)]}


def test_a_bad_line_is_named_and_nothing_is_created(opl, tmp_path):
    bad = tmp_path / "broken.jsonl"
    bad.write_text('{"step": 1, "loss": 0.5}\n{"step": -2, "loss": 0.4}\n')
    code, _ = opl("import", bad)
    assert code == 1 and Run.objects.count() == 0
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text('{"step": 1}\nnot json\n')
    assert opl("import", garbage)[0] == 1 and Run.objects.count() == 0


def test_the_error_names_the_line(tmp_path):
    from opl_client.importers.readers import HistoryError, read_jsonl

    bad = tmp_path / "broken.jsonl"
    bad.write_text('{"step": 1, "loss": 0.5}\n{"step": -2, "loss": 0.4}\n')
    with pytest.raises(HistoryError, match=r"broken.jsonl:2: step must be a whole number >= 0, got -2"):
        read_jsonl(bad)


def test_a_logging_token_is_made_from_the_command_line(transactional_db, alice, tmp_path, monkeypatch):
    from opl_client import cli
    from orchestrator.accounts.services import api_token_create

    monkeypatch.setenv("OPL_CONFIG", str(tmp_path / "no-config"))
    monkeypatch.setenv("OPL_IMPORT_CACHE", str(tmp_path / "cache"))
    personal = api_token_create(user=alice, name="laptop")
    with serve_asgi() as url:
        out = io.StringIO()
        assert cli.main(["--url", url, "--token", personal, "logging-token", "--name", "cluster"], out=out) == 0
        token = out.getvalue().strip()
        assert token.startswith("opllog_")
        source = tmp_path / "h.csv"
        source.write_text("step,loss\n0,1.5\n1,1.25\n")
        assert cli.main(["--url", url, "--token", token, "import", str(source)], out=io.StringIO()) == 0
        assert cli.main(["--url", url, "--token", token, "logging-token"], out=io.StringIO()) == 1  # not from itself
    assert stored(Run.objects.get(owner=alice)) == {"loss": [(0, 1.5), (1, 1.25)]}


def test_add_scalars_sub_folders_become_keys_of_their_own(opl, tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    logs = tmp_path / "runs" / "grpo"
    writer = SummaryWriter(str(logs))
    for step in range(50):
        writer.add_scalars("Reward", {"train": step / 50, "val": -step / 50}, step)
        writer.add_scalar("loss", 1 / (step + 1), step)
    writer.close()
    code, out = opl("import", logs, "--project", "lab")
    assert code == 0, out
    series = stored(Run.objects.get())
    assert sorted(series) == ["Reward/train", "Reward/val", "loss"]
    assert series["Reward/train"] == [(s, float(np.float32(s / 50))) for s in range(50)]
    assert series["Reward/val"] == [(s, float(np.float32(-s / 50))) for s in range(50)]
    sent, read_back = 150, sum(len(v) for v in series.values())
    print(f"opl import add_scalars: {sent} points sent, {read_back} read back")
    assert read_back == sent


def test_keys_and_steps_as_users_write_them_are_imported_whole(opl, tmp_path):
    export = tmp_path / "wandb-export.csv"
    export.write_text(
        "Step,grpo-7b - train/reward,Accuracy (val),train/rewards/<lambda>/mean\n"
        + "".join(f"{s * 1_000_000_000},{s / 10},{s / 20},nan\n" for s in range(1, 6))
    )
    code, out = opl("import", export, "--project", "lab")
    assert code == 0, out
    series = stored(Run.objects.get())
    steps = [s * 1_000_000_000 for s in range(1, 6)]
    assert series["grpo-7b - train/reward"] == [(st, s / 10) for st, s in zip(steps, range(1, 6), strict=True)]
    assert [st for st, _ in series["Accuracy (val)"]] == steps
    assert all(math.isnan(v) for _, v in series["train/rewards/<lambda>/mean"])


def test_a_point_the_dashboard_refuses_is_named_and_the_command_fails(opl, tmp_path):
    history = tmp_path / "history.jsonl"
    history.write_text("".join(json.dumps({"step": s, "loss": s / 10, "bad\u0007key": 1.0}) + "\n" for s in range(3)))
    code, out = opl("import", history, "--project", "lab")
    assert code == 1, out
    assert "points were refused by the dashboard" in out and "'bad\\x07key' at step 2:" in out
    run = Run.objects.get()
    assert run.state == "failed"
    assert stored(run) == {"loss": [(0, 0.0), (1, 0.1), (2, 0.2)]}  # the good points of the batch are stored
