"""The storage bound per run: over OPL_SAMPLES_MAX_PER_RUN the older steps are thinned (every
other step, always the first and the newest), counted as dropped, and stay dropped when re-posted."""

import pytest

from orchestrator.samples.models import RolloutSample
from orchestrator.samples.services import thinned_steps
from tests.unit.metrics.helpers import make_run

from .helpers import batch, post, sample

pytestmark = pytest.mark.django_db


def steps_of(run, kind="train"):
    return sorted(set(RolloutSample.objects.filter(run=run, kind=kind).values_list("step", flat=True)))


def test_thinning_keeps_every_other_step_and_both_ends():
    def thin(steps, bound, thinned=()):
        return thinned_steps([(s, 4) for s in steps], set(thinned), bound)

    assert thin(range(6), 20) == [1, 3]
    assert thin(range(7), 20) == [1, 3, 5]
    assert thin(range(9), 12) == [1, 2, 3, 5, 6, 7]  # two passes: 0, 4, 8 left
    assert thin(range(9), 8) == [1, 2, 3, 4, 5, 6, 7]  # never fewer than the first and the newest
    assert thinned_steps([(0, 50), (1, 50)], set(), 10) == []
    # ranks count the steps thinned before: 0 2 4 6 stored (1 3 5 thinned) and 7, 8 new
    assert thin([0, 2, 4, 6, 7, 8], 20, thinned=[1, 3, 5]) == [7]
    assert thin([0, 2, 4, 6, 7, 8], 16, thinned=[1, 3, 5]) == [2, 6, 7]


def test_a_long_run_stays_under_the_bound_and_spans_its_history(client, settings, alice, tiny_config):
    settings.OPL_SAMPLES_MAX_PER_RUN = 40
    run, token = make_run(alice, tiny_config)
    posted = dropped = 0
    for step in range(0, 1000, 10):  # 100 recorded steps x 4 samples
        answer = post(client, run.pk, token, batch([sample(step, i) for i in range(4)])).json()
        posted += answer["stored"]
        dropped += answer["dropped"]
    kept = RolloutSample.objects.filter(run=run).count()
    assert kept <= 40 and posted - dropped == kept
    steps = steps_of(run)
    assert steps[0] == 0 and steps[-1] == 990
    assert max(b - a for a, b in zip(steps, steps[1:])) <= 990 // 4  # spread over the run, not just its end


def test_a_thinned_step_posted_again_is_dropped_again(client, settings, alice, tiny_config):
    settings.OPL_SAMPLES_MAX_PER_RUN = 12
    run, token = make_run(alice, tiny_config)
    for step in range(4):
        post(client, run.pk, token, batch([sample(step, i) for i in range(4)]))
    before = steps_of(run)
    assert before == [0, 2, 3]
    answer = post(client, run.pk, token, batch([sample(1, i) for i in range(4)])).json()
    assert answer == {"stored": 0, "duplicates": 0, "dropped": 4}
    assert steps_of(run) == before


def test_eval_samples_have_their_own_bound(client, settings, alice, tiny_config):
    settings.OPL_SAMPLES_MAX_PER_RUN, settings.OPL_SAMPLES_MAX_EVAL_PER_RUN = 100, 6
    run, token = make_run(alice, tiny_config)
    for step in range(5):
        post(client, run.pk, token, batch([sample(step, i, kind="eval") for i in range(2)] + [sample(step, 0)]))
    assert RolloutSample.objects.filter(run=run, kind="eval").count() <= 6
    assert steps_of(run, "eval")[0] == 0 and steps_of(run, "eval")[-1] == 4
    assert steps_of(run, "train") == [0, 1, 2, 3, 4]
