"""Experiment YAML files: import, the submit_experiment command, presets."""

import pytest
from django.core.management import CommandError, call_command

from orchestrator.experiments.experiment_file import dump_experiment_yaml, parse_experiment_yaml
from orchestrator.experiments.models import Experiment
from orchestrator.experiments.presets import list_presets
from orchestrator.experiments.runconfig import ConfigError
from orchestrator.experiments.services import experiment_plan

pytestmark = pytest.mark.django_db


def test_plain_run_config_is_accepted():
    assert parse_experiment_yaml("algorithm: {objective: grpo}\n", default_name="f") == {
        "name": "f",
        "config": {"algorithm": {"objective": "grpo"}},
        "sweep": {},
        "random": {},
    }


def test_unknown_top_level_key_names_the_nearest():
    with pytest.raises(ConfigError) as exc:
        parse_experiment_yaml("name: x\nsweeps: {staleness.k: [0]}\n")
    assert exc.value.errors == [{"field": "sweeps", "message": "unknown key 'sweeps'; did you mean 'sweep'?"}]


def test_config_section_outside_config_is_explained():
    with pytest.raises(ConfigError, match="put it under 'config:'"):
        parse_experiment_yaml("name: x\nalgorithm: {lr: 1}\n")


def test_unknown_config_key_is_refused_by_the_trainer_schema():
    spec = parse_experiment_yaml("staleness: {kk: 4}\n")
    with pytest.raises(ConfigError) as exc:
        experiment_plan(name="x", config=spec["config"])
    assert exc.value.errors == [{"field": "staleness.kk", "message": "unknown key 'kk'; did you mean 'k'?"}]


def test_dump_round_trips():
    spec = {
        "name": "x",
        "project": "p",
        "seeds": 3,
        "sweep": {"staleness.k": [0, 4]},
        "config": {"algorithm": {"lr": 0.01}},
    }
    assert parse_experiment_yaml(dump_experiment_yaml(spec)) == {**spec, "random": {}}


@pytest.mark.parametrize("preset", list_presets(), ids=lambda p: p.slug)
def test_every_preset_is_valid(preset):
    spec = preset.spec()
    planned = experiment_plan(
        name=spec["name"],
        config=spec.get("config") or {},
        sweep=spec.get("sweep"),
        random=spec.get("random"),
        seeds=spec.get("seeds", 1),
    )
    assert planned


def test_required_presets_exist():
    titles = [p.title for p in list_presets()]
    assert "M2PO, s=256, Qwen3-1.7B-Base, DeepScaleR" in titles
    assert any(t.startswith("GRPO on-policy") for t in titles)
    assert any(t.startswith("CPU demo") for t in titles)


def test_paper_preset_has_s256(settings):
    from orchestrator.experiments.presets import get_preset

    spec = get_preset("m2po-s256-qwen3-1.7b-deepscaler").spec()
    assert spec["config"]["staleness"]["k"] * spec["config"]["algorithm"]["updates_per_step"] == 256


def test_submit_experiment_queues_the_36_run_file(alice, capsys):
    call_command("submit_experiment", "examples/presets/paper-staleness-x-objective-36.yaml", "--user", "alice")
    experiment = Experiment.objects.get()
    assert experiment.runs.filter(state="queued").count() == 36
    assert experiment.runs.filter(name="m2po-s256-seed2").exists()
    assert "36 run(s) queued" in capsys.readouterr().out


def test_submit_experiment_refuses_bad_files(alice, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nconfig: {algorithm: {objectiv: m2po}}\n")
    with pytest.raises(CommandError, match="algorithm.objectiv: unknown key 'objectiv'; did you mean 'objective'?"):
        call_command("submit_experiment", str(bad), "--user", "alice")
    with pytest.raises(CommandError, match="no user named 'zed'"):
        call_command("submit_experiment", str(bad), "--user", "zed")
    assert Experiment.objects.count() == 0


def test_submit_experiment_refuses_another_teams_project(alice, bob, tmp_path):
    call_command(
        "submit_experiment",
        "examples/presets/cpu-demo-staleness-sweep.yaml",
        "--user",
        "alice",
        "--project",
        "alice-lab",
    )
    with pytest.raises(CommandError, match="project: project 'alice-lab' does not exist or you are not a member"):
        call_command(
            "submit_experiment",
            "examples/presets/cpu-demo-staleness-sweep.yaml",
            "--user",
            "bob",
            "--project",
            "alice-lab",
        )
    assert Experiment.objects.count() == 2  # alice's sweep and its warm-up; nothing of bob's


def test_submit_experiment_dry_run(alice, capsys):
    call_command("submit_experiment", "examples/presets/cpu-demo-staleness-sweep.yaml", "--user", "alice", "--dry-run")
    out = capsys.readouterr().out
    assert "demo-stale-sweep-warmup (every run below starts from it)" in out
    assert "6 run(s); nothing queued" in out
    assert Experiment.objects.count() == 0


def test_sync_runs_command_runs_with_no_active_runs(capsys):
    call_command("sync_runs")
    assert "0 run(s) changed" in capsys.readouterr().out


def test_submit_experiment_checks_the_experiment_keys(alice, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: 'no spaces please'\nseeds: 0\n")
    with pytest.raises(CommandError) as exc:
        call_command("submit_experiment", str(bad), "--user", "alice")
    assert "name: String should match pattern" in str(
        exc.value
    ) and "seeds: Input should be greater than or equal to 1" in str(exc.value)


def test_import_of_a_malformed_range_shows_the_error(client, alice):
    from django.core.files.uploadedfile import SimpleUploadedFile

    client.force_login(alice)
    text = b"name: x\nsweep: {algorithm.lr: {log: 5}}\nrandom: {samples: 2, params: {algorithm.tau_m2: 7}}\n"
    response = client.post("/experiments/import", {"file": SimpleUploadedFile("x.yaml", text)})
    html = response.content.decode()
    assert response.status_code == 400
    assert (
        'id="err-sweep-0"><p class="error">give a list of values, '
        "{linear: [start, stop, count]} or {log: [start, stop, count]}" in html
    )
    assert "random.params.algorithm.tau_m2: Input should be a valid dictionary" in html
