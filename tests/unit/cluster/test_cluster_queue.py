"""The queue on the cluster page: queued runs in dispatch order with place, reason and
priority, runs submitted but not running with the backend's reason, each project's quota use; the
card polls itself; a user sees only the runs of projects they belong to (places still count all)."""

import re

import pytest

from orchestrator.experiments.models import Project, Run
from orchestrator.experiments.services import experiment_create, run_set_priority, run_transition

pytestmark = pytest.mark.django_db


def rows(html: str) -> list[tuple[str, str]]:
    """(run id, place) of the queue table's rows, top to bottom."""
    table = html.split('id="queue-table"')[1].split("</table>")[0]
    return re.findall(r'<tr data-run="(\d+)" data-place="(\d*)">', table)


@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_queued_runs_in_dispatch_order_with_place_reason_priority_and_quota(
    client, alice, bob, tiny_config, settings, backend
):
    settings.CLUSTER_BACKEND, settings.SLURM_REST_URL = backend, ""
    settings.MAX_ACTIVE_RUNS = 2
    settings.OPL_PROJECT_MAX_ACTIVE_RUNS = 0
    busy = experiment_create(owner=alice, name="busy", project="lab", config=tiny_config).runs.get()
    run_transition(run=busy, to=Run.State.SUBMITTED)
    Run.objects.filter(pk=busy.pk).update(
        state="pending", backend=backend, job_id="77", state_reason="Resources", gpus=1
    )
    mine = list(
        experiment_create(
            owner=alice, name="sweep", project="lab", config=tiny_config, sweep={"train.steps": [1, 2, 3]}
        ).runs.order_by("id")
    )
    theirs = experiment_create(owner=bob, name="solo", project="bobs", config=tiny_config).runs.get()
    Project.objects.filter(name="lab").update(max_active_runs=3, max_gpus=4)
    run_set_priority(run=mine[2], priority=5)
    client.force_login(alice)

    html = client.get("/cluster/health").content.decode()
    assert 'hx-get="/cluster/queue" hx-trigger="every 5s"' in html
    # priority 5 first; then users take turns: alice holds 1 active run, bob 0, so bob's run is 2nd
    # (he is not in lab: his run is counted in the places, not listed)
    assert rows(html) == [(str(mine[2].pk), "1"), (str(mine[0].pk), "3"), (str(mine[1].pk), "4")]
    reasons = re.findall(r'<td class="queue-reason">([^<]*)</td>', html)
    assert reasons == [
        "starts at the next dispatch (1 free)",
        "waiting: 2 ahead for 1 free slot",
        "waiting: 3 ahead for 1 free slot",
    ]
    assert f'data-run="{theirs.pk}"' not in html
    waiting = html.split('id="queue-waiting"')[1].split("</table>")[0]
    assert f'data-run="{busy.pk}"' in waiting and "Resources" in waiting and f"{backend} 77" in waiting
    quotas = html.split('id="queue-quotas"')[1].split("</table>")[0]
    assert re.search(r'data-project="lab"><td>lab</td>\s*<td>1 / 3</td>\s*<td>1 / 4</td><td>3</td>', quotas)
    assert 'data-project="bobs"' not in quotas

    fragment = client.get("/cluster/queue").content.decode()
    assert fragment.startswith("<section") or fragment.lstrip().startswith("<section")
    assert rows(fragment) == rows(html)
    client.force_login(bob)
    assert rows(client.get("/cluster/queue").content.decode()) == [(str(theirs.pk), "2")]


def test_running_jobs_are_linked_to_their_runs_and_cancelled_from_the_queue(client, alice, bob, tiny_config):
    """Running jobs were bare ids (opl-2-a1) and nothing could be cancelled from the queue: each
    running run is listed, linked, with its job, and its owner (not a viewer) may cancel it there."""
    from orchestrator.experiments.models import Membership

    run = experiment_create(owner=alice, name="live", project="lab", config=tiny_config).runs.get()
    Run.objects.filter(pk=run.pk).update(state=Run.State.RUNNING, backend="local", job_id="opl-1-a1")
    queued = experiment_create(owner=alice, name="next", project="lab", config=tiny_config).runs.get()
    Membership.objects.create(project=Project.objects.get(name="lab"), user=bob, role=Membership.Role.VIEWER)
    client.force_login(alice)
    html = client.get("/cluster/queue").content.decode()
    running = html.split('id="queue-running"')[1].split("</table>")[0]
    assert f'<a href="/runs/{run.pk}/">{run.name}</a>' in running and "opl-1-a1" in running
    assert f'data-cancel="{run.pk}" hx-post="/runs/{run.pk}/cancel"' in running
    assert f'data-cancel="{queued.pk}"' in html.split('id="queue-table"')[1].split("</table>")[0]
    client.force_login(bob)  # a viewer sees the run, not the button
    html = client.get("/cluster/queue").content.decode()
    assert f'data-run="{run.pk}"' in html and "data-cancel" not in html
    client.force_login(alice)
    assert client.post(f"/runs/{run.pk}/cancel", HTTP_HX_REQUEST="true").status_code == 200
    assert Run.objects.get(pk=run.pk).cancel_requested
