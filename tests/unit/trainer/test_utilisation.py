"""The utilisation keys from what the loop measured: each side's idle time and ratio, the waits,
the weight hand-over, tokens per second."""

import multiprocessing

import pytest
import torch

from trainer.metric_keys import METRIC_KEYS
from trainer.telemetry.utilisation import GeneratorClock, async_utilisation, stale_k_utilisation, state_bytes


def test_stale_k_idles_each_side_while_the_other_works():
    got = stale_k_utilisation(gen_s=4.0, train_s=5.0, gen_tokens=80, trained_tokens=100, sync={}, step_s=10.0)
    assert got["perf/trainer_idle_s"] == 4.0 and got["perf/trainer_idle_ratio"] == pytest.approx(0.4)
    assert got["perf/gen_idle_s"] == 6.0 and got["perf/gen_idle_ratio"] == pytest.approx(0.6)
    assert got["perf/train_tokens_per_s"] == 20.0 and got["perf/gen_tokens_per_s"] == 20.0
    assert got["perf/weight_sync_bytes"] == 0.0 and got["perf/wait_weights_s"] == 0.0
    synced = stale_k_utilisation(4.0, 5.0, 80, 100, {"perf/weight_sync_s": 0.1, "perf/weight_sync_bytes": 512.0}, 10.0)
    assert synced["perf/weight_sync_bytes"] == 512.0
    assert set(got) <= set(METRIC_KEYS)


def test_async_reads_the_generator_clock_over_the_window_since_the_last_step():
    clock = GeneratorClock(multiprocessing.get_context("spawn"))
    before = clock.snapshot()
    for name, amount in (("busy_s", 3.0), ("idle_s", 1.0), ("wait_weights_s", 0.75), ("load_s", 0.5)):
        clock.add(name, amount)
    clock.add("tokens", 300.0)
    window = GeneratorClock.since(clock.snapshot(), before, wall_s=4.5)
    got = async_utilisation(
        wait_s=1.0, train_s=3.5, trained_tokens=70, gen=window, publish={"seconds": 0.2, "bytes": 4096.0}, step_s=5.0
    )
    assert got["perf/trainer_idle_s"] == 1.0 and got["perf/trainer_idle_ratio"] == pytest.approx(0.2)
    assert got["perf/gen_idle_s"] == 1.0 and got["perf/gen_idle_ratio"] == pytest.approx(1 / 4.5)
    assert got["perf/wait_weights_s"] == 0.75 and got["perf/weight_load_s"] == 0.5
    assert got["perf/weight_publish_s"] == 0.2 and got["perf/weight_sync_bytes"] == 4096.0
    assert got["perf/gen_tokens_per_s"] == 100.0 and got["perf/train_tokens_per_s"] == 20.0
    assert set(got) <= set(METRIC_KEYS)
    # a window with nothing in it: no division by zero, ratios 0
    idle = async_utilisation(0.0, 0.0, 0, GeneratorClock.since(before, before, 0.0), {}, 0.0)
    assert idle["perf/gen_idle_ratio"] == 0.0 and idle["perf/gen_tokens_per_s"] == 0.0


def test_a_publish_copies_every_tensor_of_the_state():
    state = {"a": torch.zeros(3, 4), "b": torch.zeros(5, dtype=torch.float16), "c": torch.zeros(2, dtype=torch.int64)}
    assert state_bytes(state) == 3 * 4 * 4 + 5 * 2 + 2 * 8
