"""Regression tests for each hostile input of the hardening review: every one is answered with a 4xx that
names the field (or a safe page), quickly, and stores nothing it should not."""

import json
import time
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from orchestrator.experiments.models import Experiment, Run, Tag
from orchestrator.experiments.runconfig import OUTSIDE
from orchestrator.experiments.services import experiment_create
from tests.unit.metrics.helpers import make_run, points, push


def post(client, url, body):
    return client.post(
        url, data=json.dumps(body) if not isinstance(body, (str, bytes)) else body, content_type="application/json"
    )


def fields(response) -> list[str]:
    return [e["field"] for e in response.json().get("errors", [])]


@pytest.fixture
def api(alice, api_client):
    return api_client(alice)


@pytest.fixture
def browser(alice):
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def run(alice, tiny_config):
    return experiment_create(owner=alice, name="exp", project="lab", config=tiny_config).runs.get()


# --- YAML: alias bombs, nesting, size ------------------------------------------------------------

ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(7)
)


@pytest.mark.parametrize("where", ["import", "paste"])
def test_yaml_alias_bomb_is_refused_at_once(browser, where):
    started = time.perf_counter()
    if where == "import":
        response = browser.post("/experiments/import", {"yaml": ALIAS_BOMB})
    else:
        response = browser.post("/experiments/preview", {"name": "x", "config_yaml": ALIAS_BOMB})
    assert time.perf_counter() - started < 2.0  # refused, not expanded
    assert response.status_code in (200, 400)
    assert len(response.content) < 200_000
    assert "anchors and aliases" in response.content.decode()


def test_deeply_nested_yaml_is_refused(browser):
    response = browser.post("/experiments/import", {"yaml": "a: " + "[" * 5000 + "]" * 5000})
    assert response.status_code == 400
    assert "nested more than" in response.content.decode()


def test_uploaded_yaml_over_the_size_limit_is_refused_unparsed(browser):
    big = SimpleUploadedFile(
        "big.yaml", b"# " + b"x" * (300 * 1024) + b"\nname: big\n", content_type="application/yaml"
    )
    response = browser.post("/experiments/import", {"file": big})
    assert response.status_code == 413
    assert "larger than 256 KiB" in response.content.decode()


def test_yaml_infinity_in_a_config_is_refused(browser):
    response = browser.post("/experiments/import", {"yaml": "algorithm:\n  lr: .inf\n"})
    assert response.status_code == 400
    assert "finite" in response.content.decode()


# --- JSON: nesting, constants, huge numbers -----------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        '{"name": "x", "config": ' + "[" * 100_000 + "]" * 100_000 + "}",  # RecursionError in json
        '{"name": "x", "config": {"a": ' + "[" * 40 + "]" * 40 + "}}",  # under the recursion limit, over ours
    ],
)
def test_deeply_nested_json_is_a_400(api, body):
    response = post(api, "/api/v1/experiments/preview", body)
    assert response.status_code == 400
    assert "nested too deeply" in response.json()["error"]


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN", "1e400"])
def test_non_finite_numbers_in_a_config_are_refused(api, literal):
    body = f'{{"name": "x", "config": {{"algorithm": {{"lr": {literal}}}}}}}'
    for url in ("/api/v1/experiments/preview", "/api/v1/experiments"):
        response = post(api, url, body)
        assert response.status_code == 400, (url, response.content)
    assert not Experiment.objects.exists()


def test_an_integer_of_thousands_of_digits_is_a_400(api):
    response = post(api, "/api/v1/experiments", '{"name": "x", "priority": 1%s}' % ("0" * 5000))
    assert response.status_code == 400


# --- integers bounded to the columns ------------------------------------------------------------


@pytest.mark.parametrize(
    "body,field",
    [
        ({"priority": 2**31}, "priority"),
        ({"priority": 2**70}, "priority"),
        ({"config": {"train": {"seed": 2**31}}}, "config.train.seed"),
        ({"config": {"train": {"seed": 2**70}}}, "config.train.seed"),
        ({"random": {"samples": 2, "params": {"train.seed": {"randint": [5, 1]}}}}, "random.params.train.seed"),
    ],
)
def test_out_of_range_and_inverted_values_name_the_field(api, tiny_config, body, field):
    spec = {"name": "x", "project": "lab", "config": tiny_config, **body}
    if "config" in body:
        spec["config"] = {**tiny_config, "train": {**tiny_config["train"], **body["config"]["train"]}}
    response = post(api, "/api/v1/experiments", spec)
    assert response.status_code == 400, response.content
    assert any(f.startswith(field) for f in fields(response)), fields(response)


def test_run_priority_beyond_32_bits_is_a_400(api, run):
    response = post(api, f"/api/v1/runs/{run.pk}/priority", {"priority": 2**40})
    assert response.status_code == 400 and fields(response) == ["priority"]


def test_form_priority_beyond_32_bits_is_an_error_not_a_500(browser, run):
    response = browser.post(f"/runs/{run.pk}/priority", {"priority": str(2**40)})
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.priority == 0


def test_randint_low_above_high_in_the_form(browser):
    response = browser.post(
        "/experiments/preview",
        {"name": "x", "random-0-field": "train.seed", "random-0-dist": "randint", "random-0-args": "5, 1"},
    )
    assert response.status_code == 200
    assert "greater than high" in response.content.decode()


@pytest.mark.parametrize(
    "body,field", [({"step": 2**53}, "step"), ({"total_steps": 2**70}, "total_steps"), ({"step": -1}, "step")]
)
def test_heartbeat_integers_beyond_the_column(alice, tiny_config, client, body, field):
    run, token = make_run(alice, tiny_config)
    response = client.post(
        f"/api/v1/runs/{run.pk}/heartbeat",
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 400 and fields(response) == [field]


def test_a_metric_step_at_the_bound_is_stored_and_shown_as_progress(alice, tiny_config, client):
    run, token = make_run(alice, tiny_config)
    assert push(client, run.pk, token, {"attempt": 1, "points": points("train/loss", [2**31 - 1])}).status_code == 202
    run.refresh_from_db()
    assert run.step == 2**31 - 1


@pytest.mark.parametrize(
    "point,field",
    [
        ({"step": 2**53}, "step"),
        ({"step": 2**62 + 1}, "step"),
        ({"step": 2**70}, "step"),
        ({"value": 10**400}, "value"),
        ({"time": 10**400}, "time"),
    ],
)
def test_metric_points_beyond_what_is_stored_and_read(alice, tiny_config, client, point, field):
    run, token = make_run(alice, tiny_config)
    response = push(client, run.pk, token, {"attempt": 1, "points": [{**points("train/loss", [1])[0], **point}]})
    assert response.status_code == 202, response.content
    assert response.json()["stored"] == 0
    assert [e["field"] for e in response.json()["refused"]] == [field]


# --- sizes and counts ----------------------------------------------------------------------------


def test_notes_are_bounded_and_stay_on_the_experiment(api, tiny_config):
    spec = {"name": "x", "project": "lab", "config": tiny_config, "seeds": 3}
    assert fields(post(api, "/api/v1/experiments", {**spec, "notes": "n" * 1_000_000})) == ["notes"]
    created = post(api, "/api/v1/experiments", {**spec, "notes": "why this sweep"}).json()
    assert Experiment.objects.get(pk=created["id"]).notes == "why this sweep"
    assert set(Run.objects.filter(experiment_id=created["id"]).values_list("notes", flat=True)) == {""}
    response = api.patch(
        f"/api/v1/runs/{created['runs'][0]}", data=json.dumps({"notes": "n" * 20_000}), content_type="application/json"
    )
    assert response.status_code == 400 and fields(response) == ["notes"]


@pytest.mark.parametrize(
    "tags", [[f"t{i}" for i in range(20_000)], [f"t{i}" for i in range(21)], ["x" * 51], ["a\r\nb"]]
)
def test_tags_are_bounded_in_count_length_and_characters(api, tiny_config, tags):
    response = post(api, "/api/v1/experiments", {"name": "x", "project": "lab", "config": tiny_config, "tags": tags})
    assert response.status_code == 400 and all(f.startswith("tags") for f in fields(response))
    assert Tag.objects.count() == 0


@pytest.mark.parametrize(
    "q",
    [
        " and ".join(["step >= 0"] * 1100),
        "id in (" + ", ".join(map(str, range(1500))) + ")",
        "step > abc",
        "id = 99999999999999999999999",
        "x" * 5000,
    ],
)
def test_run_filters_too_large_or_ill_typed_are_a_400(api, run, q):
    response = api.get("/api/v1/runs", {"q": q})
    assert response.status_code == 400 and fields(response) == ["q"]


@pytest.mark.parametrize("per_page", ["501", "0", "-1", "abc", "²"])
def test_per_page_out_of_bounds_is_an_error_not_a_clamp(api, per_page):
    response = api.get("/api/v1/runs", {"per_page": per_page})
    assert response.status_code == 400 and fields(response) == ["per_page"]


# --- ids and names in URLs and headers ----------------------------------------------------------


def test_superscript_digits_in_ids(browser, api, run):
    assert browser.get("/experiments/new/", {"clone": "²"}).status_code == 404
    assert browser.get("/compare/", {"experiment": "²"}).status_code == 404
    assert browser.get("/compare/", {"experiment": "9" * 30}).status_code == 404
    response = api.get("/api/v1/runs", {"experiment": "²"})
    assert response.status_code == 400 and fields(response) == ["experiment"]


@pytest.mark.parametrize("name", ["a/b", "../x", "a b", 'a"b', "a\r\nb", "ä"])
def test_project_names_must_be_safe_in_urls(api, tiny_config, name):
    assert fields(post(api, "/api/v1/experiments", {"name": "x", "project": name, "config": tiny_config})) == [
        "project"
    ]
    assert fields(post(api, "/api/v1/projects", {"name": name})) == ["name"]


def test_run_names_are_safe_in_the_download_header(browser, run):
    Run.objects.filter(pk=run.pk).update(name='evil"\r\nSet-Cookie: x=1')  # e.g. a row written before the fix
    response = browser.get(f"/runs/{run.pk}/config.yaml")
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="evil___Set-Cookie__x_1.yaml"'


def test_swept_string_values_make_safe_run_names():
    from orchestrator.experiments.sweeps import run_name

    assert run_name({"task.hf_dataset": 'a"b\r\nc d'}, {}, None, "x") == "hfdataseta_b__c_d"


@pytest.mark.parametrize(
    "target,expected",
    [
        ("https://evil.example/", None),
        ("//evil.example/", None),
        ("javascript:alert(1)", None),
        ("/experiments/", "/experiments/"),
    ],
)
def test_next_is_only_followed_on_this_site(browser, run, target, expected):
    Run.objects.filter(pk=run.pk).update(state=Run.State.FAILED)
    response = browser.post(f"/runs/{run.pk}/retry", {"next": target})
    assert response.status_code == 302
    assert response["Location"] == (expected or f"/runs/{run.pk}/")


# --- JSON on every API path ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "method,url,status",
    [
        ("get", "/api/v1/runs/abc", 404),
        ("get", "/api/v1/experiments/1x", 404),
        ("get", "/api/v1/nothing", 404),
        ("get", "/api/v1/runs/abc/metrics", 404),
        ("delete", "/api/v1/runs", 405),
        ("put", "/api/v1/projects", 405),
        ("get", "/api/v1/runs/99999999999999999999999", 404),
    ],
)
def test_api_errors_are_json(api, method, url, status):
    response = getattr(api, method)(url)
    assert response.status_code == status
    assert response["Content-Type"] == "application/json" and "error" in response.json()


# --- leaks --------------------------------------------------------------------------------------


def test_tags_are_scoped_to_visible_projects(api, browser, charlie, api_client, tiny_config):
    post(
        api_client(charlie),
        "/api/v1/experiments",
        {"name": "c", "project": "charlie-lab", "config": tiny_config, "tags": ["charlie-secret-plan"]},
    )
    post(api, "/api/v1/experiments", {"name": "a", "project": "lab", "config": tiny_config, "tags": ["mine"]})
    assert api.get("/api/v1/tags").json() == {"tags": ["mine"]}
    assert "charlie-secret-plan" not in browser.get("/").content.decode()


@pytest.mark.parametrize("path", ["/etc/passwd", "/nonexistent/train.jsonl", "../../../etc/passwd", "~/.ssh/id_rsa"])
def test_preview_does_not_probe_server_paths(api, path):
    body = {"name": "x", "config": {"task": {"name": "math", "train_file": path}}}
    response = post(api, "/api/v1/experiments/preview", body)
    assert response.status_code == 400
    assert response.json()["errors"] == [{"field": "config.task.train_file", "message": OUTSIDE}]


def test_model_paths_outside_the_roots_are_refused(api):
    response = post(api, "/api/v1/experiments/preview", {"name": "x", "config": {"model": {"name": "/root/model"}}})
    assert fields(response) == ["config.model.name"]


# --- run tokens ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "state,ended_ago,status",
    [
        (Run.State.SUCCEEDED, timedelta(minutes=4), 202),  # the trainer's last flush
        (Run.State.SUCCEEDED, timedelta(minutes=6), 403),
        (Run.State.CANCELLED, timedelta(minutes=4), 202),  # a cluster run: its job's last flush too
        (Run.State.CANCELLED, timedelta(minutes=6), 403),
        (Run.State.LOST, timedelta(days=30), 202),
    ],
)  # lost may come back: its job can still be running
def test_run_tokens_expire_minutes_after_the_run_ended(alice, tiny_config, client, state, ended_ago, status):
    run, token = make_run(alice, tiny_config)
    Run.objects.filter(pk=run.pk).update(state=state, finished_at=timezone.now() - ended_ago)
    assert push(client, run.pk, token, {"attempt": 1, "points": points("train/loss", [1])}).status_code == status
    heartbeat = client.post(
        f"/api/v1/runs/{run.pk}/heartbeat",
        data="{}",
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert heartbeat.status_code == (200 if status == 202 else 403)


# --- NUL characters (found by schemathesis: PostgreSQL text cannot hold them) -------------------


@pytest.mark.parametrize(
    "url,body",
    [
        ("/api/v1/projects", '{"name": "lab", "description": "a\\u0000b"}'),
        ("/api/v1/experiments", '{"name": "x", "notes": "\\u0000"}'),
        ("/api/v1/experiments/preview", '{"name": "x", "config": {"model": {"name": "\\u0000"}}}'),
    ],
)
def test_nul_characters_in_json_bodies_are_a_400(api, url, body):
    response = post(api, url, body)
    assert response.status_code == 400 and "NUL" in response.json()["error"]


def test_nul_characters_in_query_parameters_are_a_400(api, browser, run):
    response = api.get("/api/v1/runs", {"project": "a\x00"})
    assert response.status_code == 400 and fields(response) == ["project"]
    assert api.get("/api/v1/metrics/compare", {"runs": str(run.pk), "key": "a\x00"}).status_code == 400
    assert browser.get("/", {"q": "name ~ a\x00"}).status_code == 200  # the page shows the error


# --- the OpenAPI document -----------------------------------------------------------------------


def test_openapi_documents_the_metrics_endpoints_and_the_real_runconfig_answer(client):
    doc = client.get("/api/v1/openapi.json").json()
    for path, method in (
        ("/api/v1/runs/{run_id}/metrics", "get"),
        ("/api/v1/runs/{run_id}/metrics", "post"),
        ("/api/v1/runs/{run_id}/metrics/keys", "get"),
        ("/api/v1/runs/{run_id}/metrics/stream", "get"),
        ("/api/v1/runs/{run_id}/heartbeat", "post"),
        ("/api/v1/metrics/compare", "get"),
    ):
        assert method in doc["paths"][path], (path, method)
    answer = doc["paths"]["/api/v1/schema/runconfig"]["get"]["responses"]["200"]["content"]["application/json"][
        "schema"
    ]
    assert answer == {"$ref": "#/components/schemas/JsonSchema"}  # a JSON Schema document, not a RunConfig
    assert doc["paths"]["/api/v1/runs/{run_id}/metrics"]["post"]["security"] == [{"runToken": []}]
