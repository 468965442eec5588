"""A run's config download is the whole config it ran with, and importing it keeps its project
(the export was a diff from the defaults and came back in project "default")."""

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile

from orchestrator.experiments.services import experiment_create
from trainer.config import parse_config

pytestmark = pytest.mark.django_db


def test_exported_run_config_is_whole_and_imports_into_its_project(client, alice, tiny_config):
    run = experiment_create(owner=alice, name="orig", project="lab", config=tiny_config).runs.get()
    client.force_login(alice)
    text = client.get(f"/runs/{run.pk}/config.yaml").content.decode()
    assert text.startswith(f"# OffPolicy Lab run {run.pk} ") and "# project: lab\n" in text
    data = yaml.safe_load(text)
    assert data["algorithm"]["tau_m2"] == 0.04 and data["algorithm"]["lr"] == 1e-3  # defaults too, not a diff
    assert parse_config(data).model_dump(mode="json", exclude={"reporting"}) == run.config
    page = client.post("/experiments/import", {"file": SimpleUploadedFile("orig.yaml", text.encode())}).content.decode()
    assert 'name="project" value="lab"' in page
