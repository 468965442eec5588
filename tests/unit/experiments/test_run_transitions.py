import pytest

from orchestrator.experiments.models import Run, RunEvent
from orchestrator.experiments.services import InvalidTransition, experiment_create, run_transition

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(alice, tiny_config) -> Run:
    return experiment_create(owner=alice, name="exp", config=tiny_config).runs.get()


def test_transition_records_time_and_event(run):
    assert run_transition(run=run, to=Run.State.SUBMITTED, job_id="42")
    stored = Run.objects.get(pk=run.pk)
    assert stored.state == "submitted" and stored.job_id == "42" and stored.submitted_at is not None
    assert list(RunEvent.objects.filter(run=run).values_list("from_state", "to_state")) == [("queued", "submitted")]


def test_a_stale_copy_loses_the_race(run):
    other_copy = Run.objects.get(pk=run.pk)
    assert run_transition(run=run, to=Run.State.SUBMITTED)
    assert not run_transition(run=other_copy, to=Run.State.CANCELLED)
    assert Run.objects.get(pk=run.pk).state == "submitted"
    assert RunEvent.objects.filter(run=run).count() == 1


def test_succeeded_is_final(run):
    for state in (Run.State.SUBMITTED, Run.State.RUNNING, Run.State.SUCCEEDED):
        assert run_transition(run=run, to=state)
    with pytest.raises(InvalidTransition):
        run_transition(run=run, to=Run.State.QUEUED)
