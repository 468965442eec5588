from django import template

register = template.Library()


@register.filter
def get_item(mapping, key):
    """mapping[key] for keys that are not identifiers (e.g. 'random-samples')."""
    return mapping.get(key, "") if hasattr(mapping, "get") else ""


@register.filter
def metric(value):
    """A metric value for a table cell: 4 significant digits, a dash when missing."""
    if value is None:
        return "–"
    try:
        return f"{value:.4g}"
    except (TypeError, ValueError):
        return str(value)


@register.simple_tag
def duration(run):
    """Wall time from start to finish (or to now while running), as 1h02m or 3m05s."""
    from django.utils import timezone

    if not run.started_at:
        return "–"
    seconds = int(((run.finished_at or timezone.now()) - run.started_at).total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


@register.simple_tag
def progress(run, form="text"):
    """ "update 1200 / 1200 · step 600 / 600": optimizer updates and training steps, both named;
    form="short": "1200/1200" (updates), for the runs table's Updates column."""
    from orchestrator.experiments.progress import progress as run_progress

    p = run_progress(run.step, run.total_steps, run.config)
    if form == "short":
        return f"{p['updates']}/{p['total_updates']}" if p["total_updates"] is not None else str(p["updates"])
    return p["text"]


@register.simple_tag
def queue_status(run):
    """A queued run's place and what holds it ("3rd; waiting: cluster full 4/4"); "" otherwise."""
    from orchestrator.experiments.queue import waiting_reasons

    if run.state != "queued":
        return ""
    return waiting_reasons([run]).get(run.pk, "")


@register.filter
def breakable(key):
    """A metric key that may wrap after each '/' (and only there) in a narrow table header."""
    from django.utils.html import escape
    from django.utils.safestring import mark_safe

    return mark_safe(escape(key).replace("/", "/<wbr>"))


@register.simple_tag(takes_context=True)
def may_cancel(context, run) -> bool:
    """Whether the runs table offers `cancel` on this run: its owner, staff, or an owner of its
    project (access.get_run_to_cancel). The projects the user owns are read once per request."""
    from orchestrator.experiments.models import Membership

    request = context["request"]
    user = request.user
    if user.is_staff or run.owner_id == user.pk:
        return True
    owned = getattr(request, "_owned_project_ids", None)
    if owned is None:
        owned = set(
            Membership.objects.filter(user_id=user.pk, role=Membership.Role.OWNER).values_list("project_id", flat=True)
        )
        request._owned_project_ids = owned
    return run.experiment.project_id in owned
