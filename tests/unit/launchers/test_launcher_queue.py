"""Launcher runs wait in the one queue, under the same quotas, and show on the same pages."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

from orchestrator.experiments.models import Run
from orchestrator.experiments.queue import runs_to_dispatch, waiting_reasons
from orchestrator.experiments.services import experiment_create, run_transition
from orchestrator.launchers.services import launcher_run_create, launcher_upsert
from tests.unit.launchers.helpers import tiny_sdk

pytestmark = pytest.mark.django_db


@pytest.fixture
def gpu_launcher(db):
    staff = User.objects.create_user("sam", is_staff=True)
    return launcher_upsert(by=staff, data=tiny_sdk(name="two-gpus", resources={"gpus": 2, "nodes": 1}))[0]


def test_launcher_gpus_count_against_the_users_gpu_quota(alice, gpu_launcher, tiny_config, settings):
    settings.MAX_ACTIVE_RUNS = 10
    settings.OPL_USER_MAX_GPUS = 3
    for name in ("OPL_USER_MAX_ACTIVE_RUNS", "OPL_PROJECT_MAX_ACTIVE_RUNS", "OPL_PROJECT_MAX_GPUS", "OPL_MAX_GPUS"):
        setattr(settings, name, 0)
    first = launcher_run_create(owner=alice, launcher="two-gpus", params={}, project="lab")
    second = launcher_run_create(owner=alice, launcher="two-gpus", params={}, project="lab")
    cpu = experiment_create(owner=alice, name="cpu", project="lab", config=tiny_config).runs.get()
    assert (first.gpus, second.gpus, cpu.gpus) == (2, 2, 0)
    assert runs_to_dispatch() == [first.pk, cpu.pk]  # 2 + 2 GPUs would pass the user's 3
    run_transition(run=first, to=Run.State.SUBMITTED)  # holding its 2 GPUs
    assert waiting_reasons([second])[second.pk] == "1st; waiting: user GPU limit: 2 of 3 GPUs in use"


def test_launcher_runs_show_on_the_experiment_and_compare_pages(alice, gpu_launcher):
    run = launcher_run_create(owner=alice, launcher="two-gpus", params={"steps": 9}, project="lab")
    client = Client()
    client.force_login(alice)
    for page in (f"/experiments/{run.experiment_id}/", f"/compare/?runs={run.pk}", f"/runs/{run.pk}/", "/"):
        assert client.get(page).status_code == 200, page
    detail = client.get(f"/runs/{run.pk}/").content.decode()
    assert "two-gpus" in detail and "steps: 9" in detail  # its config: the launcher and its values
