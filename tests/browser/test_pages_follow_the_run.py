"""Pages that follow the run, in Chromium under the production Content-Security-Policy.

One story on one server and one page, the cluster's side played by the real services a worker
calls (run_transition, sync_one_run with the job's status): Retry on a failed run's page, the
worker starting attempt 2 (header, facts card and job card agree without a reload), Cancel (the
run ends cancelled and its reason is the job's, not "cancelling: …"), then the experiment's page
while its last run ends (it says ended and offers no Pause or Cancel). The CSP is on throughout,
so any inline script, handler or eval on these pages shows as a console error."""

import pytest
from playwright.sync_api import expect

from orchestrator.cluster.backends.base import JobState, JobStatus
from orchestrator.cluster.models import Job
from orchestrator.cluster.services import sync_one_run
from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create, run_transition

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
S = Run.State
POLL_MS = 12_000  # the job card and the experiment's facts poll every 5 s


@pytest.fixture
def production_csp(settings):
    from orchestrator import celery

    settings.CONTENT_SECURITY_POLICY = settings.PRODUCTION_CSP  # what the HTTPS block turns on
    celery.app.conf.task_always_eager = True  # the cancel task runs at once, as a worker would
    yield
    celery.app.conf.task_always_eager = False


def start_attempt(run, attempt, tmp_path):
    run.refresh_from_db()
    assert run_transition(
        run=run,
        to=S.SUBMITTED,
        attempt=attempt,
        backend="local",
        job_id=f"opl-{run.pk}-a{attempt}",
        run_dir=str(tmp_path / f"run-{run.pk}"),
    )
    Job.objects.create(run=run, attempt=attempt, backend="local", name=run.job_id, job_id=run.job_id)
    assert run_transition(run=run, to=S.RUNNING)


def job_ends(run, state, reason):
    run.refresh_from_db()
    sync_one_run(run, JobStatus(job_id=run.job_id, state=state, native_state=state.value.upper(), reason=reason))


def test_retry_cancel_and_the_experiments_end_show_without_a_reload(
    browser_page, live_url, alice, tiny_config, tmp_path, settings, production_csp
):
    settings.RUNS_DIR = tmp_path
    settings.LOCAL_JOBS_DIR = tmp_path / "jobs"
    experiment = experiment_create(owner=alice, name="follow", config=tiny_config, seeds=2)
    first, second = experiment.runs.order_by("id")
    start_attempt(first, 1, tmp_path)
    job_ends(first, JobState.FAILED, "exit code 1")
    start_attempt(second, 1, tmp_path)
    page = browser_page
    response = page.goto(f"/runs/{first.pk}/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    expect(page.locator("#run-state")).to_have_text("failed")

    # Retry: queued at once; then the worker starts attempt 2 and the whole page follows
    page.get_by_role("button", name="Retry").click()
    expect(page.locator("#run-state")).to_have_text("queued")
    start_attempt(first, 2, tmp_path)
    expect(page.locator("#run-state")).to_have_text("running", timeout=POLL_MS)
    expect(page.locator("#run-facts")).to_contain_text("attempt 2 of 3")
    expect(page.locator("#run-job")).to_contain_text("2 of 3")
    expect(page.get_by_role("button", name="Retry")).to_have_count(0)

    # Cancel: cancelling at once; when the job has stopped, cancelled with the job's reason
    page.get_by_role("button", name="Cancel run").click()
    expect(page.locator("#run-state")).to_have_text("cancelling")
    expect(page.locator("#cancel-pending")).to_be_visible()
    job_ends(first, JobState.CANCELLED, "stopped by its owner")
    expect(page.locator("#run-state")).to_have_text("cancelled", timeout=POLL_MS)
    expect(page.locator("#run-reason")).to_have_text("stopped by its owner")
    expect(page.get_by_role("button", name="Retry")).to_be_visible()

    # The experiment: active while its second run runs; ended once that run has ended
    page.goto(f"/experiments/{experiment.pk}/")
    expect(page.locator("#experiment-state")).to_have_text("active")
    expect(page.locator("#cancel-sweep")).to_be_visible()
    job_ends(second, JobState.SUCCEEDED, "")
    expect(page.locator("#experiment-state")).to_have_text("ended", timeout=POLL_MS)
    expect(page.locator("#pause-sweep")).to_have_count(0)
    expect(page.locator("#cancel-sweep")).to_have_count(0)
    expect(page.locator("#experiment-counts")).to_contain_text("1 succeeded · 1 cancelled")
    assert page.console_errors == [] and page.http_errors == []
