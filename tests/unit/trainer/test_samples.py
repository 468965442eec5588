"""Rollout samples: the objective's marks, and samples.jsonl's push, backfill and resume cut.

The marks are checked against the gradient, a witness the objective cannot fake: a token is masked
or clipped exactly when the loss takes it out of the gradient (its d loss / d logp is 0 although its
advantage is not). The pusher is checked against a real HTTP server standing in for the dashboard.
"""

import json
import time

import pytest
import torch

from trainer.algo.objectives import DUAL_CLIP_OBJECTIVES, OBJECTIVES, m2po_mask, policy_loss, policy_loss_marked
from trainer.config import ReportingConfig
from trainer.reporting import MAX_SAMPLES_PER_POST, MetricSpool, Pusher, read_offset, read_rejected, truncate_spool

from .fake_dashboard import Dashboard

SAMPLES_PATH = "/api/v1/runs/17/samples"


def _batch(seed=0, rows=6, tokens=9, spread=0.3):
    g = torch.Generator().manual_seed(seed)
    behav = -torch.rand(rows, tokens, generator=g, dtype=torch.float64) * 3
    logp = (behav + spread * torch.randn(rows, tokens, generator=g, dtype=torch.float64)).requires_grad_()
    adv = torch.randn(rows, 1, generator=g, dtype=torch.float64).expand(rows, tokens).clone()
    adv[adv.abs() < 1e-3] = 0.5  # every valid token carries an advantage
    mask = torch.ones(rows, tokens, dtype=torch.bool)
    mask[1, 5:] = False  # padding
    mask[4, 2:] = False
    return logp, behav, adv, mask


PARAMS = {
    "m2po": {"tau_m2": 0.01},
    "m2po_cap": {"budget": 0.01},
    "grpo": {"eps_low": 0.1, "eps_high": 0.15},
    "no_clip": {},
    "gspo": {"eps_low": 0.01, "eps_high": 0.02},
    "decoupled_ppo": {"eps_low": 0.1, "eps_high": 0.1},
    "cispo": {"eps_low": 0.1, "eps_high": 0.1},
    "sapo": {"sapo_tau_pos": 6.0, "sapo_tau_neg": 6.0},
}
OPTIONS = {
    "plain": {},
    "dual_clip": {"dual_clip_c": 1.2},
    "token_mask": {"token_mask": True, "token_mask_low": 0.8, "token_mask_high": 1.3},
    "seq_mask": {"seq_mask": True, "seq_mask_high": 1.05},
    "tis": {"tis_cap": 1.1},
}
REWEIGHTING = ("cispo", "sapo")  # and TIS: the token keeps a gradient, with a changed weight


def _case(name, option):
    logp, behav, adv, mask = _batch(seed=OBJECTIVES.index(name) + 10 * list(OPTIONS).index(option), spread=0.5)
    params = {**PARAMS[name], **OPTIONS[option]}
    if name == "decoupled_ppo":
        params["prox_logp"] = logp.detach() + 0.2 * torch.randn(
            logp.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9)
        )
    if option == "tis":
        params["rollout_logp"] = behav + 0.3 * torch.randn(
            behav.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(4)
        )
    return logp, behav, adv, mask, params


CASES = [(n, o) for o in OPTIONS for n in OBJECTIVES if o != "dual_clip" or n in DUAL_CLIP_OBJECTIVES]


@pytest.mark.parametrize("name, option", CASES)
def test_marked_tokens_are_exactly_those_the_loss_takes_out_of_the_gradient(name, option):
    logp, behav, adv, mask, params = _case(name, option)
    loss, stats, marks = policy_loss_marked(name, logp, behav, adv, mask, **params)
    (grad,) = torch.autograd.grad(loss, logp)
    out_of_gradient = mask & (grad == 0)
    assert torch.equal(marks.no_gradient, out_of_gradient), (name, option)
    assert not (marks.masked & marks.clipped).any() and not (marks.reweighted & marks.no_gradient).any()
    assert not ((marks.masked | marks.clipped | marks.reweighted) & ~mask).any()
    assert torch.equal(marks.log_ratio, (logp.detach() - behav).masked_fill(~mask, 0.0))
    assert stats["actor/clip_frac"] == pytest.approx(int(marks.no_gradient.sum()) / int(mask.sum()))
    assert stats["actor/reweighted_frac"] == pytest.approx(int(marks.reweighted.sum()) / int(mask.sum()))
    if name in REWEIGHTING or option == "tis":
        assert marks.reweighted.any(), f"{name}+{option}: the test data should reweight some tokens"
    if name in REWEIGHTING and option in ("plain", "tis"):
        assert not marks.no_gradient.any(), f"{name} never takes a token out of the gradient"
    elif name == "no_clip" and option in ("plain", "tis"):
        assert not marks.no_gradient.any()
    else:
        assert marks.no_gradient.any(), f"{name}+{option}: the test data should mark some tokens"
    assert torch.equal(policy_loss(name, logp, behav, adv, mask, **params)[0], loss)  # same loss either way


@pytest.mark.parametrize("name", REWEIGHTING)
def test_reweighted_tokens_keep_a_gradient_other_than_the_plain_ratios(name):
    logp, behav, adv, mask, params = _case(name, "plain")
    loss, _, marks = policy_loss_marked(name, logp, behav, adv, mask, **params)
    (grad,) = torch.autograd.grad(loss, logp)
    plain = -torch.exp(logp.detach() - behav) * adv / mask.sum()  # d(-r A / n) / d logp: no_clip's gradient
    assert (grad[marks.reweighted] != 0).all()
    assert not torch.isclose(grad, plain)[marks.reweighted].any()


def test_m2po_marks_are_the_mask_handed_in_from_the_minibatch():
    logp, behav, adv, mask = _batch(seed=3)
    keep = m2po_mask(logp.detach() - behav, adv, mask, 0.01)
    rows = slice(2, 5)  # one micro-batch of the minibatch, with the minibatch's mask
    _, _, marks = policy_loss_marked(
        "m2po", logp[rows], behav[rows], adv[rows], mask[rows], tau_m2=0.01, m2po_keep=keep[rows]
    )
    assert not marks.clipped.any() and not marks.reweighted.any()
    assert torch.equal(marks.masked, ~keep[rows] & mask[rows]) and marks.masked.any()


# ---------------------------------------------------------------------------------------------
# samples.jsonl: push, backfill, resume
# ---------------------------------------------------------------------------------------------


def _reporting(url, attempt=1, **kw):
    kw.setdefault("push_interval_s", 0.05)
    return ReportingConfig(dashboard_url=url, run_id="17", token="tok-17", attempt=attempt, **kw)


def _write_samples(run_dir, steps, per_step=2, tokens=3):
    with open(run_dir / "samples.jsonl", "a") as fh:
        for step in steps:
            for index in range(per_step):
                fh.write(json.dumps({"kind": "train", "step": step, "index": index, "tokens": ["x"] * tokens}) + "\n")


def _spooled(run_dir):
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def _delivered(dash, attempt=None):
    return [
        s
        for r in dash.requests
        if r["path"] == SAMPLES_PATH and r["status"] < 300 and attempt in (None, r["body"]["attempt"])
        for s in r["body"]["samples"]
    ]


def test_samples_go_out_in_gzip_batches_of_at_most_64_with_the_token_and_their_own_offset(tmp_path):
    _write_samples(tmp_path, range(75))  # 150 samples
    MetricSpool(tmp_path).log(1, {"a/x": 1.0})
    with Dashboard() as dash:
        pusher = Pusher(tmp_path, _reporting(dash.url, attempt=3), total_steps=10)
        pusher.start()
        pusher.close()
    posts = [r for r in dash.requests if r["path"] == SAMPLES_PATH]
    assert [len(r["body"]["samples"]) for r in posts] == [MAX_SAMPLES_PER_POST, MAX_SAMPLES_PER_POST, 22]
    assert {r["auth"] for r in posts} == {"Bearer tok-17"} and {r["body"]["attempt"] for r in posts} == {3}
    assert {r["encoding"] for r in posts} == {"gzip"}
    assert _delivered(dash) == _spooled(tmp_path)
    assert [p["key"] for p in dash.accepted_points()] == ["a/x"]  # the metrics went their own way
    assert read_offset(tmp_path, "samples.pushed.json") == ((tmp_path / "samples.jsonl").stat().st_size, 3)
    assert read_offset(tmp_path)[0] == (tmp_path / "metrics.jsonl").stat().st_size


def test_a_batch_of_big_samples_is_also_cut_by_bytes(tmp_path, monkeypatch):
    import opl_client.pusher  # the trainer's pusher (trainer/reporting.py imports it)

    monkeypatch.setattr(opl_client.pusher, "MAX_SAMPLE_BYTES_PER_POST", 30_000)
    _write_samples(tmp_path, range(5), per_step=2, tokens=2000)  # ~10 KB a line
    with Dashboard() as dash:
        Pusher(tmp_path, _reporting(dash.url), total_steps=1).close()
    sizes = [len(r["body"]["samples"]) for r in dash.requests if r["path"] == SAMPLES_PATH]
    assert sizes == [2, 2, 2, 2, 2]
    assert _delivered(dash) == _spooled(tmp_path)


def test_a_failed_sample_push_is_counted_retried_and_nothing_is_lost(tmp_path):
    _write_samples(tmp_path, [1, 2])
    with Dashboard(statuses=[503], headers={"Retry-After": "1"}) as dash:
        pusher = Pusher(tmp_path, _reporting(dash.url, flush_timeout_s=10), total_steps=2)
        assert pusher.push_samples_once() is False
        assert pusher.sample_push_failures == 1 and read_offset(tmp_path, "samples.pushed.json")[0] == 0
        pusher.close()  # the final flush retries
    assert [r["status"] for r in dash.requests if r["path"] == SAMPLES_PATH] == [503, 200]
    assert _delivered(dash) == _spooled(tmp_path)


def test_samples_a_down_dashboard_missed_are_backfilled_by_the_next_pusher(tmp_path):
    _write_samples(tmp_path, [1, 2])
    down = Pusher(tmp_path, _reporting("http://127.0.0.1:9", flush_timeout_s=0.5), total_steps=3)
    down.start()
    time.sleep(0.3)
    down.close()
    assert down.sample_push_failures >= 1 and read_offset(tmp_path, "samples.pushed.json")[0] == 0
    _write_samples(tmp_path, [3])
    with Dashboard() as dash:
        Pusher(tmp_path, _reporting(dash.url), total_steps=3).close()
        _write_samples(tmp_path, [4])
        Pusher(tmp_path, _reporting(dash.url), total_steps=4).close()  # only what is new
    assert [(s["step"], s["index"]) for s in _delivered(dash)] == [(s, i) for s in (1, 2, 3, 4) for i in (0, 1)]


def test_a_refused_sample_batch_is_counted_passed_over_and_kept_marked_rejected(tmp_path):
    _write_samples(tmp_path, [1])
    with Dashboard(statuses=[400]) as dash:
        pusher = Pusher(tmp_path, _reporting(dash.url), total_steps=1)
        pusher.close()
    assert [r["status"] for r in dash.requests if r["path"] == SAMPLES_PATH] == [400]
    assert pusher.sample_push_failures == 1 and pusher.failure_counts() == {"samples/push_failures": 2.0}
    size = (tmp_path / "samples.jsonl").stat().st_size
    assert read_offset(tmp_path, "samples.pushed.json")[0] == size
    assert [(r["start"], r["end"], r["lines"]) for r in read_rejected(tmp_path, "samples.jsonl")] == [(0, size, 2)]


def test_resume_cuts_samples_after_the_checkpoint_and_repushes_its_step_under_the_new_attempt(tmp_path):
    _write_samples(tmp_path, [1, 2, 3, 4])
    with open(tmp_path / "samples.jsonl", "a") as fh:
        fh.write('{"kind": "train", "step": 5, "ind')  # torn by a kill -9
    with Dashboard() as dash:
        Pusher(tmp_path, _reporting(dash.url, attempt=1), total_steps=4).close()
        truncate_spool(tmp_path, keep_through_step=2, attempt=2)
        assert [(s["step"], s["index"]) for s in _spooled(tmp_path)] == [(1, 0), (1, 1), (2, 0), (2, 1)]
        _write_samples(tmp_path, [3])  # re-recorded by the resumed attempt
        Pusher(tmp_path, _reporting(dash.url, attempt=2), total_steps=4).close()
    assert [(s["step"], s["index"]) for s in _delivered(dash, attempt=2)] == [(2, 0), (2, 1), (3, 0), (3, 1)]


def test_a_fresh_start_forgets_the_offset_of_a_samples_file_that_is_gone(tmp_path):
    (tmp_path / "samples.pushed.json").write_text(json.dumps({"offset": 500, "attempt": 1}))
    truncate_spool(tmp_path, keep_through_step=-1, attempt=1)
    assert read_offset(tmp_path, "samples.pushed.json")[0] == 0
