"""The run page's checkpoints (step, size, why kept, "Fork from here") and lineage both ways, and
the new-experiment form pre-filled from a checkpoint."""

import pytest
from django.conf import settings

from orchestrator.experiments.checkpoints import run_checkpoints
from orchestrator.experiments.lineage import run_lineage
from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create, project_add_member, run_transition
from orchestrator.web.experiment_form import flat_from_spec
from trainer.ckpt import checkpoint as ckpt

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def runs_dir(settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"


def _finished(owner, config, steps_bytes: dict[int, int], metrics: dict[int, float] | None = None):
    run = experiment_create(owner=owner, name="parent", project="lab", config=config).runs.get()
    for step, size in steps_bytes.items():
        folder = settings.RUNS_DIR / f"run-{run.pk}" / "ckpt" / f"step-{step:08d}"
        folder.mkdir(parents=True)
        (folder / "state.pt").write_bytes(b"s" * size)
        ckpt.write_meta(folder, step, {"eval/avg_acc": (metrics or {}).get(step, 0.0)})
    for state in (Run.State.SUBMITTED, Run.State.RUNNING, Run.State.SUCCEEDED):
        run_transition(run=run, to=state)
    return Run.objects.get(pk=run.pk)


def test_the_listing_gives_each_checkpoints_size_and_why_it_is_kept(alice, tiny_config):
    tiny_config["checkpoint"] = {"every": 2, "keep": 1, "keep_best_metric": "eval/avg_acc"}
    parent = _finished(alice, tiny_config, {2: 100, 4: 300, 8: 50}, {2: 0.1, 4: 0.7, 8: 0.3})
    child = experiment_create(
        owner=alice,
        name="child",
        project="lab",
        config={**tiny_config, "init": {"from_run": parent.pk, "from_step": 2}},
    ).runs.get()
    listing = run_checkpoints(parent)
    rows = {r.step: r for r in listing.rows}
    assert [r.step for r in listing.rows] == [8, 4, 2]  # newest first
    sizes = {
        s: rows[s].size_bytes - len((listing.folder / "ckpt" / f"step-{s:08d}" / "meta.json").read_bytes())
        for s in rows
    }
    assert sizes == {2: 100, 4: 300, 8: 50}
    assert listing.total_bytes == sum(r.size_bytes for r in listing.rows)
    assert rows[8].reasons == ["newest 1"]
    assert rows[4].reasons == ["best eval/avg_acc (0.7, max)"] and rows[4].metric == 0.7
    assert rows[2].reasons == [f"pinned by run {child.pk}"] and rows[2].pinned_for == [child.pk]
    assert "the best 1 by eval/avg_acc (max)" in listing.policy_text


def test_a_pinned_step_not_yet_written_is_listed(alice, tiny_config):
    parent = experiment_create(owner=alice, name="p", project="lab", config=tiny_config).runs.get()
    child = experiment_create(
        owner=alice, name="c", project="lab", config={**tiny_config, "init": {"from_run": parent.pk, "from_step": 6}}
    ).runs.get()
    [row] = run_checkpoints(parent).rows
    assert (row.step, row.exists, row.reasons) == (6, False, [f"pinned by run {child.pk}, not written yet"])


def test_lineage_both_ways_shows_only_runs_the_user_can_read(alice, bob, tiny_config):
    parent = _finished(alice, tiny_config, {2: 10, 4: 10})
    mine = experiment_create(
        owner=alice, name="mine", project="lab", config={**tiny_config, "init": {"from_run": parent.pk, "from_step": 2}}
    ).runs.get()
    project_add_member(project=parent.experiment.project, user=bob)
    bobs = experiment_create(owner=bob, name="bobs", config={**tiny_config, "init": {"from_run": parent.pk}}).runs.get()
    assert bobs.experiment.project != parent.experiment.project  # bob's own project: alice cannot read it
    down = run_lineage(alice, parent)
    assert [c.pk for c in down.children] == [mine.pk] and down.parent_id is None
    assert [c.pk for c in run_lineage(bob, parent).children] == [mine.pk, bobs.pk]
    up = run_lineage(alice, mine)
    assert (up.parent.pk, up.parent_step) == (parent.pk, 2)


def test_the_run_page_lists_checkpoints_with_fork_links_and_the_lineage(alice, client, tiny_config):
    parent = _finished(alice, tiny_config, {2: 10, 4: 2 * 1024 * 1024})
    child = experiment_create(
        owner=alice,
        name="child-run",
        project="lab",
        config={**tiny_config, "init": {"from_run": parent.pk, "from_step": 4}},
    ).runs.get()
    client.force_login(alice)
    html = client.get(f"/runs/{parent.pk}/").content.decode()
    assert f'href="/experiments/new/?fork={parent.pk}&amp;step=4" data-fork-step="4">Fork from here</a>' in html
    assert f'?fork={parent.pk}&amp;step=2"' in html
    assert "2.0\xa0MB" in html and f"pinned by run {child.pk}" in html
    assert f'<a href="/runs/{child.pk}/">child-run</a> (#{child.pk}, queued) from update 4' in html
    html = client.get(f"/runs/{child.pk}/").content.decode()
    assert f'<a href="/runs/{parent.pk}/">parent</a> (#{parent.pk}),' in html and "at update 4" in html
    assert "weights only" in html


def test_fork_from_here_prefills_the_form_with_the_parents_config(alice, client, tiny_config):
    tiny_config["algorithm"]["lr"] = 3e-4
    parent = _finished(alice, tiny_config, {2: 10, 4: 10})
    client.force_login(alice)
    html = client.get(f"/experiments/new/?fork={parent.pk}&step=2").content.decode()

    def value(path):
        return html.split(f'name="{path}" value="', 1)[1].split('"', 1)[0]

    assert (value("init.from_run"), value("init.from_step")) == (str(parent.pk), "2")
    assert (
        '<option value="false" selected>false</option>' in html.split('name="init.optimizer"', 1)[1][:200]
    )  # weights only
    flat = flat_from_spec({"config": tiny_config})
    for path in ("algorithm.lr", "rollout.group_size", "train.steps", "checkpoint.every"):
        assert value(path) == flat[path]
    assert value("name") == "parent-from-2" and value("project") == "lab"


def test_forking_a_run_the_user_cannot_read_is_a_404(alice, charlie, client, tiny_config):
    parent = _finished(alice, tiny_config, {2: 10})
    client.force_login(charlie)
    assert client.get(f"/experiments/new/?fork={parent.pk}&step=2").status_code == 404
    assert client.get("/experiments/new/?fork=abc").status_code == 404
