"""Migration experiments 0007: each SDK run recorded before client ids were per user gets its run's
owner, and the same id then opens a run for another user."""

import pytest

from tests.migrations import latest, migrate

BEFORE = ("experiments", "0006_external_runs")


@pytest.mark.django_db(transaction=True)
def test_existing_sdk_runs_get_their_runs_owner(alice, bob):
    old = migrate([BEFORE])
    Project, Membership, Experiment, Run, ExternalRun = (
        old.get_model("experiments", m) for m in ("Project", "Membership", "Experiment", "Run", "ExternalRun")
    )
    project = Project.objects.create(name="lab")
    Membership.objects.create(project=project, user_id=alice.pk, role="owner")
    experiment = Experiment.objects.create(name="e", project=project, owner_id=alice.pk, base_config={})
    run = Run.objects.create(experiment=experiment, owner_id=alice.pk, name="r", config={})
    ExternalRun.objects.create(run=run, client_id="client-0001")

    migrate(latest())

    from orchestrator.experiments.external_runs import external_run_open
    from orchestrator.experiments.models import ExternalRun as Migrated

    assert Migrated.objects.get(run_id=run.pk).owner_id == alice.pk
    assert external_run_open(user=alice, client_id="client-0001", name="r", project="lab").run.pk == run.pk
    bobs = external_run_open(user=bob, client_id="client-0001", name="r", project="bobs")
    assert bobs.created and bobs.run.owner_id == bob.pk
