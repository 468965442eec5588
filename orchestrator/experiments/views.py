"""Browser pages for experiments and runs. Views stay thin: access helper, form, one service."""
import yaml
from django.contrib import messages
from django.db import transaction
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from orchestrator.experiments.access import get_run_for_user, visible_runs
from orchestrator.experiments.forms import ExperimentYamlForm
from orchestrator.experiments.services import experiment_create, run_request_cancel

DEFAULT_CONFIG_YAML = """\
model: {name: tiny}
task: {name: arithmetic}
algorithm: {objective: m2po}
staleness: {mode: stale_k, k: 2}
train: {steps: 60, seed: 1}
"""


def run_list(request):
    runs = visible_runs(request.user).order_by("-id")[:200]
    return render(request, "experiments/run_list.html", {"runs": runs})


def run_detail(request, run_id: int):
    run = get_run_for_user(request.user, run_id)
    return render(request, "experiments/run_detail.html", {
        "run": run,
        "config_yaml": yaml.safe_dump(run.config, sort_keys=False),
        "events": run.events.all(),
        "can_write": request.user.is_staff or run.owner_id == request.user.pk,
    })


def experiment_new(request):
    form = ExperimentYamlForm(request.POST or None, initial={"config_yaml": DEFAULT_CONFIG_YAML})
    if request.method == "POST" and form.is_valid():
        experiment = experiment_create(owner=request.user, name=form.cleaned_data["name"],
                                       project=form.cleaned_data["project"], config=form.cleaned_data["config_yaml"])
        messages.success(request, f"Queued {experiment.runs.count()} run(s).")
        first = experiment.runs.order_by("id").first()
        return redirect("exp-run-detail", run_id=first.pk)
    return render(request, "experiments/experiment_new.html", {"form": form})


@require_POST
def run_cancel(request, run_id: int):
    from orchestrator.cluster.tasks import cancel_run

    run = get_run_for_user(request.user, run_id, write=True)
    if run_request_cancel(run=run) and run.is_active:
        transaction.on_commit(lambda: cancel_run.delay(run.pk))
    return redirect("exp-run-detail", run_id=run.pk)
