"""Access and run-id parameters shared by the metric and sample endpoints: a trainer's run token
(ingestion), the `runs=1,2,3` parameter of the compare views and which of those runs a user may
see. ParamError carries the field a 400 names."""

from django.http import Http404, HttpRequest

from orchestrator.experiments.access import visible_experiments, visible_runs
from orchestrator.experiments.models import Experiment, Run
from orchestrator.experiments.tokens import run_not_found, run_token_expired, run_token_expiry, run_token_writes
from orchestrator.lib.api import bearer_token, json_error, parse_json_body
from orchestrator.lib.bounds import parse_id

MAX_COMPARE_RUNS = 200


class ParamError(ValueError):
    """A bad query parameter: `field` and `message` become the 400's errors entry."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field, self.message = field, message


def authenticated_run(request: HttpRequest, run_id: int, *, parse_body: bool = True):
    """(run, JSON body, None) when the request carries this run's own token, the run's owner may
    still write into its project and the run has not ended too long ago, and the body is JSON
    (body None when not asked to parse it), else (None, None, error). A missing run, another
    run's token and a removed owner's token get the same 404."""
    token = bearer_token(request)
    if token is None:
        return None, None, json_error(401, "missing run token: send Authorization: Bearer <token>")
    run = Run.objects.select_related("owner", "experiment").filter(pk=run_id).first()
    if run is None or not run_token_writes(run, token):
        return None, None, json_error(404, run_not_found(run_id))
    if run_token_expired(run):
        return None, None, json_error(403, run_token_expiry(run))
    if not parse_body:
        return run, None, None
    body, error = parse_json_body(request)
    return (None, None, error) if error else (run, body, None)


def run_ids_param(request: HttpRequest) -> list[int]:
    """The `runs` parameter (runs=1,2,3 or runs=1&runs=2, a form's checkboxes): distinct ids in
    the order given. Raises ParamError."""
    raw = ",".join(request.GET.getlist("runs"))
    ids = [parse_id(part.strip()) for part in raw.split(",") if part.strip()]
    if None in ids:
        raise ParamError("runs", f"must be comma-separated run ids, got {raw[:80]!r}")
    if not ids:
        raise ParamError("runs", "required, e.g. runs=1,2,3")
    if len(ids) > MAX_COMPARE_RUNS:
        raise ParamError("runs", f"at most {MAX_COMPARE_RUNS} runs")
    return list(dict.fromkeys(ids))


def visible_ids(user, ids: list[int]) -> list[int]:
    """`ids` unchanged when the user may see every one of those runs, else Http404 naming the others."""
    found = set(visible_runs(user).filter(pk__in=ids).values_list("pk", flat=True))
    if missing := [i for i in ids if i not in found]:
        raise Http404(f"runs {', '.join(map(str, missing))} do not exist")
    return ids


def compared_runs(request: HttpRequest) -> tuple[list[Run], Experiment | None]:
    """The runs of ?runs=1,2,3 or ?experiment=<id> that the user may see, and that experiment;
    Http404 for a bad or hidden id, the same for an experiment that does not exist."""
    experiment = None
    if exp_id := request.GET.get("experiment"):
        if parse_id(exp_id) is None:
            raise Http404("experiment must be an id")
        # one answer for an experiment that does not exist and one the user cannot see
        experiment = visible_experiments(request.user).filter(pk=parse_id(exp_id)).first()
        runs = list(visible_runs(request.user).filter(experiment=experiment).order_by("id")) if experiment else []
        if not runs:
            raise Http404(f"experiment {exp_id} does not exist")
        return runs, experiment
    try:
        ids = run_ids_param(request)
    except ParamError as exc:
        raise Http404(exc.message) from None
    ids = visible_ids(request.user, ids)
    by_id = {r.pk: r for r in visible_runs(request.user).filter(pk__in=ids)}
    return [by_id[i] for i in ids], None
