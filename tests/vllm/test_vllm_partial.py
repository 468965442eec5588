"""Partial rollouts on vLLM's CPU build, a weight swap forced mid-response (as the hf engine's test
does): the tokens sampled before it carry the old version and the old weights' log-probs, those
after it the new ones, for the engine's log-probs and the trainer's behaviour log-probs alike;
without a swap the batch is the plain vLLM engine's, token for token (partial_checks.py does the
work in .venv-vllm)."""

import json
import subprocess

import pytest

from tests.vllm.conftest import REPO, vllm_env

pytestmark = pytest.mark.vllm
OLD, NEW = 5, 7  # partial_checks.py's versions


@pytest.fixture(scope="module")
def report(vllm_python, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("vllm-partial") / "report.json"
    done = subprocess.run(
        [str(vllm_python), str(REPO / "tests" / "vllm" / "partial_checks.py"), str(out)],
        cwd=REPO,
        env=vllm_env(VLLM_ENABLE_V1_MULTIPROCESSING=0),
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    data = json.loads(out.read_text())
    print(json.dumps(data, indent=1))
    return data


def test_a_forced_swap_gives_each_token_its_version(report):
    swap = report["forced_swap"]
    assert swap["swaps"] == 1 and swap["last_offset"] == NEW - OLD
    assert swap["tokens_before"] > 0 and swap["tokens_after"] > 0
    assert swap["rows_spanning"] >= 2, "the tiny model should rarely stop within 4 tokens"
    assert swap["every_token_one_of_two_versions"] and swap["versions_in_order"]
    assert swap["versions_before"] == [OLD] and swap["versions_after"] == [NEW]
    assert swap["span_max"] == NEW - OLD
    assert swap["partial_frac"] == pytest.approx(swap["spanning_frac"])


def test_a_forced_swap_gives_each_token_the_log_probs_of_the_weights_that_sampled_it(report):
    swap = report["forced_swap"]
    # the engine's log-probs: the old weights before the swap, the new ones (prefix recomputed) after
    assert swap["engine_diff_before_vs_old"] <= 1e-4
    assert swap["engine_diff_after_vs_new"] <= 1e-4
    assert swap["engine_diff_after_vs_old"] > 1e-2  # the swap is visible at all
    # the trainer's behaviour log-probs: the segment's own weights, the rest from the whole batch
    assert swap["behav_diff_before_vs_old"] <= 1e-6
    assert swap["behav_after_is_whole"]


def test_without_a_swap_the_batch_is_the_plain_vllm_engines(report):
    same = report["no_swap"]
    assert same["swaps"] == 0 and same["offsets_all_zero"]
    assert all(same["same"].values()), same["same"]
    assert same["same_texts"] and same["same_finished"]
    assert same["distinct_responses"] > 6  # sampled, not one greedy answer repeated


def test_an_async_run_with_partial_rollouts_on_vllm_keeps_versions_within_the_bound(vllm_python, tmp_path):
    """The generator process with vLLM's multiprocessing engine, as a run uses it: the engine's
    log-probs stay those the trainer recomputes for each token's own version, swaps or not."""
    from tests.vllm.test_vllm_runs import BASE, run, trained

    rollout = {**BASE["rollout"], "max_new_tokens": 24, "partial": True}
    done, steps = run(
        vllm_python,
        tmp_path,
        {
            "rollout": rollout,
            "staleness": {"mode": "async", "max_staleness": 4},
            "train": {**BASE["train"], "steps": 4},
        },
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    points = trained(steps)
    assert sorted(points) == [2, 4, 6, 8]
    for step, v in points.items():
        assert abs(v["rollout/engine_kl"]) < 1e-4, (step, v["rollout/engine_kl"])
        assert 0 <= v["rollout/partial_frac"] <= 1
        assert 0 <= v["rollout/version_span_mean"] <= v["rollout/version_span_max"]
        assert v["rollout/version_span_max"] <= v["rollout/observed_staleness_max"] <= v["rollout/staleness_bound"]
        assert v["rollout/dropped_samples"] == 0
