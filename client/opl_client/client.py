"""The API calls, over the client's one HTTP client (opl_client.http: the standard library, one
kept-alive connection). Each method is one request (runs(all=True) follows pages)."""

from __future__ import annotations

import math
import time
import urllib.parse
from pathlib import Path
from typing import Any

from opl_client.config import Settings, load_settings
from opl_client.http import HttpClient
from opl_client.specs import experiment_spec

SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
TERMINAL = ("succeeded", "failed", "cancelled", "lost")


class OplError(Exception):
    """An answer >= 400, or a redirect not followed: `status`, the server's `message` and its
    per-field `errors`."""

    def __init__(self, status: int, message: str, errors: list[dict] | None = None):
        self.status, self.message, self.errors = status, message, errors or []
        detail = "; ".join(f"{e.get('field')}: {e.get('message')}" for e in self.errors)
        super().__init__(f"HTTP {status}: {message}" + (f" ({detail})" if detail and detail not in message else ""))


class Client:
    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0):
        self.settings: Settings = load_settings(url, token)
        self.timeout = timeout
        self._http = HttpClient({"Accept": "application/json"})

    def close(self) -> None:
        """Close the kept-alive connection (the next request opens another)."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- transport ------------------------------------------------------------------------
    def request(
        self, method: str, path: str, params: dict | list | None = None, body: Any = None, token: str | None = None
    ) -> Any:
        """`token` replaces the settings' token for this request (a run's own token). An answer
        >= 300 raises OplError (GET follows redirects first); the network's errors are OSErrors."""
        headers = {}
        if token or self.settings.token:
            headers["Authorization"] = f"Bearer {token or self.settings.token}"
        answer = self._http.request(
            method, f"{self.settings.url}{path}", params=params, json=body, headers=headers, timeout=self.timeout
        )
        if answer.status_code < 300:
            return answer.json()
        try:
            payload = answer.json()
        except ValueError:
            payload = None
        payload = payload if isinstance(payload, dict) else {}
        message = payload.get("error") or answer.reason
        if 300 <= answer.status_code < 400 and answer.headers.get("Location"):
            message += f" (to {answer.headers.get('Location')})"
        raise OplError(answer.status_code, message, payload.get("errors"))

    # --- experiments ----------------------------------------------------------------------
    def submit(self, spec: dict | str | Path, **overrides: Any) -> dict:
        """Queue an experiment from a dict or a YAML file (an experiment file or a plain run
        config); keyword arguments override its fields (project=..., seeds=...).
        Returns {"id": experiment id, "runs": [run ids]}."""
        return self.request("POST", "/api/v1/experiments", body=experiment_spec(spec, **overrides))

    def preview(self, spec: dict | str | Path, **overrides: Any) -> dict:
        """What submit would queue, without queuing: {"count", "runs": [{"name", "values", "seed"}]}."""
        return self.request("POST", "/api/v1/experiments/preview", body=experiment_spec(spec, **overrides))

    def experiment(self, experiment_id: int) -> dict:
        return self.request("GET", f"/api/v1/experiments/{experiment_id}")

    # --- runs -----------------------------------------------------------------------------
    def runs(
        self,
        query: str = "",
        *,
        state: str = "",
        experiment: int | None = None,
        sort: str = "-id",
        per_page: int = 100,
        all: bool = True,
    ) -> list[dict]:
        """Runs matching the filter language (e.g. "staleness.k >= 4 and state = running"),
        every page unless all=False."""
        params = {
            k: v
            for k, v in {
                "q": query,
                "state": state,
                "experiment": experiment,
                "sort": sort,
                "per_page": per_page,
            }.items()
            if v not in ("", None)
        }
        out, page = [], 1
        while True:
            answer = self.request("GET", "/api/v1/runs", {**params, "page": page})
            out += answer["runs"]
            if not all or page >= answer["pages"]:
                return out
            page += 1

    def run(self, run_id: int) -> dict:
        return self.request("GET", f"/api/v1/runs/{run_id}")

    def cancel(self, run_id: int) -> dict:
        """Cancel a run: a queued one at once, an active one through the cluster. The run's dict."""
        return self.request("POST", f"/api/v1/runs/{run_id}/cancel")

    def wait(self, run_ids: list[int], *, timeout: float = 3600, poll: float = 2.0) -> list[dict]:
        """Block until every run is succeeded, failed, cancelled or lost; their dicts."""
        deadline = time.monotonic() + timeout
        while True:
            runs = [self.run(rid) for rid in run_ids]
            if all(r["state"] in TERMINAL for r in runs):
                return runs
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"runs not finished after {timeout:.0f} s: "
                    + ", ".join(f"{r['id']} {r['state']}" for r in runs if r["state"] not in TERMINAL)
                )
            time.sleep(poll)

    # --- metrics --------------------------------------------------------------------------
    def metric_keys(self, run_id: int) -> list[str]:
        return self.request("GET", f"/api/v1/runs/{run_id}/metrics/keys")["keys"]

    def metrics(
        self,
        run_id: int,
        keys: str | list[str],
        *,
        start: int | None = None,
        end: int | None = None,
        max_points: int | None = None,
    ) -> dict[str, list[tuple[int, float]]]:
        """{key: [(step, value), ...]}; step is the optimizer update. A key the run does not
        have raises OplError 404, whose message names the keys it has."""
        keys = [keys] if isinstance(keys, str) else list(keys)
        params = [("key", k) for k in keys] + [
            (k, v) for k, v in (("start", start), ("end", end), ("max_points", max_points)) if v is not None
        ]
        answer = self.request("GET", f"/api/v1/runs/{run_id}/metrics", params)
        return {s["key"]: [(step, SPECIAL.get(v, v)) for step, v in s["points"]] for s in answer["series"]}

    # --- saved views ----------------------------------------------------------------------
    def views(self, project: str) -> list[dict]:
        """The project's saved chart views, summarised: [{"id", "name", "owner", "page", "default", "panels",
        "updated_at"}]; view(id) gives one with its state."""
        return self.request("GET", f"/api/v1/projects/{urllib.parse.quote(project)}/views")["views"]

    def view(self, view_id: int) -> dict:
        return self.request("GET", f"/api/v1/views/{int(view_id)}")

    def view_create(
        self, project: str, name: str, *, state: dict | None = None, page: str = "", default: bool = False
    ) -> dict:
        body = {"name": name, "page": page, "default": default, **({"state": state} if state is not None else {})}
        return self.request("POST", f"/api/v1/projects/{urllib.parse.quote(project)}/views", body=body)

    def view_update(
        self, view_id: int, *, name: str | None = None, state: dict | None = None, default: bool | None = None
    ) -> dict:
        body = {k: v for k, v in {"name": name, "state": state, "default": default}.items() if v is not None}
        return self.request("PATCH", f"/api/v1/views/{int(view_id)}", body=body)

    def view_delete(self, view_id: int) -> None:
        self.request("DELETE", f"/api/v1/views/{int(view_id)}")

    def view_url(self, view_id: int) -> str:
        """The link that opens the page the view was saved from, with the view applied."""
        return f"{self.settings.url}/views/{int(view_id)}/"

    # --- launchers ------------------------------------------------------------------------
    def launchers(self) -> list[dict]:
        """The launchers the lab enabled: [{"name", "description", "command", "parameters", "resources"}]."""
        return self.request("GET", "/api/v1/launchers")["launchers"]

    def launcher_run(
        self,
        launcher: str,
        params: dict[str, Any] | None = None,
        *,
        name: str = "",
        project: str | None = None,
        priority: int = 0,
        tags: list[str] | None = None,
        notes: str = "",
    ) -> dict:
        """Queue a run of a launcher; values may be strings (the server types them as the form
        does). A bad one raises OplError 400 naming params.<name>. Returns {"id", "experiment", "launcher"}."""
        body = {
            "params": params or {},
            "name": name,
            "priority": priority,
            "tags": tags or [],
            "notes": notes,
            **({"project": project} if project else {}),
        }
        return self.request("POST", f"/api/v1/launchers/{urllib.parse.quote(launcher)}/runs", body=body)

    # --- rollout samples ------------------------------------------------------------------
    def samples(
        self,
        run_id: int,
        step: int | None = None,
        *,
        kind: str | None = None,
        verdict: str = "all",
        sort: str = "index",
    ) -> dict:
        """One recorded step's rollout samples and the run's recorded steps:
        {"run", "kind", "steps": [{"step", "n", "masked", "clipped"}] newest first, "step",
        "samples": [{"prompt", "response", "reference", "reward", "correct", "staleness",
        "policy_version", "tokens", "log_ratio", "masked", "clipped", "n_masked", ...}]}.
        The newest recorded step unless `step`; kind "train" (or "eval" when the run has only
        eval samples) unless given; verdict "all" | "right" | "wrong"; sort "index" | "ratio" |
        "masked" | "clipped" | "reward". A step that was not recorded raises OplError 400."""
        params = {
            k: v
            for k, v in {"kind": kind, "step": step, "verdict": verdict, "sort": sort}.items()
            if v not in (None, "")
        }
        return self.request("GET", f"/api/v1/runs/{run_id}/samples", params)
