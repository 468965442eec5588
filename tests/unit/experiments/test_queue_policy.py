"""The dispatcher's choice: priorities, limits, fairness between users, paused sweeps."""

from collections import Counter

import pytest

from orchestrator.experiments.models import Project, Run
from orchestrator.experiments.queue import runs_to_dispatch
from orchestrator.experiments.services import (
    experiment_create,
    experiment_pause,
    experiment_resume,
    run_move_to_top,
    run_set_priority,
    run_transition,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def site_limits(settings):
    settings.MAX_ACTIVE_RUNS = 4
    for name in (
        "OPL_USER_MAX_ACTIVE_RUNS",
        "OPL_USER_MAX_GPUS",
        "OPL_PROJECT_MAX_ACTIVE_RUNS",
        "OPL_PROJECT_MAX_GPUS",
        "OPL_MAX_GPUS",
    ):
        setattr(settings, name, 0)
    return settings


def sweep(owner, n, config, *, project="lab", priority=0, name="s"):
    if (shared := Project.objects.filter(name=project).first()) is not None:
        shared.members.add(owner)  # the users of a test share its projects: added, not joined by naming
    return experiment_create(
        owner=owner,
        name=name,
        project=project,
        config=config,
        sweep={"train.steps": list(range(1, n + 1))},
        priority=priority,
    )


def activate(run_ids):
    for run in Run.objects.filter(pk__in=run_ids):
        run_transition(run=run, to=Run.State.SUBMITTED)


def owners(run_ids):
    return Counter(Run.objects.get(pk=i).owner.username for i in run_ids)


def test_higher_priority_first_then_oldest(alice, tiny_config):
    low = sweep(alice, 3, tiny_config, name="low")
    high = sweep(alice, 2, tiny_config, priority=5, name="high")
    picked = runs_to_dispatch()
    high_ids = list(high.runs.order_by("id").values_list("id", flat=True))
    low_ids = list(low.runs.order_by("id").values_list("id", flat=True))
    assert picked == high_ids + low_ids[:2]


def test_run_priority_edit_and_move_to_top(alice, tiny_config, settings):
    settings.MAX_ACTIVE_RUNS = 1
    runs = list(sweep(alice, 3, tiny_config).runs.order_by("id"))
    assert runs_to_dispatch() == [runs[0].pk]
    assert run_move_to_top(run=runs[2])
    assert runs_to_dispatch() == [runs[2].pk]
    assert run_set_priority(run=runs[1], priority=10)
    assert runs_to_dispatch() == [runs[1].pk]


def test_priority_is_fixed_once_submitted(alice, tiny_config):
    run = sweep(alice, 1, tiny_config).runs.get()
    activate([run.pk])
    run.refresh_from_db()
    assert not run_set_priority(run=run, priority=9)
    assert not run_move_to_top(run=run)


def test_two_users_with_large_sweeps_share_the_cluster(alice, bob, tiny_config, settings):
    settings.MAX_ACTIVE_RUNS = 6
    sweep(alice, 500, tiny_config, name="alice-big")  # alice queued first, and far more
    sweep(bob, 300, tiny_config, name="bob-big")
    picked = runs_to_dispatch()
    assert owners(picked) == {"alice": 3, "bob": 3}
    activate(picked[:4])  # two of each become active; capacity for two more
    assert owners(runs_to_dispatch()) == {"alice": 1, "bob": 1}


def test_newcomer_goes_before_the_user_who_already_runs_more(alice, bob, charlie, tiny_config, settings):
    settings.MAX_ACTIVE_RUNS = 4
    alice_runs = sweep(alice, 50, tiny_config, name="a")
    activate(list(alice_runs.runs.order_by("id").values_list("id", flat=True)[:3]))
    sweep(charlie, 2, tiny_config, name="c", project="other")
    assert owners(runs_to_dispatch()) == {"charlie": 1}


def test_per_user_run_limit_does_not_block_other_users(alice, bob, tiny_config, settings):
    settings.MAX_ACTIVE_RUNS = 10
    settings.OPL_USER_MAX_ACTIVE_RUNS = 2
    sweep(alice, 20, tiny_config, name="a")
    sweep(bob, 20, tiny_config, name="b")
    assert owners(runs_to_dispatch()) == {"alice": 2, "bob": 2}


def test_per_user_gpu_limit_lets_cpu_runs_through(alice, tiny_config, settings):
    settings.MAX_ACTIVE_RUNS = 10
    settings.OPL_USER_MAX_GPUS = 2
    gpu_config = {**tiny_config, "train": {**tiny_config["train"], "device": "cuda"}}
    gpu = sweep(alice, 5, gpu_config, name="gpu")
    cpu = sweep(alice, 2, {**tiny_config, "train": {**tiny_config["train"], "device": "cpu"}}, name="cpu")
    assert set(gpu.runs.values_list("gpus", flat=True)) == {1}
    picked = runs_to_dispatch()
    gpu_ids = list(gpu.runs.order_by("id").values_list("id", flat=True))
    assert picked == gpu_ids[:2] + list(cpu.runs.order_by("id").values_list("id", flat=True))


def test_project_limit_and_site_gpu_limit(alice, bob, tiny_config, settings):
    settings.MAX_ACTIVE_RUNS = 10
    lab = sweep(alice, 5, tiny_config, project="lab", name="a")
    lab.project.max_active_runs = 1
    lab.project.save()
    sweep(bob, 5, tiny_config, project="lab", name="b")
    assert len(runs_to_dispatch()) == 1  # the whole project holds one active run

    settings.OPL_MAX_GPUS = 3
    gpu_config = {**tiny_config, "train": {**tiny_config["train"], "device": "cuda"}}
    sweep(alice, 5, gpu_config, project="gpu-lab", name="g")
    picked = runs_to_dispatch()
    assert sum(Run.objects.get(pk=i).gpus for i in picked) == 3


def test_paused_sweep_submits_nothing_until_resumed(alice, tiny_config):
    experiment = sweep(alice, 3, tiny_config)
    assert experiment_pause(experiment=experiment)
    assert runs_to_dispatch() == []
    assert experiment_resume(experiment=experiment)
    assert len(runs_to_dispatch()) == 3


def test_full_cluster_dispatches_nothing(alice, tiny_config, settings):
    settings.MAX_ACTIVE_RUNS = 2
    ids = list(sweep(alice, 4, tiny_config).runs.order_by("id").values_list("id", flat=True))
    activate(ids[:2])
    assert runs_to_dispatch() == []


def test_waiting_reasons_name_the_limit(alice, bob, tiny_config, settings):
    from orchestrator.experiments.queue import waiting_reasons

    settings.MAX_ACTIVE_RUNS = 3
    settings.OPL_USER_MAX_ACTIVE_RUNS = 2
    mine = sweep(alice, 4, tiny_config, name="a")
    ids = list(mine.runs.order_by("id").values_list("id", flat=True))
    activate(ids[:2])
    theirs = sweep(bob, 1, tiny_config, name="b")
    paused = sweep(bob, 1, tiny_config, name="p")
    experiment_pause(experiment=paused)
    runs = list(Run.objects.select_related("experiment__project").filter(state="queued"))
    reasons = waiting_reasons(runs)
    assert reasons[ids[2]] == "2nd; waiting: user limit: 2 runs active"  # bob, with none active, goes first
    assert reasons[theirs.runs.get().pk] == "1st; starts at the next dispatch (1 free)"
    assert reasons[paused.runs.get().pk] == "sweep paused"  # not in line at all
    activate([theirs.runs.get().pk])
    runs = list(Run.objects.select_related("experiment__project").filter(pk=ids[3]))
    assert waiting_reasons(runs)[ids[3]] == "2nd; waiting: user limit: 2 runs active"
    settings.OPL_USER_MAX_ACTIVE_RUNS = 0
    assert waiting_reasons(runs)[ids[3]] == "2nd; waiting: cluster full 3/3"


def test_each_queued_run_of_a_full_cluster_has_its_own_place(alice, tiny_config, settings):
    """All four queued runs of a sweep said "next in line"."""
    from orchestrator.experiments.queue import waiting_reasons

    busy = list(sweep(alice, 4, tiny_config, name="busy").runs.values_list("id", flat=True))
    activate(busy)
    queued = list(sweep(alice, 4, tiny_config, name="waiting").runs.order_by("id"))
    reasons = waiting_reasons(queued)
    assert [reasons[r.pk] for r in queued] == [f"{n}; waiting: cluster full 4/4" for n in ("1st", "2nd", "3rd", "4th")]


def test_places_follow_the_dispatch_order(alice, bob, tiny_config, settings):
    from orchestrator.experiments.queue import ordinal, queue_positions

    settings.MAX_ACTIVE_RUNS = 100
    sweep(alice, 3, tiny_config, name="a")
    sweep(bob, 2, tiny_config, name="b")
    urgent = sweep(bob, 1, tiny_config, name="u", priority=5)
    last = Run.objects.filter(experiment__name="a").order_by("-id").first()
    run_move_to_top(run=last)
    places = queue_positions()
    assert sorted(places, key=places.get) == runs_to_dispatch()  # the same policy, no limit holding anyone
    assert places[urgent.runs.get().pk] == 1
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == [
        "1st",
        "2nd",
        "3rd",
        "4th",
        "11th",
        "12th",
        "13th",
        "21st",
        "22nd",
        "101st",
        "111th",
    ]


def test_gpu_count_comes_from_the_config_or_the_cluster_profile(alice, tiny_config, settings):
    from orchestrator.cluster.models import ClusterProfile
    from orchestrator.experiments.limits import run_gpus

    assert run_gpus({"train": {"device": "cpu"}, "model": {"name": "Qwen/Qwen3-1.7B-Base"}}) == 0
    assert run_gpus({"train": {"device": "cuda"}, "model": {"name": "tiny"}}) == 1
    assert run_gpus({"train": {"device": "auto"}, "model": {"name": "tiny"}, "rollout": {"engine": "hf"}}) == 0
    assert run_gpus({"train": {"device": "auto"}, "model": {"name": "Qwen/Qwen3-1.7B-Base"}}) == 1
    settings.CLUSTER_BACKEND = "slurm"
    ClusterProfile.objects.create(name="a100x2", is_default=True, gpus=2)
    assert set(sweep(alice, 2, tiny_config).runs.values_list("gpus", flat=True)) == {2}
