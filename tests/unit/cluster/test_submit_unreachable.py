"""A submit that cannot reach the cluster gives its claim back through run_transition: the run is
queued again with its attempt unspent and the history says why (it used to be a bare UPDATE with
no event), or it ends cancelled when a cancel came while it was being submitted. The cluster is a
real Slurm client pointed at a port where nothing listens (no retries, so it fails at once)."""

import pytest

from orchestrator.cluster.backends import BackendError
from orchestrator.cluster.backends import slurm as slurm_backend
from orchestrator.cluster.services import run_submit
from orchestrator.cluster.slurm.auth import SlurmCredentials
from orchestrator.cluster.slurm.client import SlurmClient
from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def unreachable(monkeypatch, settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"
    client = SlurmClient("http://127.0.0.1:9", SlurmCredentials("slurmtest", token="x.y.z"), connect_retries=0)
    monkeypatch.setattr(slurm_backend, "client_from_settings", lambda: client)
    yield
    client.close()


def history(run):
    return list(run.events.values_list("from_state", "to_state", "attempt"))


def test_an_unreachable_cluster_queues_the_run_again_with_a_history_event(alice, tiny_config, unreachable):
    run = experiment_create(owner=alice, name="down", config=tiny_config).runs.get()
    with pytest.raises(BackendError):
        run_submit(run_id=run.pk, backend_name="slurm")
    run.refresh_from_db()
    assert (run.state, run.attempt) == ("queued", 0)
    assert "127.0.0.1:9" in run.state_reason
    assert history(run) == [("queued", "submitted", 0), ("submitted", "queued", 1)]
    assert run.events.last().detail == run.state_reason


def test_a_cancel_that_came_during_the_submit_is_kept(alice, tiny_config, unreachable):
    run = experiment_create(owner=alice, name="down", config=tiny_config).runs.get()
    Run.objects.filter(pk=run.pk).update(cancel_requested=True)  # as run_request_cancel sets it meanwhile
    with pytest.raises(BackendError):
        run_submit(run_id=run.pk, backend_name="slurm")
    run.refresh_from_db()
    assert run.state == "cancelled" and run.state_reason.startswith("cancelled before its job started")
    assert history(run)[-1] == ("submitted", "cancelled", 1)
