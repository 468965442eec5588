"""The generated new-experiment form: fields from the schema, live validation, preview, create,
clone, presets, YAML import and export."""

import pytest
import yaml

from orchestrator.experiments.models import Experiment, Run
from orchestrator.experiments.services import experiment_create
from orchestrator.web.experiment_form import flat_from_spec

pytestmark = pytest.mark.django_db


@pytest.fixture
def logged_in(client, alice):
    client.force_login(alice)
    return client


def form_data(**changes):
    data = flat_from_spec(
        {"name": "exp", "project": "lab", "config": {"model": {"name": "tiny"}, "train": {"device": "cpu", "steps": 4}}}
    )
    data.update(changes)
    return data


def test_form_is_generated_from_the_schema(logged_in):
    html = logged_in.get("/experiments/new/").content.decode()
    assert 'id="section-algorithm"' in html and 'id="section-staleness"' in html
    assert 'name="algorithm.lr"' in html
    assert "Peak learning rate (AdamW)." in html  # help text from the field description
    assert "Default: 0.001" in html
    assert '<option value="no_clip">' in html  # an enum is a dropdown
    assert 'name="reporting.heartbeat_s"' not in html


def test_live_validation_names_each_bad_field(logged_in):
    response = logged_in.post("/experiments/validate", form_data(**{"algorithm.lr": "fast", "staleness.k": "-1"}))
    html = response.content.decode()
    assert 'id="err-algorithm__lr" hx-swap-oob="true"><p class="error">not a number: &#x27;fast&#x27;' in html
    assert 'id="err-name" hx-swap-oob="true"></div>' in html  # valid fields are cleared


def test_live_validation_runs_the_trainer_checks(logged_in):
    response = logged_in.post("/experiments/validate", form_data(**{"staleness.k": "-1", "algorithm.objective": "ppo"}))
    html = response.content.decode()
    assert (
        'id="err-staleness__k" hx-swap-oob="true"><p class="error">Input should be greater than or equal to 0' in html
    )
    assert "unknown objective &#x27;ppo&#x27;" in html
    assert "2 problems" in html


def test_valid_form_reports_the_run_count(logged_in):
    data = form_data(
        **{
            "seeds": "3",
            "sweep-0-field": "staleness.k",
            "sweep-0-mode": "list",
            "sweep-0-values": "0, 16, 64, 256",
            "sweep-1-field": "algorithm.objective",
            "sweep-1-mode": "list",
            "sweep-1-values": "grpo, no_clip, m2po",
        }
    )
    assert ">36 runs<" in logged_in.post("/experiments/validate", data).content.decode()


def test_preview_lists_the_expanded_runs(logged_in):
    data = form_data(
        **{"seeds": "2", "sweep-0-field": "algorithm.lr", "sweep-0-mode": "log", "sweep-0-values": "1e-6, 1e-4, 3"}
    )
    html = logged_in.post("/experiments/preview", data).content.decode()
    assert '<span id="preview-count">6</span>' in html
    assert "lr1e-5-seed2" in html
    assert Run.objects.count() == 0


def test_the_36_run_sweep_is_one_form_submission(logged_in):
    data = form_data(
        **{
            "seeds": "3",
            "sweep-0-field": "staleness.k",
            "sweep-0-values": "0, 16, 64, 256",
            "sweep-1-field": "algorithm.objective",
            "sweep-1-values": "grpo, no_clip, m2po",
        }
    )
    response = logged_in.post("/experiments/new/", data)
    experiment = Experiment.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/experiments/{experiment.pk}/"
    assert experiment.runs.filter(state="queued").count() == 36
    assert experiment.sweep == {"staleness.k": [0, 16, 64, 256], "algorithm.objective": ["grpo", "no_clip", "m2po"]}


def test_refused_submission_comes_back_as_typed(logged_in):
    response = logged_in.post("/experiments/new/", form_data(**{"algorithm.lr": "-1", "name": "bad name"}))
    html = response.content.decode()
    assert response.status_code == 200 and Run.objects.count() == 0
    assert '<p class="error" data-field="algorithm.lr">Input should be greater than or equal to 0</p>' in html
    assert "letters, digits" in html
    assert 'name="algorithm.lr" value="-1"' in html


def test_sweep_row_errors_name_the_row_field(logged_in):
    data = form_data(**{"sweep-0-field": "staleness.k", "sweep-0-mode": "linear", "sweep-0-values": "0, 64"})
    html = logged_in.post("/experiments/validate", data).content.decode()
    assert (
        'id="err-sweep-0" hx-swap-oob="true"><p class="error">'
        "staleness.k: linear range (start, stop, count): expected 3" in html
    )


def test_clone_prefills_the_form_with_the_run_config(logged_in, alice, tiny_config):
    tiny_config["algorithm"]["lr"] = 0.0005
    run = experiment_create(owner=alice, name="orig", project="lab", config=tiny_config).runs.get()
    html = logged_in.get(f"/experiments/new/?clone={run.pk}").content.decode()
    assert 'value="orig-clone"' in html and 'name="algorithm.lr" value="0.0005"' in html


def test_clone_of_an_invisible_run_is_404(client, charlie, alice, tiny_config):
    run = experiment_create(owner=alice, name="orig", project="lab", config=tiny_config).runs.get()
    client.force_login(charlie)
    assert client.get(f"/experiments/new/?clone={run.pk}").status_code == 404


def test_presets_fill_the_form(logged_in):
    html = logged_in.get("/experiments/new/").content.decode()
    assert "M2PO, s=256, Qwen3-1.7B-Base, DeepScaleR" in html and "GRPO on-policy" in html and "CPU demo" in html
    html = logged_in.get("/experiments/new/?preset=m2po-s256-qwen3-1.7b-deepscaler").content.decode()
    assert 'name="model.name" value="Qwen/Qwen3-1.7B-Base"' in html
    assert 'name="staleness.k" value="64"' in html


def test_the_study_preset_fills_the_warm_up_box_and_queues_warm_up_and_sweep(logged_in):
    from orchestrator.experiments.models import Run
    from orchestrator.experiments.presets import get_preset

    html = logged_in.get("/experiments/new/?preset=cpu-staleness-study").content.decode()
    assert 'id="f-warmup_run"' in html and "objective: grpo" in html
    response = logged_in.post("/experiments/new/", flat_from_spec(get_preset("cpu-staleness-study").spec()))
    assert response.status_code == 302, response.content.decode()[:3000]
    warmups = Run.objects.filter(experiment__name="cpu-staleness-study-warmup")
    assert warmups.count() == 3  # three checkpoints, every cell's seeds nested in each
    for warm in warmups:
        assert warm.config["algorithm"]["objective"] == "grpo" and warm.config["train"]["steps"] == 150
        assert warm.config["task"]["demonstrations"] == 1
        forks = Run.objects.filter(experiment__name="cpu-staleness-study", parent=warm)
        assert forks.count() == 12 and {r.config["algorithm"]["lr"] for r in forks} == {5.0e-5}


def test_export_gives_the_file_the_trainer_takes(logged_in):
    from trainer.config import parse_config

    response = logged_in.post("/experiments/export", form_data(**{"algorithm.lr": "2e-4"}))
    assert response["Content-Disposition"] == 'attachment; filename="exp.yaml"'
    data = yaml.safe_load(response.content)
    assert data["algorithm"] == {"objective": "m2po", "lr": 0.0002}  # the objective named at its default
    assert parse_config(data).algorithm.lr == 0.0002


def test_export_with_a_sweep_is_an_experiment_file(logged_in):
    response = logged_in.post(
        "/experiments/export", form_data(**{"seeds": "3", "sweep-0-field": "staleness.k", "sweep-0-values": "0, 4"})
    )
    data = yaml.safe_load(response.content)
    assert data["sweep"] == {"staleness.k": [0, 4]} and data["seeds"] == 3
    # what differs from the defaults, and the values that decide what runs
    assert data["config"]["train"] == {"steps": 4, "seed": 1, "device": "cpu"}


def test_import_refuses_an_unknown_key_naming_the_nearest(logged_in):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("x.yaml", b"algorithm: {objectve: m2po}\n")
    html = logged_in.post("/experiments/import", {"file": upload}).content.decode()
    assert "unknown key &#x27;objectve&#x27;; did you mean &#x27;objective&#x27;?" in html


def test_import_fills_the_form(logged_in):
    from django.core.files.uploadedfile import SimpleUploadedFile

    text = b"name: imported\nseeds: 2\nsweep: {staleness.k: [0, 8]}\nconfig: {algorithm: {lr: 0.002}}\n"
    html = logged_in.post("/experiments/import", {"file": SimpleUploadedFile("x.yaml", text)}).content.decode()
    assert 'value="imported"' in html and 'name="algorithm.lr" value="0.002"' in html
    assert 'name="sweep-0-values" value="0, 8"' in html


def test_too_long_tag_is_refused_next_to_the_tags(logged_in):
    html = logged_in.post("/experiments/new/", form_data(tags="ok, " + "t" * 60)).content.decode()
    assert 'id="err-tags"><p class="error">at most 50 characters per tag' in html
    assert Run.objects.count() == 0


def test_pasted_yaml_applies_over_the_fields(logged_in):
    logged_in.post("/experiments/new/", form_data(config_yaml="algorithm: {lr: 0.0007}\n"))
    assert Run.objects.get().config["algorithm"]["lr"] == 0.0007


def test_pasted_sweep_is_not_silently_dropped(logged_in):
    html = logged_in.post("/experiments/new/", form_data(config_yaml="sweep: {staleness.k: [0, 4]}\n")).content.decode()
    assert "load a file with a sweep with Import YAML" in html and Run.objects.count() == 0
