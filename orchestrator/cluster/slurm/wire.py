"""Wire-format adapters: one per slurmrestd API family.

v0.0.38 (Slurm 22.05-23.11) and v0.0.40-v0.0.42 (Slurm 23.11-25.x) differ in almost
every field that matters to us (see docs in reference/slurm/NOTES.md): environment as
object vs list, gres vs tres_per_node, plain ints vs {"set","infinite","number"},
job_state as string vs list, exit_code as raw wait status vs a struct.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from .schemas import JobInfo, JobRequest, NodeInfo, PartitionInfo, PingInfo

SUPPORTED_VERSIONS = ("v0.0.38", "v0.0.40", "v0.0.41", "v0.0.42")


def version_number(api_version: str) -> int:
    """'v0.0.38' -> 38."""
    m = re.fullmatch(r"v0\.0\.(\d+)", api_version)
    if not m:
        raise ValueError(f"not a slurmrestd API version: {api_version!r}")
    return int(m.group(1))


def unwrap_number(value: Any) -> int | None:
    """int, None, or v0.0.40+'s {"set", "infinite", "number"} -> int or None (unset/infinite)."""
    if isinstance(value, dict):
        if value.get("set") and not value.get("infinite"):
            return value.get("number")
        return None
    if isinstance(value, bool):
        return None
    return value


def _timestamp(value: Any) -> datetime | None:
    n = unwrap_number(value)
    return datetime.fromtimestamp(n, tz=UTC) if n else None  # 0 means "not yet"


def gpu_count(gres: str | None) -> int:
    """GPUs in a gres string such as 'gpu:a100:4', 'gpu:2(S:0),shard:8' or
    'gpu:a100:1(IDX:0)'; 0 when there are none."""
    total = 0
    for entry in re.sub(r"\([^)]*\)", "", gres or "").split(","):
        parts = entry.strip().split(":")
        if parts[0] in ("gpu", "gres/gpu") and len(parts) >= 2 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def error_list(body: Any) -> list[tuple[int | None, str]]:
    """(code, message) for each entry of body["errors"]; entries come as
    {"error_code", "error"}, {"error_number", "error", "description"} or {"errno", "error"}
    depending on the call."""
    out: list[tuple[int | None, str]] = []
    if not isinstance(body, dict):
        return out
    for e in body.get("errors") or []:
        if not isinstance(e, dict):
            out.append((None, str(e)))
            continue
        code = next((e[k] for k in ("error_number", "error_code", "errno") if k in e), None)
        words = [w for w in (e.get("error"), e.get("description")) if w]
        # "description" often repeats "error" with the job id added: keep the longer one
        message = max(words, key=len) if words else "unknown error"
        out.append((code if isinstance(code, int) else None, message))
    return out


def status_errors(body: Any) -> list[tuple[int | None, str]]:
    """Per-job errors of a v0.0.40+ DELETE (signal/cancel), which answers 200 regardless."""
    out: list[tuple[int | None, str]] = []
    if not isinstance(body, dict):
        return out
    for s in body.get("status") or []:
        err = (s or {}).get("error") or {}
        if err.get("code"):
            out.append((err["code"], err.get("message") or err.get("string") or "error"))
    return out


class WireFormat:
    """Shared parts; subclasses hold the differences."""

    def __init__(self, api_version: str):
        self.api_version = api_version
        self.number = version_number(api_version)

    def path(self, endpoint: str) -> str:
        return f"/slurm/{self.api_version}/{endpoint}"

    # -- requests
    def number_field(self, n: int) -> Any:
        raise NotImplementedError

    def environment_field(self, env: dict[str, str]) -> Any:
        raise NotImplementedError

    def gpu_fields(self, gpus: int, gpu_type: str) -> dict[str, Any]:
        raise NotImplementedError

    def node_fields(self, nodes: int) -> dict[str, Any]:
        return {"minimum_nodes": nodes, "maximum_nodes": nodes}

    def submit_body(self, req: JobRequest) -> dict[str, Any]:
        job: dict[str, Any] = {
            "name": req.name,
            "current_working_directory": req.working_directory,
            # slurmctld refuses a batch job without an environment
            "environment": self.environment_field(req.environment),
            "standard_output": req.standard_output,
            "standard_error": req.standard_error,
            "tasks": req.nodes * req.tasks_per_node,
            "cpus_per_task": req.cpus_per_task,
            "requeue": req.requeue,
        }
        if req.comment:
            job["comment"] = req.comment
        for key in ("partition", "account", "qos", "container"):
            if getattr(req, key):
                job[key] = getattr(req, key)
        if req.gpus:
            job.update(self.gpu_fields(req.gpus, req.gpu_type))
        if req.nodes > 1:
            job.update(self.node_fields(req.nodes))
        if req.nodes > 1 or req.tasks_per_node > 1:
            job["tasks_per_node"] = req.tasks_per_node
        if req.memory_mb is not None:
            job["memory_per_node"] = self.number_field(req.memory_mb)
        if req.time_limit_min is not None:
            job["time_limit"] = self.number_field(req.time_limit_min)
        if req.hold:
            job["hold"] = True
        return self.place_script(job, req.script)

    def place_script(self, job: dict[str, Any], script: str) -> dict[str, Any]:
        return {"script": script, "job": job}

    def update_body(
        self,
        *,
        hold: bool | None = None,
        priority: int | None = None,
        comment: str | None = None,
        time_limit_min: int | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if hold is not None:
            body["hold"] = hold
        if priority is not None:
            body["priority"] = self.number_field(priority)
        if comment is not None:
            body["comment"] = comment
        if time_limit_min is not None:
            body["time_limit"] = self.number_field(time_limit_min)
        return body

    # -- responses
    def job_state(self, raw: Any) -> tuple[str, list[str]]:
        raise NotImplementedError

    def exit_status(self, raw: Any) -> tuple[int | None, int | None]:
        raise NotImplementedError

    def parse_job(self, j: dict[str, Any]) -> JobInfo:
        state, flags = self.job_state(j.get("job_state"))
        exit_code, signal = self.exit_status(j.get("exit_code"))
        if not j.get("nodes") and state not in ("RUNNING", "SUSPENDED"):
            # never ran (e.g. refused at submit: BadConstraints): slurmctld's code is no wait status
            exit_code, signal = None, None
        return JobInfo(
            job_id=str(j.get("job_id")),
            name=j.get("name") or "",
            user=j.get("user_name") or "",
            state=state,
            state_flags=flags,
            reason=j.get("state_reason") or "",
            exit_code=exit_code,
            signal=signal,
            submit_time=_timestamp(j.get("submit_time")),
            start_time=_timestamp(j.get("start_time")),
            end_time=_timestamp(j.get("end_time")),
            nodes=j.get("nodes") or "",
            partition=j.get("partition") or "",
            comment=j.get("comment") or "",
            standard_output=j.get("standard_output") or "",
            standard_error=j.get("standard_error") or "",
            gres_detail=list(j.get("gres_detail") or []),
            priority=unwrap_number(j.get("priority")),
            time_limit_min=unwrap_number(j.get("time_limit")),
            restart_count=unwrap_number(j.get("restart_cnt")) or 0,
        )

    def parse_ping(self, p: dict[str, Any]) -> PingInfo:
        raise NotImplementedError

    def accounting_path(self, endpoint: str) -> str:
        return f"/slurmdb/{self.api_version}/{endpoint}"

    def parse_accounting_job(self, j: dict[str, Any]) -> JobInfo:
        """A job record from slurmdbd (/slurmdb/vX/job/{id}): kept after slurmctld forgets it."""
        st = j.get("state") or {}
        state, flags = self.job_state(st.get("current"))
        ec = j.get("exit_code") or {}
        if isinstance(ec, dict) and not isinstance(ec.get("return_code"), dict):
            # v0.0.38 shape {"status": "SUCCESS", "return_code": N}. Slurm 22.05 reports
            # 0 here even for a job that exited 3 (a 22.05 bug), so FAILED keeps no code.
            exit_code = ec.get("return_code") if state != "FAILED" else None
            signal = None
        else:
            exit_code, signal = self.exit_status(ec)
        t = j.get("time") or {}
        comment = j.get("comment")
        return JobInfo(
            job_id=str(j.get("job_id")),
            name=j.get("name") or "",
            user=j.get("user") or "",
            state=state,
            state_flags=flags,
            reason=st.get("reason") or "",
            exit_code=exit_code,
            signal=signal,
            submit_time=_timestamp(t.get("submission")),
            start_time=_timestamp(t.get("start")),
            end_time=_timestamp(t.get("end")),
            nodes=j.get("nodes") or "",
            partition=j.get("partition") or "",
            comment=(comment.get("job") or "") if isinstance(comment, dict) else (comment or ""),
            time_limit_min=unwrap_number(t.get("limit")),
        )

    def parse_node(self, n: dict[str, Any]) -> NodeInfo:
        state = n.get("state")
        if isinstance(state, list):
            state = "+".join(state)
        return NodeInfo(
            name=n.get("name") or "",
            state=str(state or "").upper(),
            reason=n.get("reason") or "",
            cpus=unwrap_number(n.get("cpus")) or 0,
            cpus_allocated=unwrap_number(n.get("alloc_cpus")) or 0,
            memory_mb=unwrap_number(n.get("real_memory")) or 0,
            gpus=gpu_count(n.get("gres")),
            gpus_used=gpu_count(n.get("gres_used")),
            partitions=list(n.get("partitions") or []),
        )

    def parse_partition(self, p: dict[str, Any]) -> PartitionInfo:
        raise NotImplementedError


class WireV0038(WireFormat):
    """Slurm 22.05-23.11."""

    def number_field(self, n: int) -> Any:
        return n

    def environment_field(self, env: dict[str, str]) -> Any:
        return dict(env)

    def node_fields(self, nodes: int) -> dict[str, Any]:
        return {"nodes": [nodes, nodes]}  # v0.0.38: [min, max]

    def gpu_fields(self, gpus: int, gpu_type: str) -> dict[str, Any]:
        return {"gres": f"gpu:{gpu_type}:{gpus}" if gpu_type else f"gpu:{gpus}"}

    def job_state(self, raw: Any) -> tuple[str, list[str]]:
        state = str(raw or "UNKNOWN")
        # v0.0.38 reports some flags in place of the base state
        if state in ("COMPLETING", "CONFIGURING", "REQUEUED", "RESIZING", "SIGNALING", "STAGE_OUT"):
            return "RUNNING" if state != "REQUEUED" else "PENDING", [state]
        return state, []

    def exit_status(self, raw: Any) -> tuple[int | None, int | None]:
        if not isinstance(raw, int):
            return None, None
        # a raw wait(2) status: 768 = exited 3, 15 = killed by SIGTERM
        signal = raw & 0x7F
        if signal:
            return None, signal
        return (raw >> 8) & 0xFF, None

    def parse_ping(self, p: dict[str, Any]) -> PingInfo:
        return PingInfo(hostname=p.get("hostname") or "", up=p.get("ping") == "UP", mode=p.get("mode") or "")

    def parse_partition(self, p: dict[str, Any]) -> PartitionInfo:
        return PartitionInfo(
            name=p.get("name") or "",
            state=str(p.get("state") or ""),
            nodes=p.get("nodes") or "",
            total_cpus=p.get("total_cpus") or 0,
            total_nodes=p.get("total_nodes") or 0,
            is_default="default" in (p.get("flags") or []),
        )


class WireV0040(WireFormat):
    """Slurm 23.11-25.x: v0.0.40, v0.0.41, v0.0.42."""

    def number_field(self, n: int) -> Any:
        return {"set": True, "infinite": False, "number": n}

    def environment_field(self, env: dict[str, str]) -> Any:
        return [f"{k}={v}" for k, v in env.items()]

    def gpu_fields(self, gpus: int, gpu_type: str) -> dict[str, Any]:
        return {"tres_per_node": f"gres/gpu:{gpu_type}:{gpus}" if gpu_type else f"gres/gpu:{gpus}"}

    def place_script(self, job: dict[str, Any], script: str) -> dict[str, Any]:
        if self.number <= 40:
            return {"script": script, "job": job}
        # v0.0.41+: the top-level "script" is deprecated
        return {"job": {**job, "script": script}}

    def job_state(self, raw: Any) -> tuple[str, list[str]]:
        states = [str(s) for s in raw] if isinstance(raw, list) else [str(raw or "UNKNOWN")]
        base = next((s for s in states if s in BASE_STATES), None)
        flags = [s for s in states if s != base]
        return base or (states[0] if states else "UNKNOWN"), flags

    def exit_status(self, raw: Any) -> tuple[int | None, int | None]:
        if not isinstance(raw, dict):
            return None, None
        signal = unwrap_number((raw.get("signal") or {}).get("id"))
        code = unwrap_number(raw.get("return_code"))
        return (None if signal else code), (signal or None)

    def parse_ping(self, p: dict[str, Any]) -> PingInfo:
        up = p.get("pinged") == "UP" and p.get("responding", True)
        return PingInfo(hostname=p.get("hostname") or "", up=bool(up), mode=p.get("mode") or "")

    def parse_partition(self, p: dict[str, Any]) -> PartitionInfo:
        state = (p.get("partition") or {}).get("state") or []
        return PartitionInfo(
            name=p.get("name") or "",
            state="+".join(state) if isinstance(state, list) else str(state),
            nodes=(p.get("nodes") or {}).get("configured") or "",
            total_cpus=(p.get("cpus") or {}).get("total") or 0,
            total_nodes=(p.get("nodes") or {}).get("total") or 0,
            # 24.11 does not report which partition is the default
            is_default=False,
        )


# Base job states (job_state_string in Slurm); anything else in the list is a flag.
BASE_STATES = {
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
}


def wire_for(api_version: str) -> WireFormat:
    n = version_number(api_version)
    if n == 38:
        return WireV0038(api_version)
    if 40 <= n <= 42:
        return WireV0040(api_version)
    raise ValueError(f"slurmrestd API {api_version} is not supported; supported: {', '.join(SUPPORTED_VERSIONS)}")
