"""Alert services: the effective rules of a run, setting a rule, checking an ingested batch and
the time rules, firing (once per attempt and kind: record, act, notify on commit) and notifying."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from celery import current_app
from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from orchestrator.alerts import rules, webhook
from orchestrator.alerts.models import Alert, AlertRule, ProjectNotifications, RunWatch
from orchestrator.experiments.models import Run
from orchestrator.metrics.chunks import as_float, live_points
from trainer.reporting import atomic_write_text
from trainer.run_markers import NO_CHECKPOINT_MARKER

log = logging.getLogger(__name__)
NOTIFY_TASK = "orchestrator.alerts.tasks.notify_alert"


class RuleError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.errors = [{"field": field, "message": message}]


_RULE_FIELDS = ("kind", "enabled", "threshold", "window_s", "action", "run_id")


def _rule_rows(run_id: int):
    return AlertRule.objects.filter(Q(run=run_id) | Q(project__experiments__runs=run_id)).values_list(*_RULE_FIELDS)


def effective_rules(run: Run) -> dict[str, rules.Rule]:
    """The defaults, overridden by the run's project's rules, overridden by the run's own (1 query)."""
    return rules_from_rows(_rule_rows(run.pk))


def rule_rows_query(run_id: int) -> tuple[str, tuple]:
    """effective_rules' query as SQL and parameters (sent by the ingestion pipeline: batch_check.py)."""
    return _rule_rows(run_id).query.sql_with_params()


def rules_from_rows(rows) -> dict[str, rules.Rule]:
    """The defaults overridden by rule rows (`_RULE_FIELDS`): the project's, then the run's."""
    out = dict(rules.DEFAULTS)
    for kind, enabled, threshold, window_s, action, run_id in sorted(rows, key=lambda r: r[-1] is not None):
        out[kind] = replace(
            out[kind],
            enabled=enabled,
            threshold=threshold,
            window_s=window_s,
            action=action,
            source="run" if run_id else "project",
        )
    return out


def alert_rule_set(
    *,
    kind: str,
    run: Run | None = None,
    project=None,
    enabled: bool = True,
    threshold: float | None = None,
    window_s: int | None = None,
    action: str = "notify",
) -> AlertRule:
    """Create or replace one rule for a run or a project; RuleError names the bad field."""
    if (run is None) == (project is None):
        raise RuleError("scope", "give a run or a project, not both")
    rule = rule_checked(kind=kind, enabled=enabled, threshold=threshold, window_s=window_s, action=action)
    row, _ = AlertRule.objects.update_or_create(
        run=run,
        project=None if run else project,
        kind=kind,
        defaults={"enabled": enabled, "threshold": rule.threshold, "window_s": rule.window_s, "action": action},
    )
    return row


def rule_checked(
    *,
    kind: str,
    enabled: bool = True,
    threshold: float | None = None,
    window_s: int | None = None,
    action: str = "notify",
) -> rules.Rule:
    """The rule these values make (None: the kind's default), within the bounds; RuleError names
    the bad field. The API, the browser forms and a rule's test all pass through here."""
    if kind not in rules.KINDS:
        raise RuleError("kind", f"must be one of {', '.join(rules.KINDS)}, got {kind!r}")
    if action not in AlertRule.Action.values:
        raise RuleError("action", f"must be one of {', '.join(AlertRule.Action.values)}, got {action!r}")
    default = rules.DEFAULTS[kind]
    threshold = default.threshold if threshold is None else threshold
    window_s = default.window_s if window_s is None else window_s
    if kind in rules.TIME_KINDS and not 10 <= window_s <= 7 * 86400:
        raise RuleError("window_s", f"{kind}: seconds from 10 to 604800, got {window_s}")
    if not 0 <= window_s <= 7 * 86400:
        raise RuleError("window_s", f"seconds from 0 to 604800, got {window_s}")
    if not abs(threshold) < 1e12:
        raise RuleError("threshold", f"must be a finite number under 1e12 in size, got {threshold}")
    if kind == rules.CLIP_CEILING and not 0 < threshold < 1:
        raise RuleError("threshold", f"{kind}: a fraction between 0 and 1 (exclusive), got {threshold}")
    if kind == rules.NEG_ADV_TAIL and not threshold > 1:
        raise RuleError("threshold", f"{kind}: an importance ratio above 1, got {threshold}")
    if kind == rules.STALENESS_BOUND and not threshold >= 0:
        raise RuleError("threshold", f"{kind}: updates over the bound, 0 or more, got {threshold}")
    if kind in (rules.REWARD_DROP, rules.ENTROPY_FLOOR) and not threshold > 0:
        raise RuleError("threshold", f"{kind}: must be above 0, got {threshold}")
    return rules.Rule(kind, enabled, threshold, window_s, action)


def project_notifications_set(
    *, project, webhook_url: str | None = None, emails: list[str] | None = None, email_owner: bool | None = None
) -> ProjectNotifications:
    """Set where a project's alerts go (fields left None stay); RuleError names the bad field."""
    from django.core.exceptions import ValidationError
    from django.core.validators import URLValidator, validate_email

    prefs, _ = ProjectNotifications.objects.get_or_create(project=project)
    if webhook_url is not None:
        if webhook_url and (len(webhook_url) > 500 or not webhook_url.startswith(("http://", "https://"))):
            raise RuleError("webhook_url", "an http:// or https:// URL of at most 500 characters, or empty for none")
        try:
            webhook_url and URLValidator(schemes=["http", "https"])(webhook_url)
        except ValidationError:
            raise RuleError("webhook_url", f"not a valid URL: {webhook_url[:100]!r}") from None
        if webhook_url and (problem := webhook.literal_problem(webhook_url)):
            raise RuleError("webhook_url", problem)
        prefs.webhook_url = webhook_url
    if emails is not None:
        if len(emails) > 20:
            raise RuleError("emails", f"at most 20 addresses, got {len(emails)}")
        for address in emails:
            try:
                validate_email(address)
            except ValidationError:
                raise RuleError("emails", f"not an email address: {address[:100]!r}") from None
        if len(",".join(emails)) > 1000:
            raise RuleError("emails", "at most 1000 characters in all")
        prefs.emails = ",".join(emails)
    if email_owner is not None:
        prefs.email_owner = email_owner
    prefs.save()
    return prefs


def alerts_after_ingest(*, run: Run, cols, check=None) -> None:
    """Called once a batch is stored (outside its transaction): check the metric rules against the
    batch's watched keys only. `check`: the batch_check.BatchCheck the ingestion pipeline carried
    (then only a new firing costs a query). Never raises into ingestion."""
    if rules.WATCHED_KEYS.isdisjoint(cols.keys):
        return  # a batch without a watched key costs one set test
    try:
        if check is not None and check.firings is not None:
            for firing in check.firings:
                if firing.kind not in check.fired_kinds:
                    alert_fire(run=run, rule=check.rules[firing.kind], firing=firing)
            done = check.fired_kinds | {f.kind for f in check.firings}
            _tail_over_history(run, check.rules, check.points, done)
        else:
            _check_batch(run, cols)
    except Exception:
        log.exception("alert check of run %s failed; ingestion is unaffected", run.pk)


def _check_batch(run: Run, cols) -> None:
    points: dict[str, list[tuple[int, float]]] = {}
    for key, step, value, special in zip(cols.keys, cols.steps, cols.values, cols.specials):
        if key in rules.WATCHED_KEYS:
            points.setdefault(key, []).append((step, as_float(value, special)))
    for series in points.values():
        series.sort()
    run_rules = effective_rules(run)
    if rules.KEYS[rules.REWARD_DROP][0] not in points:
        fired = rules.check_batch(run_rules, points, rules.RewardTrack())
    else:
        with transaction.atomic():  # the run's watch row only (never the batch lock): batches in parallel
            watch, _ = RunWatch.objects.select_for_update().get_or_create(run=run)
            track = rules.RewardTrack(watch.reward_ema, watch.reward_best, watch.reward_points, watch.reward_step)
            fired = rules.check_batch(run_rules, points, track)
            RunWatch.objects.filter(pk=run.pk).update(
                reward_ema=track.ema, reward_best=track.best, reward_points=track.points, reward_step=track.last_step
            )
    for firing in fired:
        alert_fire(run=run, rule=run_rules[firing.kind], firing=firing)
    _tail_over_history(run, run_rules, points, {f.kind for f in fired})


def _tail_over_history(run: Run, run_rules: dict[str, rules.Rule], points, done: set[str]) -> None:
    """neg_adv_tail counts tail updates over a window longer than a batch: when the batch has one,
    the run's stored points of the window before it decide (only then: a query per such batch)."""
    rule = run_rules.get(rules.NEG_ADV_TAIL)
    if rule is None or not rule.enabled or rules.NEG_ADV_TAIL in done:
        return
    tail = rules.tail_updates(rule.threshold, points)
    if not tail:
        return
    stored = live_points([run.pk], rules.KEYS[rules.NEG_ADV_TAIL], lo=tail[0][0] - rules.TAIL_WINDOW, hi=tail[-1][0])
    history = {
        key: [
            (step, as_float(value, special))
            for step, value, special in zip(p.steps.tolist(), p.values.tolist(), p.specials.tolist(), strict=True)
        ]
        for (_, key), p in stored.items()
    }
    if firing := rules.check_neg_adv_tail(rule.threshold, history):
        alert_fire(run=run, rule=rule, firing=firing)


def alerts_check_time(*, now=None) -> int:
    """Beat: the heartbeat and progress rules over running runs. Returns how many fired."""
    now = now or timezone.now()
    fired = 0
    for run in Run.objects.filter(state=Run.State.RUNNING).select_related("experiment"):
        run_rules = effective_rules(run)
        watch, _ = RunWatch.objects.get_or_create(run=run, defaults={"last_step": run.step, "step_seen_at": now})
        if watch.last_step != run.step or watch.step_seen_at is None:
            RunWatch.objects.filter(pk=run.pk).update(last_step=run.step, step_seen_at=now)
            watch.last_step, watch.step_seen_at = run.step, now
        beat = run.last_heartbeat or run.started_at
        rule = run_rules[rules.NO_HEARTBEAT]
        if rule.enabled and beat and now - beat > timedelta(seconds=rule.window_s):
            fired += alert_fire(
                run=run,
                rule=rule,
                firing=rules.Firing(
                    rules.NO_HEARTBEAT,
                    run.step,
                    (now - beat).total_seconds(),
                    f"no heartbeat for {(now - beat).total_seconds():.0f} s (limit {rule.window_s} s)",
                ),
            )
        rule = run_rules[rules.NO_PROGRESS]
        idle = now - watch.step_seen_at
        if rule.enabled and idle > timedelta(seconds=rule.window_s):
            fired += alert_fire(
                run=run,
                rule=rule,
                firing=rules.Firing(
                    rules.NO_PROGRESS,
                    run.step,
                    idle.total_seconds(),
                    f"still at update {run.step} after {idle.total_seconds():.0f} s (limit {rule.window_s} s)",
                ),
            )
    return fired


def alert_fire(*, run: Run, rule: rules.Rule, firing: rules.Firing) -> bool:
    """Record the alert once per attempt and kind; act on it (stop, cancel) and notify after
    commit. False when this kind had already fired in this attempt."""
    try:
        with transaction.atomic():
            alert = Alert.objects.create(
                run=run,
                attempt=run.attempt,
                kind=firing.kind,
                message=firing.message,
                step=firing.step,
                value=firing.value,
                action=rule.action,
            )
    except IntegrityError:
        return False
    if rule.action in (AlertRule.Action.STOP, AlertRule.Action.CANCEL):
        alert.action_result = _cancel(run, checkpoint=rule.action == AlertRule.Action.STOP)
        Alert.objects.filter(pk=alert.pk).update(action_result=alert.action_result)
    alert_id = alert.pk
    # by name: tasks.py imports this module, not the other way round; a broker error stays out of ingestion
    transaction.on_commit(lambda: current_app.send_task(NOTIFY_TASK, args=[alert_id]), robust=True)
    return True


def _cancel(run: Run, *, checkpoint: bool) -> str:
    """The user's cancel (experiments.services.run_stop); without a checkpoint, the marker the
    trainer reads first (trainer/cli.py NO_CHECKPOINT_MARKER)."""
    from orchestrator.experiments.services import run_stop

    run.refresh_from_db()
    if run.is_terminal:
        return f"run already {run.state}"
    if not checkpoint and run.run_dir:
        try:
            atomic_write_text(Path(run.run_dir) / NO_CHECKPOINT_MARKER, f"attempt {run.attempt}\n")
        except OSError as exc:
            log.warning("run %s: could not write %s (%s); it will checkpoint", run.pk, NO_CHECKPOINT_MARKER, exc)
    if not run_stop(run=run):
        return f"could not cancel a {run.state} run"
    if checkpoint:
        return "stop requested: the trainer checkpoints and exits; Retry resumes from that checkpoint"
    return "cancel requested: the trainer exits without a checkpoint"


def alert_notify(*, alert_id: int) -> None:
    """Send the alert by email and to the project's webhook (webhook.py), each once; failures are
    counted on the alert with a short reason, and a webhook failure that may pass (no answer, a
    5xx, a 429) raises WebhookError so the task retries it."""
    alert = Alert.objects.select_related("run__owner", "run__experiment__project").get(pk=alert_id)
    run = alert.run
    project = run.experiment.project
    prefs = ProjectNotifications.objects.filter(project=project).first()
    text = (
        f"[OffPolicy Lab] run {run.pk} ({run.name}, project {project.name}): {alert.kind.replace('_', ' ')}: "
        f"{alert.message}" + (f"; {alert.action_result}" if alert.action_result else "")
    )
    if alert.email_sent_at is None:
        to = [run.owner.email] if run.owner.email and (prefs is None or prefs.email_owner) else []
        to += [e.strip() for e in (prefs.emails if prefs else "").split(",") if e.strip()]
        if to:
            try:
                send_mail(f"Alert: run {run.pk} {alert.kind}", text, settings.DEFAULT_FROM_EMAIL, to)
                Alert.objects.filter(pk=alert.pk).update(email_sent_at=timezone.now())
            except Exception as exc:
                _note_failure(alert, "email_failures", f"email: {exc}")
    if prefs and prefs.webhook_url and alert.webhook_sent_at is None:
        try:
            webhook.post_json(prefs.webhook_url, {"text": text})
        except webhook.WebhookError as exc:
            _note_failure(alert, "webhook_failures", f"webhook: {exc.reason}")
            if exc.permanent:
                return
            raise
        Alert.objects.filter(pk=alert.pk).update(webhook_sent_at=timezone.now())


def _note_failure(alert: Alert, counter: str, error: str) -> None:
    from django.db.models import F

    Alert.objects.filter(pk=alert.pk).update(**{counter: F(counter) + 1, "last_error": error[:1000]})
    log.warning("alert %s notification failed: %s", alert.pk, error)
