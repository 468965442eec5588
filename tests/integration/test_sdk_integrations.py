"""The TRL callback and the verl adapter, against the real ingestion endpoint (uvicorn).

TRL callback: transformers' own Trainer trains a tiny random Llama on CPU with OplCallback in
`callbacks=[...]`, as TRL's trainers take it; the run gets the TrainingArguments as its config,
every logged scalar at its global step, and ends succeeded. TRL itself is not installed here (it
pulls in datasets and pyarrow): the completion logs are tested with a Trainer that keeps them where
TRL's GRPOTrainer does (`self._logs`: prompt, completion, rewards by function, advantages).

verl adapter: verl is not installed here either (it needs Ray and a GPU stack). OplTracking is
driven the way verl's Tracking drives each backend (`log(data=..., step=...)` with verl's metric
names, the trainer config as a nested dict), and register() is checked on a class with Tracking's
interface (supported_backend, logger, __init__(project_name, experiment_name, default_backend, config)).
"""

import math
from collections import defaultdict, deque

import pytest
import torch

from orchestrator.experiments.external_runs import logging_token_create
from orchestrator.experiments.models import Run
from orchestrator.metrics.chunks import live_series
from orchestrator.samples.models import RolloutSample
from tests.unit.metrics.asgi_server import serve_asgi

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def lab(transactional_db, alice, tmp_path, monkeypatch):
    """The dashboard's URL and alice's logging token, in the environment as a job would have them."""
    _, token = logging_token_create(user=alice)
    with serve_asgi() as url:
        monkeypatch.setenv("OPL_URL", url)
        monkeypatch.setenv("OPL_TOKEN", token)
        monkeypatch.setenv("OPL_DIR", str(tmp_path / "spools"))
        monkeypatch.delenv("OPL_RUN_ID", raising=False)
        yield url


def stored(run: Run) -> dict[str, list[tuple[int, float]]]:
    return {key: list(zip(p.steps.tolist(), p.values.tolist(), strict=True)) for key, p in live_series(run.pk).items()}


def tiny_trainer(tmp_path, callback, trainer_class=None):
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        )
    )
    rows = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (16, 12)).tolist()]
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=6,
        logging_steps=1,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        seed=7,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    return (trainer_class or Trainer)(model=model, args=args, train_dataset=rows, callbacks=[callback])


def test_the_trl_callback_logs_a_transformers_trainer(lab, alice, tmp_path):
    from opl_client.integrations.trl import OplCallback

    trainer = tiny_trainer(tmp_path, OplCallback(project="lab", name="trl-tiny", push_interval_s=0.2))
    trainer.train()
    run = Run.objects.get()
    assert (run.name, run.owner, run.state, run.experiment.project.name) == ("trl-tiny", alice, "succeeded", "lab")
    assert (run.config["learning_rate"], run.config["seed"], run.config["max_steps"]) == (1e-3, 7, 6)
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 6
    series = stored(run)
    assert series["train/loss"] == [(entry["step"], entry["loss"]) for entry in logged]
    assert [step for step, _ in series["train/learning_rate"]] == [1, 2, 3, 4, 5, 6]
    assert "train/train_loss" in series and "train/total_flos" not in series


def test_trl_completion_logs_become_samples(lab, tmp_path):
    from transformers import Trainer

    from opl_client.integrations.trl import OplCallback

    class CompletionLoggingTrainer(Trainer):
        """Keeps completions as TRL's GRPOTrainer does, in self._logs (deques of the latest batch)."""

        def training_step(self, model, inputs, num_items_in_batch=None):
            step = self.state.global_step
            self._logs = {
                "prompt": deque([f"{step}+{i}=" for i in range(3)], maxlen=3),
                "completion": deque([str(step + i) for i in range(3)], maxlen=3),
                "rewards": defaultdict(lambda: deque(maxlen=3)),
                "advantages": deque([0.5, -0.25, 0.0], maxlen=3),
            }
            self._logs["rewards"]["accuracy"].extend([1.0, 0.0, 1.0])
            self._logs["rewards"]["format"].extend([0.5, 0.5, 0.5])
            return super().training_step(model, inputs, num_items_in_batch)

    callback = OplCallback(project="lab", name="grpo-like", push_interval_s=0.2)
    trainer = tiny_trainer(tmp_path, callback, CompletionLoggingTrainer)
    callback.watch(trainer)
    trainer.train()
    run = Run.objects.get()
    samples = RolloutSample.objects.filter(run=run).order_by("step", "index")
    assert samples.count() == 18  # 6 logged steps, 3 completions each
    first = samples.first()
    assert (first.step, first.index, first.prompt, first.response, first.reward) == (1, 0, "0+0=", "0", 1.5)
    assert math.isclose(samples.filter(step=1)[1].reward, 0.5)


def test_the_verl_adapter_takes_what_verl_tracking_hands_it(lab, alice):
    from opl_client.integrations.verl import OplTracking

    config = {
        "actor_rollout_ref": {"actor": {"clip_ratio_low": 0.2, "ppo_mini_batch_size": 32}},
        "algorithm": {"adv_estimator": "grpo"},
        "trainer": {"project_name": "lab", "experiment_name": "qwen-7b-stale4", "seed": 1},
    }
    backend = OplTracking("lab", "qwen-7b-stale4", config, push_interval_s=0.2)
    for step in range(1, 11):  # verl's metric names, some of them numpy scalars
        import numpy as np

        backend.log(
            data={
                "actor/pg_loss": np.float32(0.1 * step),
                "critic/score/mean": step / 10,
                "response_length/mean": np.int64(100 + step),
                "timing_s/gen": 1.5,
            },
            step=step,
        )
    backend.finish()
    run = Run.objects.get()
    assert (run.name, run.state, run.config, run.owner) == ("qwen-7b-stale4", "succeeded", config, alice)
    series = stored(run)
    assert series["critic/score/mean"] == [(s, s / 10) for s in range(1, 11)]
    assert series["response_length/mean"] == [(s, 100.0 + s) for s in range(1, 11)]
    assert series["actor/pg_loss"][2] == (3, float(np.float32(0.3)))


def test_register_adds_the_opl_backend_to_verls_tracking(lab):
    from opl_client.integrations.verl import OplTracking, register

    class Tracking:  # verl.utils.tracking.Tracking's interface (verl is not installed here)
        supported_backend = ["wandb", "console"]

        def __init__(self, project_name, experiment_name, default_backend="console", config=None):
            backends = [default_backend] if isinstance(default_backend, str) else default_backend
            for backend in backends:
                assert backend in self.supported_backend, f"{backend} is not supported"
            self.logger = {}

        def log(self, data, step, backend=None):
            for name, logger in self.logger.items():
                if backend is None or name in backend:
                    logger.log(data=data, step=step)

    register(Tracking)
    register(Tracking)  # twice changes nothing
    tracking = Tracking("lab", "verl-run", default_backend=["opl"], config={"trainer": {"seed": 3}})
    assert isinstance(tracking.logger["opl"], OplTracking)
    tracking.log({"critic/score/mean": 0.5}, step=1)
    tracking.logger["opl"].finish()
    run = Run.objects.get()
    assert (run.name, run.config, run.state) == ("verl-run", {"trainer": {"seed": 3}}, "succeeded")
    assert stored(run) == {"critic/score/mean": [(1, 0.5)]}


def test_a_job_the_lab_launched_logs_to_its_own_run(lab, alice, tiny_config, monkeypatch, tmp_path):
    """A launched job gets OPL_RUN_ID and its run's token in OPL_TOKEN: opl.init() opens nothing and
    logs to that run, whose state stays its job's."""
    import opl
    from tests.unit.metrics.helpers import make_run

    run, token = make_run(alice, tiny_config)
    monkeypatch.setenv("OPL_RUN_ID", str(run.pk))
    monkeypatch.setenv("OPL_TOKEN", token)
    logged = opl.init(name="ignored", dir=tmp_path / "job", push_interval_s=0.2)
    assert logged.id == run.pk
    for step in range(5):
        opl.log({"train/reward_mean": step / 4}, step=step)
    opl.finish()
    assert Run.objects.count() == 1 and Run.objects.get().state == "running"
    assert stored(run) == {"train/reward_mean": [(s, s / 4) for s in range(5)]}
