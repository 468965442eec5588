"""The importance ratio split in two: at learning rate 0 the policy drift is exactly 0 on every step,
stale batches included, while the engine mismatch is what it is at any learning rate."""

from tests.integration.trainer.cli_helpers import by_step, read_points, run_trainer, write_config
from trainer.loss_keys import ENGINE_DRIFT_KEYS, POLICY_DRIFT_KEYS

NO_DRIFT = {k: (1.0 if k.endswith("ess_frac") else 0.0) for k in POLICY_DRIFT_KEYS}


def _config(lr: float, staleness: dict) -> dict:
    return {
        "model": {"name": "tiny"},
        "task": {"name": "arithmetic", "eval_sets": []},
        "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 6},
        "algorithm": {"objective": "m2po", "updates_per_step": 2, "lr": lr},
        "train": {"steps": 4, "seed": 5, "torch_threads": 1},
        "staleness": staleness,
        "eval": {"every": 0, "at_start": False},
        "checkpoint": {"every": 0, "keep": 1},
    }


def _run(tmp_path, name: str, lr: float, staleness: dict) -> dict[int, dict[str, float]]:
    cfg = write_config(tmp_path / f"{name}.yaml", _config(lr, staleness))
    result = run_trainer(cfg, tmp_path / name)
    assert result.returncode == 0, result.stdout + result.stderr
    return by_step(read_points(tmp_path / name))


def test_at_learning_rate_0_the_policy_does_not_drift_and_the_engine_mismatch_stays(tmp_path):
    stale = {"mode": "stale_k", "k": 1}
    frozen = _run(tmp_path, "lr0", 0.0, stale)
    moving = _run(tmp_path, "lr", 0.05, stale)
    assert sorted(frozen) == sorted(moving) == [2, 4, 6, 8]
    for step, m in frozen.items():
        assert {k: m[k] for k in POLICY_DRIFT_KEYS} == NO_DRIFT, step
        assert m["actor/kl_k3"] == 0.0  # the loss's ratio is the policy's drift alone
        assert m["drift/engine_abs_dlogp"] > 0 and m["drift/engine_kl_k3"] > 0, step  # KV-cached sampler vs trainer
        assert m["rollout/staleness_max"] == (0 if step == 2 else 2)
    # the first batch comes from the same initial weights in both runs: the same engine mismatch
    assert {k: moving[2][k] for k in ENGINE_DRIFT_KEYS} == {k: frozen[2][k] for k in ENGINE_DRIFT_KEYS}
    # with a learning rate the stale batches drift (once a reward gave a gradient), far past the engine's gap
    last = moving[8]
    assert last["drift/policy_kl_k3"] > 0 and last["drift/policy_ess_frac"] < 1
    assert last["drift/policy_abs_dlogp"] > 1000 * last["drift/engine_abs_dlogp"]


def test_the_async_generator_scores_the_behaviour_weights_as_the_trainer_would(tmp_path):
    frozen = _run(tmp_path, "async", 0.0, {"mode": "async", "max_staleness": 3})
    assert len(frozen) == 4
    for step, m in frozen.items():
        assert {k: m[k] for k in POLICY_DRIFT_KEYS} == NO_DRIFT, step
        assert m["drift/engine_abs_dlogp"] > 0, step
