"""Every URL pattern, pages and API, against every kind of caller, with the status each must get.

Callers: the owner of the project, run and experiment, a project member who owns none of them,
another user, staff who is no member, an anonymous visitor, and the run's
own ingestion token (no session). A URL pattern missing from MATRIX fails
test_every_url_pattern_is_in_the_matrix, so a new page or endpoint cannot ship unexamined.
BEYOND, at the end, holds what roles alone do not: members' runs, removed members, logging tokens
and notification secrets.
"""

import json
from dataclasses import dataclass

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import get_resolver
from django.urls.resolvers import URLResolver

from orchestrator.accounts.services import api_token_create
from orchestrator.experiments.external_runs import logging_token_create
from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.services import metrics_ingest
from tests.unit.metrics.helpers import points, start_attempt

CALLERS = ("owner", "member", "other", "staff", "anonymous", "run_token")


@dataclass(frozen=True)
class Case:
    method: str
    path: str  # formatted with {run}, {exp}, {token_id}, {logging_token_id}, {view}
    statuses: tuple[int, int, int, int, int, int]  # in the order of CALLERS
    body: object = None
    json_body: bool = False


PAGE_READ = (200, 200, 200, 200, 302, 302)  # any logged-in user; others go to the login page
RUN_READ_PAGE = (200, 200, 404, 200, 302, 302)  # project members and staff; others: as if it did not exist
RUN_WRITE_PAGE = (302, 403, 404, 302, 302, 302)  # owner and staff act (then redirect)
API_READ = (200, 200, 200, 200, 401, 401)
API_RUN_READ = (200, 200, 404, 200, 401, 401)
NO_INVITATION_PAGE = (404, 404, 404, 404, 302, 302)
NEW_EXPERIMENT = {"name": "m", "project": "lab", "config": {"model": {"name": "tiny"}, "train": {"device": "cpu"}}}
FORM = {"name": "m", "model.name": "tiny", "train.device": "cpu"}
SDK_RUN = {"client_id": "matrix-run-1", "name": "m", "project": "lab", "config": {"staleness": 4}}

MATRIX: dict[str, list[Case]] = {
    "login": [Case("get", "/login/", (200, 200, 200, 200, 200, 200))],
    # the icon, to anyone (a browser asks before logging in); /runs/ is the runs list's other address
    "favicon.ico": [Case("get", "/favicon.ico", (301, 301, 301, 301, 301, 301))],
    "runs/": [Case("get", "/runs/", (302, 302, 302, 302, 302, 302))],
    "logout": [Case("post", "/logout/", (302, 302, 302, 302, 302, 302))],
    "admin": [Case("get", "/admin/", (302, 302, 302, 200, 302, 302))],
    "accounts-tokens": [Case("get", "/account/tokens/", PAGE_READ)],
    # everyone is redirected back; only the owner's request deletes (checked in tests/unit)
    "accounts-token-delete": [Case("post", "/account/tokens/{token_id}/delete", (302, 302, 302, 302, 302, 302))],
    "exp-run-list": [Case("get", "/", PAGE_READ)],
    "exp-run-detail": [Case("get", "/runs/{run}/", RUN_READ_PAGE)],
    "exp-run-config": [Case("get", "/runs/{run}/config.yaml", RUN_READ_PAGE)],
    "exp-run-cancel": [Case("post", "/runs/{run}/cancel", RUN_WRITE_PAGE)],
    "exp-run-retry": [Case("post", "/runs/{run}/retry", RUN_WRITE_PAGE)],
    "exp-run-top": [Case("post", "/runs/{run}/top", RUN_WRITE_PAGE)],
    "exp-run-priority": [Case("post", "/runs/{run}/priority", RUN_WRITE_PAGE, {"priority": "3"})],
    "exp-run-annotate": [Case("post", "/runs/{run}/annotate", RUN_WRITE_PAGE, {"tags": "a", "notes": "n"})],
    "exp-experiment-list": [Case("get", "/experiments/", PAGE_READ)],
    "exp-experiment-new": [
        Case("get", "/experiments/new/", PAGE_READ),
        # only owners and members add experiments to a project (viewers: 403)
        Case("post", "/experiments/new/", (302, 302, 404, 302, 302, 302), {**FORM, "project": "lab"}),
    ],
    "exp-experiment-validate": [Case("post", "/experiments/validate", PAGE_READ, FORM)],
    "exp-experiment-preview": [Case("post", "/experiments/preview", PAGE_READ, FORM)],
    "exp-experiment-export": [Case("post", "/experiments/export", PAGE_READ, FORM)],
    "exp-experiment-import": [Case("post", "/experiments/import", PAGE_READ, {"yaml": "model: {name: tiny}"})],
    "exp-experiment-detail": [Case("get", "/experiments/{exp}/", RUN_READ_PAGE)],
    "study-statistics": [Case("get", "/experiments/{exp}/statistics", RUN_READ_PAGE)],
    "study-statistics-export": [Case("get", "/experiments/{exp}/statistics.csv", RUN_READ_PAGE)],
    "exp-experiment-pause": [Case("post", "/experiments/{exp}/pause", RUN_WRITE_PAGE)],
    "exp-experiment-resume": [Case("post", "/experiments/{exp}/resume", RUN_WRITE_PAGE)],
    "exp-experiment-cancel": [Case("post", "/experiments/{exp}/cancel", RUN_WRITE_PAGE)],
    "exp-experiment-priority": [Case("post", "/experiments/{exp}/priority", RUN_WRITE_PAGE, {"priority": "2"})],
    "exp-project-list": [Case("get", "/projects/", PAGE_READ)],
    "exp-project-new": [Case("post", "/projects/new", (302, 302, 302, 302, 302, 302), {"name": "fresh"})],
    "exp-project-member-add": [Case("post", "/projects/lab/members", RUN_WRITE_PAGE, {"username": "other"})],
    "exp-project-member-remove": [Case("post", "/projects/lab/members/remove", RUN_WRITE_PAGE, {"username": "member"})],
    # answered by the invited user only: nobody here holds an invitation (see test_projects_a_user_chose)
    "exp-project-invitation-accept": [Case("post", "/projects/lab/invitation/accept", NO_INVITATION_PAGE)],
    "exp-project-invitation-decline": [Case("post", "/projects/lab/invitation/decline", NO_INVITATION_PAGE)],
    "api-openapi": [Case("get", "/api/v1/openapi.json", (200, 200, 200, 200, 200, 200))],
    "api-runconfig-schema": [Case("get", "/api/v1/schema/runconfig", API_READ)],
    "api-experiments": [
        Case("get", "/api/v1/experiments", API_READ),
        Case("post", "/api/v1/experiments", (201, 201, 404, 201, 401, 401), NEW_EXPERIMENT, True),
    ],
    "api-experiments-preview": [Case("post", "/api/v1/experiments/preview", API_READ, NEW_EXPERIMENT, True)],
    "api-experiment-detail": [Case("get", "/api/v1/experiments/{exp}", API_RUN_READ)],
    "api-experiment-pause": [Case("post", "/api/v1/experiments/{exp}/pause", (200, 403, 404, 200, 401, 401))],
    "api-experiment-resume": [Case("post", "/api/v1/experiments/{exp}/resume", (409, 403, 404, 409, 401, 401))],
    "api-experiment-cancel": [Case("post", "/api/v1/experiments/{exp}/cancel", (200, 403, 404, 200, 401, 401))],
    "api-experiment-priority": [
        Case("post", "/api/v1/experiments/{exp}/priority", (200, 403, 404, 200, 401, 401), {"priority": 2}, True)
    ],
    "api-runs": [Case("get", "/api/v1/runs", API_READ)],
    "api-run-detail": [
        Case("get", "/api/v1/runs/{run}", API_RUN_READ),
        Case("patch", "/api/v1/runs/{run}", (200, 403, 404, 200, 401, 401), {"notes": "n"}, True),
    ],
    "api-run-cancel": [Case("post", "/api/v1/runs/{run}/cancel", (200, 403, 404, 200, 401, 401))],
    "api-run-retry": [Case("post", "/api/v1/runs/{run}/retry", (409, 403, 404, 409, 401, 401))],  # it is running
    "api-run-move-to-top": [Case("post", "/api/v1/runs/{run}/move-to-top", (409, 403, 404, 409, 401, 401))],
    "api-run-priority": [
        Case("post", "/api/v1/runs/{run}/priority", (409, 403, 404, 409, 401, 401), {"priority": 1}, True)
    ],
    "api-run-alerts": [
        Case("get", "/api/v1/runs/{run}/alerts", API_RUN_READ),
        Case(
            "post",
            "/api/v1/runs/{run}/alerts",
            (200, 403, 404, 200, 401, 401),
            {"kind": "entropy_floor", "threshold": 0.1},
            True,
        ),
    ],
    "api-projects": [
        Case("get", "/api/v1/projects", API_READ),
        Case("post", "/api/v1/projects", (201, 201, 201, 201, 401, 401), {"name": "fresh"}, True),
    ],
    "api-project-detail": [
        Case("get", "/api/v1/projects/lab", API_RUN_READ),
        Case("patch", "/api/v1/projects/lab", (200, 403, 404, 200, 401, 401), {"add_members": ["other"]}, True),
    ],
    "api-project-invitation": [
        Case("get", "/api/v1/projects/lab/invitation", (404, 404, 404, 404, 401, 401)),
        Case("post", "/api/v1/projects/lab/invitation", (404, 404, 404, 404, 401, 401)),
        Case("delete", "/api/v1/projects/lab/invitation", (404, 404, 404, 404, 401, 401)),
    ],
    "api-project-alerts": [
        Case("get", "/api/v1/projects/lab/alerts", API_RUN_READ),
        Case(
            "post",
            "/api/v1/projects/lab/alerts",
            (200, 403, 404, 200, 401, 401),
            {"rule": {"kind": "entropy_floor", "threshold": 0.1}},
            True,
        ),
    ],
    # alert rules in the browser: saved by who may change the run / owners of the project; tried by readers
    "alerts-run-rule-save": [
        Case(
            "post",
            "/runs/{run}/alerts/rules",
            (200, 403, 404, 200, 302, 302),
            {"kind": "entropy_floor", "threshold": "0.1"},
        )
    ],
    "alerts-run-rule-test": [
        Case("post", "/runs/{run}/alerts/rules/test", (200, 200, 404, 200, 302, 302), {"kind": "nonfinite"})
    ],
    "alerts-project": [Case("get", "/projects/lab/alerts/", (200, 200, 404, 200, 302, 302))],
    "alerts-project-rule-save": [
        Case(
            "post",
            "/projects/lab/alerts/rules",
            (200, 403, 404, 200, 302, 302),
            {"kind": "entropy_floor", "threshold": "0.1"},
        )
    ],
    "alerts-project-rule-test": [
        Case("post", "/projects/lab/alerts/rules/test", (200, 200, 404, 200, 302, 302), {"kind": "nonfinite"})
    ],
    # the `opl` logging SDK: a user or a logging token opens runs; finish takes the run's
    # own token and is refused (409) for a run the lab's cluster runs
    "api-sdk-runs": [
        Case("post", "/api/v1/sdk/runs", (201, 201, 404, 201, 401, 401), SDK_RUN, True),
    ],
    "api-sdk-run-finish": [
        Case("post", "/api/v1/sdk/runs/{run}/finish", (401, 401, 401, 401, 401, 409), {"exit_code": 0}, True)
    ],
    "api-sdk-tokens": [
        Case("get", "/api/v1/sdk/tokens", API_READ),  # each caller's own
        Case("post", "/api/v1/sdk/tokens", (201, 201, 201, 201, 401, 401), {"name": "m"}, True),
    ],
    # only its owner revokes a logging token; to anyone else it does not exist (staff: the admin)
    "api-sdk-token-detail": [
        Case("delete", "/api/v1/sdk/tokens/{logging_token_id}", (200, 404, 404, 404, 401, 401)),
    ],
    # the tokens page's revoke button: everyone is redirected back; only the owner's request deletes
    "sdk-logging-token-revoke": [
        Case("post", "/account/logging-tokens/{logging_token_id}/revoke", (302, 302, 302, 302, 302, 302))
    ],
    "metrics-glance-api": [Case("get", "/api/v1/metrics/glance?experiment={exp}", API_RUN_READ)],
    "api-tags": [Case("get", "/api/v1/tags", API_READ)],
    # ingestion takes the run's token only; reading a series takes a user
    "metrics-ingest": [
        Case(
            "post",
            "/api/v1/runs/{run}/metrics",
            (401, 401, 401, 401, 401, 202),
            {"attempt": 1, "points": points("train/loss", [1, 2])},
            True,
        ),
        Case("get", "/api/v1/runs/{run}/metrics?key=train/loss", API_RUN_READ),
    ],
    "metrics-keys": [Case("get", "/api/v1/runs/{run}/metrics/keys", API_RUN_READ)],
    # what else a run logs (config, summaries, alerts, histograms, tables): written with the run's
    # token only, read like its metrics
    "metrics-updates": [
        Case(
            "post",
            "/api/v1/runs/{run}/updates",
            (401, 401, 401, 401, 401, 200),
            {"kind": "summary", "summary": {"eval/best": 0.5}},
            True,
        )
    ],
    "metrics-histograms": [Case("get", "/api/v1/runs/{run}/histograms", API_RUN_READ)],
    "metrics-tables": [Case("get", "/api/v1/runs/{run}/tables", API_RUN_READ)],
    "metrics-stream": [Case("get", "/api/v1/runs/{run}/metrics/stream", API_RUN_READ)],
    "metrics-heartbeat": [
        Case("post", "/api/v1/runs/{run}/heartbeat", (401, 401, 401, 401, 401, 200), {"step": 1}, True)
    ],
    "metrics-compare-api": [
        Case("get", "/api/v1/metrics/compare?runs={run}&key=train/loss", API_RUN_READ),
        Case("get", "/api/v1/metrics/compare?runs={run}&key=train/loss,train/reward", API_RUN_READ),  # several keys
    ],
    "metrics-compare": [Case("get", "/compare/?runs={run}", RUN_READ_PAGE)],
    # rollout samples: ingestion like metrics (the run's token only), reads and fragments like the run page
    "samples-api": [
        Case("post", "/api/v1/runs/{run}/samples", (401, 401, 401, 401, 401, 200), {"attempt": 1, "samples": []}, True),
        Case("get", "/api/v1/runs/{run}/samples", API_RUN_READ),
    ],
    "samples-run": [Case("get", "/runs/{run}/samples/", RUN_READ_PAGE)],
    "samples-newer": [Case("get", "/runs/{run}/samples/newer/", RUN_READ_PAGE)],
    "samples-compare": [Case("get", "/compare/samples/?runs={run}", RUN_READ_PAGE)],
    # the correction contrast cards: fragments read like the pages they sit on
    "samples-run-corrections": [Case("get", "/runs/{run}/samples/corrections/", RUN_READ_PAGE)],
    "samples-compare-corrections": [Case("get", "/compare/samples/corrections/?runs={run}", RUN_READ_PAGE)],
    "cluster-run-job": [Case("get", "/runs/{run}/job", RUN_READ_PAGE)],
    "cluster-health": [Case("get", "/cluster/health", PAGE_READ)],
    "cluster-queue": [Case("get", "/cluster/queue", PAGE_READ)],  # lists only the runs the caller may see
    # saved views: read by the project's members, written by its owners and members
    "api-project-views": [
        Case("get", "/api/v1/projects/lab/views", API_RUN_READ),
        Case("post", "/api/v1/projects/lab/views", (201, 201, 404, 201, 401, 401), {"name": "fresh"}, True),
    ],
    "api-view-detail": [
        Case("get", "/api/v1/views/{view}", API_RUN_READ),
        # changed or deleted by its author (the owner here) or the project's owners, not other members
        Case("patch", "/api/v1/views/{view}", (200, 403, 404, 200, 401, 401), {"name": "renamed"}, True),
        Case("delete", "/api/v1/views/{view}", (200, 403, 404, 200, 401, 401)),
    ],
    "workspace-view-open": [Case("get", "/views/{view}/", (302, 302, 404, 302, 302, 302))],
    # launchers: staff define them in the admin; any user may queue a run into a project they write to
    "launcher-list": [Case("get", "/launchers/", PAGE_READ)],
    "launcher-run-new": [
        Case("get", "/launchers/matrix/run", PAGE_READ),
        Case("post", "/launchers/matrix/run", (302, 302, 404, 302, 302, 302), {"project": "lab"}),
    ],
    "api-launchers": [Case("get", "/api/v1/launchers", API_READ)],
    "api-launcher-runs": [
        Case("post", "/api/v1/launchers/matrix/runs", (201, 201, 404, 201, 401, 401), {"project": "lab"}, True)
    ],
    "api-not-found": [Case("get", "/api/v1/no-such-thing", (404, 404, 404, 404, 404, 404))],
}


def url_names() -> set[str]:
    def walk(patterns):
        for p in patterns:
            if isinstance(p, URLResolver):
                if str(p.pattern) == "admin/":
                    yield "admin"  # Django's admin: one entry, its own staff check guards every page
                    continue
                yield from walk(p.url_patterns)
            else:
                yield p.name or str(p.pattern)

    return set(walk(get_resolver().url_patterns))


def test_every_url_pattern_is_in_the_matrix():
    names = url_names()
    assert names - set(MATRIX) == set(), "add these URL patterns to MATRIX with the status each caller gets"
    assert set(MATRIX) - names == set(), "remove these from MATRIX: no such URL pattern"


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, tiny_config_module):
    """Made once for the module (each test's own writes roll back), removed at the end."""
    from orchestrator.accounts.models import ApiToken
    from orchestrator.experiments.models import Experiment, Project, Run
    from orchestrator.launchers.models import Launcher
    from orchestrator.workspace.models import SavedView

    with django_db_blocker.unblock():
        users = {
            role: User.objects.create(username=role, is_staff=role == "staff")
            for role in ("owner", "member", "other", "staff")
        }
        experiment = experiment_create(owner=users["owner"], name="exp", project="lab", config=tiny_config_module)
        experiment.project.members.add(users["member"])
        run, token = start_attempt(experiment.runs.get(), 1)  # running, with its ingestion token
        # keys the metrics reads name
        metrics_ingest(run=run, attempt=1, points=points("train/loss", [0]) + points("train/reward", [0]))
        api_token_create(user=users["owner"], name="matrix")
        token_id = ApiToken.objects.get(user=users["owner"]).pk
        logging_token_id = logging_token_create(user=users["owner"], name="matrix-world")[0].pk
        view = SavedView.objects.create(project=experiment.project, owner=users["owner"], name="matrix")
        launcher = Launcher.objects.create(name="matrix", command=["/bin/true"], created_by=users["staff"])
    yield {
        "users": users,
        "run": run.pk,
        "exp": experiment.pk,
        "run_token": token,
        "token_id": token_id,
        "logging_token_id": logging_token_id,
        "view": view.pk,
    }
    with django_db_blocker.unblock():
        SavedView.objects.filter(pk=view.pk).delete()
        Launcher.objects.filter(pk=launcher.pk).delete()
        Run.objects.filter(experiment=experiment).delete()
        Experiment.objects.filter(pk=experiment.pk).delete()
        Project.objects.filter(name="lab").delete()
        ApiToken.objects.filter(user__in=users.values()).delete()
        User.objects.filter(pk__in=[u.pk for u in users.values()]).delete()


@pytest.fixture(scope="module")
def tiny_config_module():
    from tests.conftest import TINY_CONFIG

    return json.loads(json.dumps(TINY_CONFIG))


def _client(world, caller: str) -> Client:
    if caller == "run_token":
        return Client(HTTP_AUTHORIZATION=f"Bearer {world['run_token']}")
    client = Client()
    if caller != "anonymous":
        client.force_login(world["users"][caller])
    return client


CASES = [(name, i, caller) for name, cases in MATRIX.items() for i in range(len(cases)) for caller in CALLERS]


@pytest.mark.parametrize("name,index,caller", CASES, ids=[f"{n}[{i}]-{c}" for n, i, c in CASES])
def test_authorization(world, db, name, index, caller):
    case = MATRIX[name][index]
    path = case.path.format(**world)
    client = _client(world, caller)
    if case.json_body:
        response = getattr(client, case.method)(path, data=json.dumps(case.body), content_type="application/json")
    elif case.method == "post":
        response = client.post(path, case.body or {})
    else:
        response = getattr(client, case.method)(path)
    expected = case.statuses[CALLERS.index(caller)]
    assert response.status_code == expected, f"{case.method.upper()} {path} as {caller}"
    if path.startswith("/api/") and response.status_code >= 400:
        assert response["Content-Type"].startswith("application/json"), "API errors answer JSON"


# --- personal tokens with a scope and an expiry -----------------------------------------
# The owner's own token, read-only or expired, against every case: pages take no bearer token (as
# an anonymous visitor); the API reads with a read-only token as the owner does and refuses its
# writes (403) before any view runs; an expired token is refused everywhere (401). Endpoints that
# answer without a user (the OpenAPI document, unknown /api/ paths) answer as for the owner; those
# that take only a run's token (ingestion) are left out: a personal token is no run token, whatever its scope.
TOKEN_CASES = [
    (name, i)
    for name, cases in MATRIX.items()
    for i, case in enumerate(cases)
    if case.statuses[0] != 401 or case.statuses[CALLERS.index("run_token")] == 401
]


def token_expectation(case: Case, kind: str) -> int:
    owner, anonymous = case.statuses[0], case.statuses[CALLERS.index("anonymous")]
    if not case.path.startswith("/api/"):
        return anonymous
    if anonymous != 401:  # answers without a user
        return owner
    if kind == "expired":
        return 401
    return owner if case.method in ("get", "head") else 403


@pytest.fixture(scope="module")
def owner_tokens(world, django_db_blocker):
    from datetime import timedelta

    from django.utils import timezone

    from orchestrator.accounts.models import ApiToken

    with django_db_blocker.unblock():
        owner = world["users"]["owner"]
        read = api_token_create(user=owner, name="read-only", scope="read")
        expired = api_token_create(user=owner, name="expired", days=1)
        ApiToken.objects.filter(user=owner, name="expired").update(expires_at=timezone.now() - timedelta(minutes=1))
    yield {"read": read, "expired": expired}
    with django_db_blocker.unblock():
        ApiToken.objects.filter(user=world["users"]["owner"], name__in=["read-only", "expired"]).delete()


@pytest.mark.parametrize("kind", ["read", "expired"])
@pytest.mark.parametrize("name,index", TOKEN_CASES, ids=[f"{n}[{i}]" for n, i in TOKEN_CASES])
def test_scoped_and_expired_tokens(world, owner_tokens, db, name, index, kind):
    case = MATRIX[name][index]
    path = case.path.format(**world)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {owner_tokens[kind]}")
    if case.json_body:
        response = getattr(client, case.method)(path, data=json.dumps(case.body), content_type="application/json")
    elif case.method == "post":
        response = client.post(path, case.body or {})
    else:
        response = getattr(client, case.method)(path)
    assert response.status_code == token_expectation(case, kind), f"{case.method.upper()} {path} with a {kind} token"
    if path.startswith("/api/") and response.status_code >= 400:
        assert response["Content-Type"].startswith("application/json"), "API errors answer JSON"


# --- logging tokens ---------------------------------------------------------------------
# A logging token opens runs as its user and does nothing else: pages answer as to an anonymous
# visitor, every other API endpoint 401, and the endpoints that take a run's own token 404, as for
# a run that does not exist (a logging token is no run's token; it writes to the runs it opened
# through their tokens).


def logging_token_expectation(name: str, case: Case) -> int:
    owner, anonymous, run_token = case.statuses[0], case.statuses[4], case.statuses[5]
    if not case.path.startswith("/api/"):
        return anonymous
    if name == "api-sdk-runs" or anonymous != 401:  # opens a run as its user; answers without a user
        return owner
    return 404 if run_token != 401 else 401


LOGGING_CASES = [(name, i) for name, cases in MATRIX.items() for i in range(len(cases))]


@pytest.fixture(scope="module")
def owner_logging_token(world, django_db_blocker):
    from orchestrator.experiments.models import LoggingToken

    with django_db_blocker.unblock():
        _, token = logging_token_create(user=world["users"]["owner"], name="matrix")
    yield token
    with django_db_blocker.unblock():
        LoggingToken.objects.filter(user=world["users"]["owner"]).delete()


@pytest.mark.parametrize("name,index", LOGGING_CASES, ids=[f"{n}[{i}]" for n, i in LOGGING_CASES])
def test_logging_tokens(world, owner_logging_token, db, name, index):
    case = MATRIX[name][index]
    path = case.path.format(**world)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {owner_logging_token}")
    if case.json_body:
        response = getattr(client, case.method)(path, data=json.dumps(case.body), content_type="application/json")
    elif case.method == "post":
        response = client.post(path, case.body or {})
    else:
        response = getattr(client, case.method)(path)
    expected = logging_token_expectation(name, case)
    assert response.status_code == expected, f"{case.method.upper()} {path} with a logging token"


# --- beyond roles: what changes after a run was opened ---------------------------------------------
# Rows the URL matrix cannot hold: a member's run that the project's owners may stop, a member
# removed while their run and its tokens live on, logging tokens (listed and revoked by their
# owner only, ended with the personal token that made them) and the project's notification
# secrets, read in full by its owners only. Each row: who calls, what, the status it must get and,
# for the secrets, whether the webhook URL is in the answer.

SLACK = "https://hooks.slack.com/services/T0/B0/matrix-secret"


@dataclass(frozen=True)
class Row:
    caller: str
    method: str
    path: str  # formatted with world and beyond's ids
    status: int
    body: object = None
    shows_secret: bool | None = None


BEYOND: dict[str, Row] = {
    # owners cancelling members' runs
    "owner cancels a member's run": Row("owner", "post", "/api/v1/runs/{member_run}/cancel", 200),
    "owner cancels a member's run from its page": Row("owner", "post", "/runs/{member_run}/cancel", 302),
    "staff cancels a member's run": Row("staff", "post", "/api/v1/runs/{member_run}/cancel", 200),
    "the member cancels their own run": Row("member", "post", "/api/v1/runs/{member_run}/cancel", 200),
    "a viewer cannot cancel it": Row("viewer", "post", "/api/v1/runs/{member_run}/cancel", 403),
    "another member cannot cancel the owner's run": Row("member", "post", "/api/v1/runs/{run}/cancel", 403),
    "no member cannot see it to cancel it": Row("other", "post", "/api/v1/runs/{member_run}/cancel", 404),
    "the member's run token still writes": Row(
        "member_run_token", "post", "/api/v1/runs/{member_run}/heartbeat", 200, {}
    ),
    # a removed member
    "removed member reads the run": Row("removed", "get", "/api/v1/runs/{removed_run}", 404),
    "removed member reopens the run by client_id": Row(
        "removed_logging", "post", "/api/v1/sdk/runs", 404, {"client_id": "removed-0001", "name": "r", "project": "lab"}
    ),
    "removed member's run token: metrics": Row(
        "removed_run_token",
        "post",
        "/api/v1/runs/{removed_run}/metrics",
        404,
        {"attempt": 1, "points": points("train/loss", [1])},
    ),
    "removed member's run token: samples": Row(
        "removed_run_token", "post", "/api/v1/runs/{removed_run}/samples", 404, {"attempt": 1, "samples": []}
    ),
    "removed member's run token: heartbeat": Row(
        "removed_run_token", "post", "/api/v1/runs/{removed_run}/heartbeat", 404, {}
    ),
    "removed member's run token: finish": Row(
        "removed_run_token", "post", "/api/v1/sdk/runs/{removed_run}/finish", 404, {"exit_code": 0}
    ),
    "the owner cancels the removed member's run": Row("owner", "post", "/api/v1/runs/{removed_run}/cancel", 200),
    # logging tokens
    "owner lists their logging tokens": Row("owner", "get", "/api/v1/sdk/tokens", 200),
    "owner revokes their logging token": Row("owner", "delete", "/api/v1/sdk/tokens/{owner_logging}", 200),
    "a member revokes the owner's logging token": Row("member", "delete", "/api/v1/sdk/tokens/{owner_logging}", 404),
    "staff revokes it through the API": Row("staff", "delete", "/api/v1/sdk/tokens/{owner_logging}", 404),
    "anonymous revokes it": Row("anonymous", "delete", "/api/v1/sdk/tokens/{owner_logging}", 401),
    "a read-only token revokes it": Row("owner_read", "delete", "/api/v1/sdk/tokens/{owner_logging}", 403),
    "a logging token whose personal token was revoked opens a run": Row(
        "orphan_logging", "post", "/api/v1/sdk/runs", 401, {"client_id": "orphan-0001", "name": "o", "project": "lab"}
    ),
    "a live logging token opens a run": Row(
        "owner_logging_token",
        "post",
        "/api/v1/sdk/runs",
        201,
        {"client_id": "live-0001", "name": "o", "project": "lab"},
    ),
    # notification secrets
    "owner reads the webhook URL": Row("owner", "get", "/api/v1/projects/lab/alerts", 200, shows_secret=True),
    "staff reads the webhook URL": Row("staff", "get", "/api/v1/projects/lab/alerts", 200, shows_secret=True),
    "a member sees it masked": Row("member", "get", "/api/v1/projects/lab/alerts", 200, shows_secret=False),
    "a viewer sees it masked": Row("viewer", "get", "/api/v1/projects/lab/alerts", 200, shows_secret=False),
    "the owner's read-only token sees it masked": Row(
        "owner_read", "get", "/api/v1/projects/lab/alerts", 200, shows_secret=False
    ),
    "no member reads nothing": Row("other", "get", "/api/v1/projects/lab/alerts", 404, shows_secret=False),
}


@pytest.fixture
def beyond(world, db):
    """The rows' state, made in each test's transaction (rolled back after it)."""
    from orchestrator.accounts.models import ApiToken
    from orchestrator.accounts.services import api_token_delete
    from orchestrator.alerts.models import ProjectNotifications
    from orchestrator.experiments.models import Experiment, Membership
    from orchestrator.experiments.services import project_remove_member

    users = world["users"]
    lab = Experiment.objects.get(pk=world["exp"]).project
    viewer = User.objects.create(username="viewer")
    Membership.objects.create(project=lab, user=viewer, role=Membership.Role.VIEWER)
    member_run, member_token = start_attempt(
        experiment_create(
            owner=users["member"], name="members", project="lab", config=NEW_EXPERIMENT["config"]
        ).runs.get(),
        1,
    )
    removed = User.objects.create(username="removed")
    Membership.objects.create(project=lab, user=removed, role=Membership.Role.MEMBER)
    removed_logging = logging_token_create(user=removed, name="removed")[1]
    opened = Client().post(
        "/api/v1/sdk/runs",
        json.dumps(BEYOND["removed member reopens the run by client_id"].body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {removed_logging}",
    )
    assert opened.status_code == 201, opened.content
    project_remove_member(project=lab, user=removed)
    ProjectNotifications.objects.create(project=lab, webhook_url=SLACK, emails="owner@example.org")
    api_token_create(user=users["owner"], name="parent")
    parent = ApiToken.objects.get(user=users["owner"], name="parent")
    orphan = logging_token_create(user=users["owner"], name="orphan", made_with=parent)[1]
    assert api_token_delete(user=users["owner"], token_id=parent.pk)  # the personal token is revoked
    owner_logging_row, owner_logging = logging_token_create(user=users["owner"], name="beyond")
    return {
        "ids": {
            **world,
            "member_run": member_run.pk,
            "removed_run": opened.json()["id"],
            "owner_logging": owner_logging_row.pk,
        },
        "bearer": {
            "member_run_token": member_token,
            "removed_run_token": opened.json()["token"],
            "removed_logging": removed_logging,
            "orphan_logging": orphan,
            "owner_logging_token": owner_logging,
            "owner_read": api_token_create(user=users["owner"], name="beyond-read", scope="read"),
        },
        "users": {**users, "viewer": viewer, "removed": removed},
    }


@pytest.mark.parametrize("what", list(BEYOND))
def test_beyond_roles(beyond, what):
    row = BEYOND[what]
    if row.caller in beyond["bearer"]:
        client = Client(HTTP_AUTHORIZATION=f"Bearer {beyond['bearer'][row.caller]}")
    else:
        client = Client()
        if row.caller != "anonymous":
            client.force_login(beyond["users"][row.caller])
    path = row.path.format(**beyond["ids"])
    if row.body is not None:
        response = getattr(client, row.method)(path, data=json.dumps(row.body), content_type="application/json")
    else:
        response = getattr(client, row.method)(path)
    assert response.status_code == row.status, f"{what}: {row.method.upper()} {path} as {row.caller}"
    if row.shows_secret is not None:
        assert (SLACK in response.content.decode()) is row.shows_secret, what
