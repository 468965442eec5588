"""The logging SDK behind `import opl`: a run opened on the dashboard, metrics and samples appended
to an on-disk spool on the caller's thread, and the bundled trainer's pusher (opl_client.pusher)
posting them from a background thread.

    import opl
    run = opl.init(project="p", name="n", config={...})
    run.log({"train/reward_mean": 0.5}, step=10)        # or opl.log(...)
    run.finish()                                        # or: with opl.init(...) as run:

The spool folder (`dir`, default spool_root()/<time>-<id>: ~/.local/share/opl/runs/<time>-<id> unless
OPL_DIR or XDG_DATA_HOME name another) holds run.json (what `opl sync` needs to open the
run again: never a token), metrics.jsonl and samples.jsonl. `mode="offline"` writes only that; `opl
sync DIR` uploads it later. When the dashboard cannot be reached at init, the run keeps logging to
the spool and a background thread opens it once the dashboard answers.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import re
import sys
import threading
import time
import unicodedata
import uuid
from pathlib import Path
from typing import Any

from opl_client.client import Client, OplError
from opl_client.pusher import Pusher, PushSettings
from opl_client.spool import (
    OFFSET_NAME,
    SAMPLES_OFFSET_NAME,
    SAMPLES_SPOOL_NAME,
    SPOOL_NAME,
    UPDATES_OFFSET_NAME,
    UPDATES_SPOOL_NAME,
    MetricSpool,
    atomic_write_text,
    read_offset,
)
from opl_client.wandb_compat import (
    Config,
    Histogram,
    Media,
    Summary,
    Table,
    alert_level,
    artifact_reference,
    config_dict,
    jsonable,
)

log = logging.getLogger("opl")

RUN_FILE = "run.json"
MODES = ("online", "offline", "disabled")
ERRORS_KEY = "sdk/errors"  # how many calls or values the SDK could not record so far
# Keys are sent as the user wrote them (spaces, brackets, %, #, any letter: W&B's convention);
# only a key with a control character (or a bidi control, which reorders how text reads) is
# dropped here, counted and named once. The dashboard answers per point for anything else.
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# the dashboard's bound: charts read steps as doubles, exact up to 2^53 (far past any token count)
MAX_STEP = 2**53 - 1
SAMPLE_FIELDS = {
    "kind",
    "step",
    "index",
    "eval_set",
    "prompt",
    "response",
    "reference",
    "reward",
    "correct",
    "policy_version",
    "staleness",
    "objective",
    "tokens",
    "log_ratio",
    "clipped",
    "masked",
    "truncated",
    "time",
    "variant",
    "advantage",
    "reweighted",
    "entropy",
    "counterfactual",
}


def flatten(data: dict, prefix: str = "", sep: str = "/") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a/b": 1}, as W&B and trackio name nested metrics."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, dict):
            out.update(flatten(value, name, sep))
        else:
            out[name] = value
    return out


def safe_name(text: str, default: str = "run") -> str:
    """A run name the dashboard takes (letters, digits, _ . -; a letter or digit first) made from any text."""
    cleaned = re.sub(r"[^A-Za-z0-9_.\-]+", "-", str(text)).strip("-._")[:200]
    return cleaned or default


def as_number(value: Any) -> float | None:
    """A loggable scalar as a float (bools, ints, numpy and torch scalars), else None."""
    if isinstance(value, (int, float)):  # bool included
        return float(value)
    item = getattr(value, "item", None)  # numpy and torch scalars, one-element arrays
    if item is None:
        return None
    try:
        value = item()
    except (TypeError, ValueError, RuntimeError):  # an array of several values
        return None
    return float(value) if isinstance(value, (int, float)) else None


class Run:
    """One logged run. Use `opl.init()`, which also makes it the run of `opl.log()`."""

    def __init__(
        self,
        *,
        project: str | None = None,
        name: str | None = None,
        config: Any = None,
        group: str | None = None,
        tags: list[str] | None = None,
        notes: str = "",
        dir: str | Path | None = None,
        mode: str | None = None,
        url: str | None = None,
        token: str | None = None,
        resume: str | None = None,
        push_interval_s: float = 2.0,
        heartbeat_s: float = 30.0,
        heartbeat_timeout_s: int = 600,
        flush_timeout_s: float = 30.0,
        id: str | None = None,
        **wandb_only: Any,
    ):
        """`config`: a dict, argparse.Namespace, dataclass or OmegaConf config (nested sections kept).
        `id`: W&B's name for `resume` (the run's client id). W&B's other arguments (entity, job_type,
        reinit, settings, ...) are accepted and have no effect here."""
        mode = mode or os.environ.get("OPL_MODE") or "online"
        if mode not in MODES:
            raise ValueError(f"mode: one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode
        if resume in (True, False, "allow", "must", "never", "auto"):  # W&B's resume policies
            resume = None
        self.client_id = resume or id or os.environ.get("OPL_RESUME") or uuid.uuid4().hex
        if not re.fullmatch(r"[A-Za-z0-9_\-]{8,64}", self.client_id):
            raise ValueError(f"resume: 8-64 letters, digits, _ or -, got {self.client_id!r}")
        self.name = name or f"run-{time.strftime('%Y%m%d-%H%M%S')}"
        self.project = project or os.environ.get("OPL_PROJECT") or None
        self.config = Config(config_dict(config), on_change=self._config_changed)
        self.summary = Summary(on_change=self._summary_changed)
        self.meta = {
            "client_id": self.client_id,
            "project": project or os.environ.get("OPL_PROJECT") or None,
            "name": self.name,
            "group": group,
            "config": jsonable(self.config.as_dict()),
            "tags": list(tags or []),
            "notes": notes,
            "heartbeat_timeout_s": heartbeat_timeout_s,
        }
        self.dir = Path(dir or spool_root() / f"{time.strftime('%Y%m%d-%H%M%S')}-{self.client_id[:8]}")
        self.id: int | None = None
        self.url: str | None = None
        self.step = 0
        self._pending: dict[str, float] = {}
        self._keys_ok: set[str] = set()
        self._bad_keys: set = set()
        self.errors = 0  # calls or values the SDK could not record (logged as sdk/errors)
        self._logged_errors = 0
        self._errors_seen: set[str] = set()
        self._sample_index: dict[tuple[str, int], int] = {}
        self._lock = threading.RLock()  # a value logged as an update takes it again
        self._finished = False
        self._pusher: Pusher | None = None
        self._attached = False
        self._opener: threading.Thread | None = None
        self._stop_opening = threading.Event()
        self._wake = threading.Event()  # finish() asks the opener to try again at once
        self._finishing = False
        self._timing = {
            "push_interval_s": push_interval_s,
            "heartbeat_s": heartbeat_s,
            "flush_timeout_s": flush_timeout_s,
        }
        if mode == "disabled":
            self._spool = None
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        self._write_meta()
        self._spool = MetricSpool(self.dir)
        self._samples = open(self.dir / SAMPLES_SPOOL_NAME, "a", encoding="utf-8")
        self._updates = open(self.dir / UPDATES_SPOOL_NAME, "a", encoding="utf-8")
        if mode == "online":
            self._client = Client(url, token)
            self._open_or_retry()

    # --- the run on the dashboard ---------------------------------------------------------------
    def _open_or_retry(self) -> None:
        attached = _attached_run()
        if attached is not None:  # a job the lab launched: OPL_RUN_ID and its run token
            self._attached = True  # its state comes from its job, not from finish()
            self._start_pusher(*attached)
            return
        try:
            self._open()
        except OplError:
            raise  # a refusal (bad token, bad field): the caller must know now
        except OSError as exc:
            log.warning(
                "opl: the dashboard at %s cannot be reached (%s); logging to %s, opening the run later",
                self._client.settings.url,
                exc,
                self.dir,
            )
            self._opener = threading.Thread(target=self._open_later, name="opl-open", daemon=True)
            self._opener.start()

    def _open(self) -> None:
        answer = self._client.request("POST", "/api/v1/sdk/runs", body=_body(self.meta))
        self.id, self.url = answer["id"], answer["url"]
        self.meta.update(run_id=self.id, url=self.url)
        self._write_meta()
        self._start_pusher(answer["id"], answer["token"], answer.get("attempt", 1))

    def _open_later(self) -> None:
        delay = 2.0
        while True:
            self._wake.wait(delay)
            self._wake.clear()
            if self._stop_opening.is_set():
                return
            try:
                self._open()
                log.warning("opl: run %s opened at %s; the spool is being pushed", self.id, self.url)
                return
            except OplError as exc:
                log.error("opl: the dashboard refused to open the run: %s; the spool stays in %s", exc, self.dir)
                return
            except OSError:
                delay = 1.0 if self._finishing else min(60.0, delay * 2)

    def _start_pusher(self, run_id: int, token: str, attempt: int) -> None:
        self.id = int(run_id)
        settings = PushSettings(self._client.settings.url, str(run_id), token, attempt, **self._timing)
        pusher = Pusher(self.dir, settings, total_steps=0)
        pusher.step = self.step
        pusher.start()
        self._pusher = pusher

    def _write_meta(self) -> None:
        atomic_write_text(self.dir / RUN_FILE, json.dumps(self.meta, indent=1))

    # --- logging --------------------------------------------------------------------------------
    def log(self, data: dict, step: int | None = None, commit: bool | None = None, **_: Any) -> None:
        """Log scalars at `step` (default: the run's own counter, which each committed call without
        a step advances). Nested dicts become "a/b" keys. commit=False keeps the values for the next
        committed call, as wandb.log does. Never raises: a refused step, key or value is counted in
        the run's sdk/errors and named once on stderr."""
        if self._finished:
            self._error("log after finish", "opl: log() after finish(): these values are not recorded")
            return
        if self._spool is None:
            return
        try:
            self._log(data, step, commit)
        except Exception as exc:  # nothing the SDK does may stop training
            self._error(f"log {type(exc).__name__}", f"opl: log() failed and dropped its values: {exc!r}")

    def _log(self, data: dict, step: Any, commit: bool | None) -> None:
        if not isinstance(data, dict):
            self._error("log data", f"opl: log() takes a dict of values, got {type(data).__name__}; not recorded")
            return
        with self._lock:
            if step is not None:
                step = self._valid_step(step)
                if step is None:
                    return
                if step != self.step and self._pending:
                    self._write(self.step, self._pending)
                    self._pending = {}
                self.step = step
            for key, value in (flatten(data) if _nested(data) else data).items():
                if key not in self._keys_ok and not self._key_ok(key):
                    continue
                number = as_number(value)
                if number is None:
                    self._not_a_number(key, value)
                    continue
                self._pending[key] = number
            self.summary._logged(self._pending)
            if commit is False:
                return
            if self.errors != self._logged_errors:
                self._logged_errors = self.errors
                self._pending[ERRORS_KEY] = float(self.errors)
            if self._pending:
                self._write(self.step, self._pending)
                self._pending = {}
            if step is None:
                self.step += 1

    def _valid_step(self, step: Any) -> int | None:
        """The step as an int from 0 to 2^53-1 (ints, numpy and torch integers, whole floats), else
        None: the call's values are dropped, counted and the reason printed once."""
        value = step.item() if hasattr(step, "item") and not isinstance(step, (int, float)) else step
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self._error(
                "step type",
                f"opl: step must be a whole number, got {step!r}: this call's values are not recorded "
                "(round it yourself, e.g. step=int(x), if that is what you mean)",
            )
            return None
        if not 0 <= value <= MAX_STEP:
            self._error(
                "step range", f"opl: step must be from 0 to 2^53-1, got {value}; this call's values are not recorded"
            )
            return None
        return value

    def _key_ok(self, key: Any) -> bool:
        if isinstance(key, str) and key and not any(_control(c) for c in key):
            self._keys_ok.add(key)
            return True
        if key not in self._bad_keys:
            self._bad_keys.add(key)
            self._error(
                f"key {key!r}",
                f"opl: metric key {key!r} not recorded: keys are non-empty text without control characters",
            )
        else:
            self._count_error()
        return False

    def _error(self, kind: str, message: str) -> None:
        """Count an error (the run's sdk/errors metric) and print its message the first time."""
        self._count_error()
        if kind not in self._errors_seen:
            self._errors_seen.add(kind)
            log.warning(message)

    def _count_error(self) -> None:
        self.errors += 1

    def _not_a_number(self, key: str, value: Any) -> None:
        """A value that is no number: a Histogram, Table, list or array of numbers is recorded as
        what it is; a text goes to the run's summary; anything else is counted and named once."""
        if isinstance(value, (Histogram, Table)):
            self._update(value.update(key, self.step))
            return
        if isinstance(value, str):
            self.summary[key] = value
            return
        if isinstance(value, Media):
            kind = type(value).__name__
            self._error(f"media {kind}", f"opl: {key!r}: a {kind} is not recorded (opl records no media)")
            return
        if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
            try:
                self._update(Histogram(value).update(key, self.step))
                return
            except (TypeError, ValueError):
                pass
        self._error(
            f"value {key}",
            f"opl: {key!r}: a {type(value).__name__} is not a number; not recorded (this is said once a key)",
        )

    def _write(self, step: int, values: dict[str, float]) -> None:
        self._spool.log(step, values)
        if self._pusher is not None:
            self._pusher.step = step

    def log_samples(
        self, samples: list[dict], step: int | None = None, kind: str = "train", corrections: dict | None = None
    ) -> None:
        """Rollout samples in the contract of docs/SAMPLES.md: each needs "prompt", "response" and
        "reward"; kind, step, index and time are filled in when absent. A sample that breaks the
        contract is dropped, counted in sdk/errors and named once; the others are kept.

        Samples may also carry per-token log-probabilities of the trained policy (`logp`) and of the
        behaviour policy (`behav_logp`; `rollout_logp` for the engine's, where an option needs it)
        beside their `tokens` and `advantage`. Then `corrections` names the run's own loss, e.g.
        {"objective": "grpo", "eps_high": 0.28}, and the samples are marked, in numpy, with what
        that loss and every other correction does to each token (opl_client.marks)."""
        if self._finished:
            self._error("log_samples after finish", "opl: log_samples() after finish(): not recorded")
            return
        if self._spool is None:
            return
        try:
            if any(isinstance(sample, dict) and "logp" in sample for sample in samples):
                samples = with_correction_marks(samples, corrections)
            self._log_samples(samples, step, kind)
        except Exception as exc:
            self._error(f"log_samples {type(exc).__name__}", f"opl: log_samples() failed: {exc!r}")

    def _log_samples(self, samples: list[dict], step: Any, kind: str) -> None:
        with self._lock:
            step = self.step if step is None else self._valid_step(step)
            if step is None:
                return
            now = time.time()
            lines = []
            for i, sample in enumerate(samples):
                problem = _sample_problem(sample)
                if problem:
                    self._error(f"sample {problem}", f"opl: samples[{i}] not recorded: {problem} (docs/SAMPLES.md)")
                    continue
                line = {"kind": kind, "step": step, "time": now, **sample}
                at = (line["kind"], int(line["step"]))
                if "index" not in sample:
                    line["index"] = self._sample_index.get(at, 0)
                self._sample_index[at] = max(self._sample_index.get(at, 0), int(line["index"]) + 1)
                reward = as_number(line["reward"])
                line["reward"] = None if reward is None or not math.isfinite(reward) else reward
                lines.append(json.dumps(line, default=_plain) + "\n")
            self._samples.write("".join(lines))
            self._samples.flush()

    # --- run updates: config, summary, metric definitions, alerts --------------------------------
    def _update(self, body: dict) -> None:
        """Spool one update for `POST /api/v1/runs/<id>/updates`; never raises."""
        if self._spool is None:
            return
        if self._finished:
            self._error(f"{body['kind']} after finish", f"opl: {body['kind']} after finish(): not recorded")
            return
        try:
            line = json.dumps(jsonable(body)) + "\n"
            with self._lock:
                self._updates.write(line)
                self._updates.flush()
        except Exception as exc:
            self._error(f"update {type(exc).__name__}", f"opl: a {body.get('kind')} update failed: {exc!r}")

    def _config_changed(self, changed: dict) -> None:
        self.meta["config"] = _merged(self.meta.get("config") or {}, jsonable(changed))
        if self._spool is not None and not self._finished:
            self._write_meta()
        self._update({"kind": "config", "config": changed})

    def _summary_changed(self, changed: dict) -> None:
        self._update({"kind": "summary", "summary": changed})

    def define_metric(self, name: str, step_metric: str | None = None, summary: str | None = None, **_: Any) -> None:
        """W&B's define_metric: `step_metric` names the metric this one is charted against;
        `summary` ("max", "min", "mean" or "last"; W&B's "best" and lists take their first) is what
        the run's summary keeps for it."""
        chosen = None
        for part in str(summary or "").split(","):
            part = part.strip().lower()
            if part in ("max", "min", "mean", "last"):
                chosen = part
                break
        if summary and chosen is None:
            self._error("define_metric summary", f"opl: define_metric summary={summary!r}: max, min, mean or last")
        self._update({"kind": "define_metric", "name": name, "step_metric": step_metric, "summary": chosen})

    def alert(self, title: str, text: str = "", level: Any = None, wait_duration: Any = None, **_: Any) -> None:
        """An alert on the run (GET /api/v1/runs/<id>/alerts), as wandb.alert raises one."""
        title = str(title).strip() or "alert"
        body = {"kind": "alert", "title": title[:200], "text": str(text)[:4000], "level": alert_level(level)}
        self._update(body)

    def watch(self, *_: Any, **__: Any) -> None:
        """Accepted for W&B scripts; records nothing (no gradients or parameters are uploaded)."""
        self._note("watch", "opl: watch() is accepted and records nothing (no gradients or parameters)")

    def unwatch(self, *_: Any, **__: Any) -> None:
        return None

    def save(self, glob_str: str | None = None, base_path: str | None = None, policy: str = "live", **_: Any) -> list:
        """Records where the file is (summary "files/<name>"); opl uploads no files."""
        if glob_str:
            self._note("save", "opl: save() records the file's path in the summary; the file is not uploaded")
            self.summary[f"files/{Path(str(glob_str)).name}"] = os.path.abspath(str(glob_str))
        return []

    def log_artifact(self, artifact: Any, name: str | None = None, type: str | None = None, **_: Any) -> Any:
        """Records where the artifact is (summary "artifacts/<name>"); opl uploads no files."""
        self._note("artifact", "opl: log_artifact() records the artifact's path in the summary; nothing is uploaded")
        label, where = artifact_reference(artifact, name)
        self.summary[f"artifacts/{label}"] = where
        return artifact

    def use_artifact(self, *_: Any, **__: Any) -> Any:
        raise NotImplementedError(
            "opl stores no artifacts to download: read the files from their path (run.summary['artifacts/<name>'])"
        )

    def _note(self, kind: str, message: str) -> None:
        if kind not in self._errors_seen:
            self._errors_seen.add(kind)
            log.warning(message)

    # --- the end --------------------------------------------------------------------------------
    def finish(self, exit_code: int = 0, quiet: bool | None = None) -> None:
        """Push what is left (waiting at most flush_timeout_s), then mark the run succeeded (exit
        code 0) or failed. What could not be pushed stays in the spool for `opl sync`."""
        if self._finished:
            return
        self._finished = True
        _forget(self)
        if self._spool is None:
            return
        with self._lock:
            if self._pending:
                self._write(self.step, self._pending)
                self._pending = {}
        self._spool.close()
        self._samples.close()
        self._updates.close()
        self.meta["exit_code"] = int(exit_code)
        self._write_meta()
        if self.mode == "offline":  # the spool is out of sight, in the user's data folder by default
            log.warning("opl: run logged offline in %s; `opl sync %s` uploads it", self.dir, self.dir)
        if self._opener is not None and self._opener.is_alive():  # the dashboard was down at init
            self._finishing = True
            self._wake.set()
            self._opener.join(timeout=self._timing["flush_timeout_s"])
        self._stop_opening.set()
        self._wake.set()
        if self._pusher is None:
            if self.mode == "online":
                log.warning("opl: the dashboard never answered; `opl sync %s` uploads this run", self.dir)
            return
        self._pusher.close()
        if not self._attached:
            self._send_finish(exit_code)
        self._client.close()

    def _send_finish(self, exit_code: int) -> None:
        if pending_bytes(self.dir) == 0:
            try:
                self._client.request(
                    "POST",
                    f"/api/v1/sdk/runs/{self.id}/finish",
                    body={"exit_code": int(exit_code)},
                    token=self._pusher.cfg.token,
                )
                self.meta["finish_sent"] = True
                self._write_meta()
            except (OplError, OSError) as exc:
                log.warning(
                    "opl: run %s could not be marked finished (%s); `opl sync %s` does it", self.id, exc, self.dir
                )
        else:
            log.warning(
                "opl: some of run %s's points are not on the dashboard yet; `opl sync %s` sends them", self.id, self.dir
            )

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        self.finish(exit_code=0 if kind is None else 1)


def spool_root() -> Path:
    """The folder that holds a run's spool unless `dir=` names one: OPL_DIR, else the user's data
    folder as XDG names it ($XDG_DATA_HOME/opl/runs, by default ~/.local/share/opl/runs). Never the
    working directory, which may be a checkout, a shared folder or a package's source."""
    if os.environ.get("OPL_DIR"):
        return Path(os.environ["OPL_DIR"])
    data = os.environ.get("XDG_DATA_HOME", "")
    if not os.path.isabs(data):  # the XDG spec: a relative value is ignored
        data = Path.home() / ".local" / "share"
    return Path(data) / "opl" / "runs"


def pending_bytes(run_dir: Path) -> int:
    """Spool bytes the dashboard has not acknowledged, metrics and samples together."""
    total = 0
    for spool, offset in (
        (SPOOL_NAME, OFFSET_NAME),
        (SAMPLES_SPOOL_NAME, SAMPLES_OFFSET_NAME),
        (UPDATES_SPOOL_NAME, UPDATES_OFFSET_NAME),
    ):
        path = Path(run_dir) / spool
        if path.exists():
            total += path.stat().st_size - read_offset(run_dir, offset)[0]
    return total


def _attached_run() -> tuple[int, str, int] | None:
    run_id, token = os.environ.get("OPL_RUN_ID"), os.environ.get("OPL_TOKEN") or os.environ.get("OPL_RUN_TOKEN")
    if run_id and token and token.startswith("oplrun_"):
        return int(run_id), token, int(os.environ.get("OPL_ATTEMPT") or 1)
    return None


TOKEN_LOGPROB_FIELDS = ("logp", "behav_logp", "rollout_logp")


def with_correction_marks(samples: list, corrections: dict | None) -> list:
    """The samples with their correction fields computed from their per-token log-probabilities
    (log_ratio, variant, masked/clipped/reweighted, counterfactual), and the log-probabilities
    themselves left out: the dashboard stores the marks, not the raw values."""
    from opl_client.marks import samples_marks  # numpy, only for runs that log per-token log-probs

    if not corrections or "objective" not in corrections:
        raise ValueError('samples carry logp: pass corrections={"objective": ...} naming the run\'s own loss')
    marked = [i for i, sample in enumerate(samples) if isinstance(sample, dict) and "logp" in sample]
    missing = [i for i in marked if "behav_logp" not in samples[i]]
    if missing:
        raise ValueError(f"samples[{missing[0]}].behav_logp: required beside logp")
    engine = all("rollout_logp" in samples[i] for i in marked)
    params = {k: v for k, v in corrections.items() if k != "objective"}
    fields = samples_marks(
        corrections["objective"],
        [_floats(samples[i]["logp"]) for i in marked],
        [_floats(samples[i]["behav_logp"]) for i in marked],
        [float(samples[i].get("advantage", 0.0)) for i in marked],
        rollout_logp=[_floats(samples[i]["rollout_logp"]) for i in marked] if engine else None,
        **params,
    )
    out = list(samples)
    for i, computed in zip(marked, fields, strict=True):
        kept = {k: v for k, v in samples[i].items() if k not in TOKEN_LOGPROB_FIELDS}
        out[i] = {**kept, **computed}
    return out


def _floats(values) -> list[float]:
    return [float(v) for v in (values.tolist() if hasattr(values, "tolist") else values)]


def _sample_problem(sample: Any) -> str | None:
    if not isinstance(sample, dict):
        return f"a dict expected, got {type(sample).__name__}"
    unknown = set(sample) - SAMPLE_FIELDS
    if unknown:
        return f"unknown fields {sorted(unknown)}"
    missing = [field for field in ("prompt", "response", "reward") if field not in sample]
    return f"{', '.join(missing)} required" if missing else None


def _control(char: str) -> bool:
    return unicodedata.category(char) == "Cc" or char in BIDI_CONTROLS


def _nested(data: dict) -> bool:
    return any(isinstance(v, dict) for v in data.values())


def _plain(value: Any):
    """json.dumps' fallback for numpy and torch values in samples."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _merged(base: dict, changes: dict) -> dict:
    """`changes` merged into `base` section by section (a config update changes what it names)."""
    out = dict(base)
    for key, value in changes.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _body(meta: dict) -> dict:
    keys = ("client_id", "project", "name", "group", "config", "tags", "notes", "heartbeat_timeout_s")
    return {k: meta[k] for k in keys if meta.get(k) not in (None, "")} | {"config": meta.get("config") or {}}


# --- the module-level run of `opl.log()` -------------------------------------------------------------

_current: Run | None = None
_last: Run | None = None  # the run opl.log() reaches after finish(): it counts and names the late call
_exit_code = 0


def init(**kwargs: Any) -> Run:
    """Open a run and make it the one `opl.log()` writes to; see Run for the arguments."""
    global _current, _last
    if _current is not None:
        _current.finish()
    _current = _last = Run(**kwargs)
    return _current


def current() -> Run:
    run = _current or _last
    if run is None:
        raise RuntimeError("opl.init() first: no run is open")
    return run


def _forget(run: Run) -> None:
    global _current
    if _current is run:
        _current = None


def _excepthook(kind, value, traceback) -> None:
    global _exit_code
    _exit_code = 1
    _previous_excepthook(kind, value, traceback)


def _finish_at_exit() -> None:
    if _current is not None:
        _current.finish(exit_code=_exit_code)


def _exit(code: object = None) -> None:
    """sys.exit, noting its code for the run still open at exit (as W&B's exit hook does)."""
    global _exit_code
    _exit_code = 0 if code is None else code if isinstance(code, int) else 1
    _previous_exit(code)


_previous_excepthook = sys.excepthook
sys.excepthook = _excepthook
_previous_exit = sys.exit
sys.exit = _exit
atexit.register(_finish_at_exit)
