"""Beat only ever sends tasks that a worker knows: a misspelt name would be dropped silently."""

from django.conf import settings

from orchestrator.celery import app


def test_every_scheduled_task_is_registered():
    app.loader.import_default_modules()
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert scheduled and scheduled <= set(app.tasks)
