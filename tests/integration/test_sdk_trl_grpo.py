"""TRL's real GRPOTrainer (trl 1.16) trains a tiny random Qwen2 with a character tokenizer on CPU,
with the one line a user writes: `import opl.trl` and report_to="opl". Against the live ingestion
endpoint (uvicorn): every logged point is read back under TRL's own names (a lambda reward's series
is train/rewards/<lambda>/mean), eval completions are kept apart from train ones as kind "eval", the
run stays reachable as callback.run, and a crash the script catches ends the run failed."""

import pytest
import torch

from orchestrator.experiments.external_runs import logging_token_create
from orchestrator.experiments.models import Run
from orchestrator.samples.models import RolloutSample
from tests.unit.metrics.asgi_server import serve_asgi

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def lab(transactional_db, alice, tmp_path, monkeypatch):
    _, token = logging_token_create(user=alice)
    with serve_asgi() as url:
        monkeypatch.setenv("OPL_URL", url)
        monkeypatch.setenv("OPL_TOKEN", token)
        monkeypatch.setenv("OPL_PROJECT", "trl-lab")
        monkeypatch.setenv("OPL_DIR", str(tmp_path / "spools"))
        monkeypatch.delenv("OPL_RUN_ID", raising=False)
        yield url


def correct(completions, **kwargs):
    return [1.0 if "2" in c else 0.0 for c in completions]


def grpo_trainer(tmp_path, max_steps=4, reward_funcs=None):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    import opl.trl  # noqa: F401  the one line: report_to="opl" is known from here on
    from trainer.policy.models import char_tokenizer, tiny_model

    tokenizer = char_tokenizer("0123456789+=")
    model = tiny_model(len(tokenizer), hidden=32, layers=1, seed=0)
    rows = [{"prompt": f"{a}+{b}="} for a in range(4) for b in range(2)]
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        run_name="grpo-tiny",
        report_to="opl",
        max_steps=max_steps,
        logging_steps=1,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        num_generations=4,
        max_completion_length=4,
        eval_strategy="steps",
        eval_steps=2,
        learning_rate=1e-3,
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    torch.manual_seed(0)
    return GRPOTrainer(
        model=model,
        reward_funcs=reward_funcs or [correct, lambda completions, **kw: [len(c) / 4 for c in completions]],
        args=args,
        train_dataset=Dataset.from_list(rows),
        eval_dataset=Dataset.from_list(rows[:4]),
        processing_class=tokenizer,
    )


def callback_of(trainer):
    from opl_client.integrations.trl import OplCallback

    [callback] = [c for c in trainer.callback_handler.callbacks if isinstance(c, OplCallback)]
    return callback


def test_grpo_with_report_to_opl_lands_whole(lab, alice, tmp_path):
    from orchestrator.metrics.chunks import live_series

    trainer = grpo_trainer(tmp_path)
    trainer.train()
    run = callback_of(trainer).run
    assert run is not None and run.id is not None  # reachable after training
    stored = Run.objects.get(pk=run.id)
    assert (stored.name, stored.state, stored.experiment.project.name) == ("grpo-tiny", "succeeded", "trl-lab")
    kinds = set(RolloutSample.objects.filter(run_id=stored.pk).values_list("kind", flat=True))
    assert kinds == {"train", "eval"}
    eval_steps = set(RolloutSample.objects.filter(run_id=stored.pk, kind="eval").values_list("step", flat=True))
    assert eval_steps == {2, 4}
    series = live_series(stored.pk)
    from opl_client.integrations.trl import metric_name

    # a (key, step) logged twice (train/epoch by the train, eval and end-of-training logs) is one point
    sent = len(
        {
            (metric_name(k), entry["step"])
            for entry in trainer.state.log_history
            for k, v in entry.items()
            if v is not None and not _skipped(k)
        }
    )
    read_back = sum(len(p.steps) for p in series.values())
    print(f"TRL GRPOTrainer: {sent} points sent, {read_back} read back")
    assert read_back == sent
    assert "train/rewards/<lambda>/mean" in series and "train/rewards/correct/mean" in series
    assert "eval/rewards/<lambda>/mean" in series


def test_a_crash_the_script_catches_ends_the_run_failed(lab, tmp_path):
    def explode(completions, **kwargs):
        raise RuntimeError("reward server down")

    trainer = grpo_trainer(tmp_path, max_steps=2, reward_funcs=[explode])
    try:
        trainer.train()
    except RuntimeError:
        pass  # the script goes on, as a notebook or a sweep driver does
    run = callback_of(trainer).run
    assert Run.objects.get(pk=run.id).state == "failed"


def _skipped(key: str) -> bool:
    from opl_client.integrations.trl import SKIPPED

    return key in SKIPPED
