"""The shareable URL of a saved view: /views/<id>/ opens the page it was saved from, applied."""

from django.http import HttpRequest
from django.shortcuts import redirect
from django.urls import reverse

from orchestrator.workspace.access import get_view_for_user


def view_open(request: HttpRequest, view_id: int):
    view = get_view_for_user(request.user, view_id)
    kind, _, target = view.page.partition(":")
    if kind == "run":
        return redirect(f"{reverse('exp-run-detail', args=[int(target)])}?view={view.pk}")
    if kind == "experiment":
        return redirect(f"{reverse('exp-experiment-detail', args=[int(target)])}?view={view.pk}")
    runs = view.state.get("runs") or []
    experiments = view.state.get("experiments") or []
    query = f"runs={','.join(map(str, runs))}" if runs or not experiments else f"experiment={experiments[0]}"
    return redirect(f"{reverse('metrics-compare')}?{query}&view={view.pk}")
