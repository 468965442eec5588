"""Shared by the samples tests: spool-shaped samples (docs/SAMPLES.md) and posting them."""
import gzip
import json

T0 = 1764400000.0


def sample(step: int, index: int, *, kind: str = "train", prompt: str | None = None, tokens=None, log_ratio=None,
           masked=(), clipped=(), reward: float = 1.0, correct=None, **extra) -> dict:
    tokens = list(tokens) if tokens is not None else ([" The", " answer", " is", " 4", "."] if kind == "train" else [])
    if log_ratio is None:
        log_ratio = [round(0.01 * (i + 1) * (-1) ** i, 4) for i in range(len(tokens))]
    return {
        "kind": kind, "step": step, "index": index, "eval_set": "gsm8k" if kind == "eval" else None,
        "prompt": prompt if prompt is not None else f"What is {index} + {step}?",
        "response": "".join(tokens) or "The answer is 4.", "reference": "4", "reward": reward,
        "correct": correct if correct is not None else (reward is not None and reward >= 1), "policy_version": max(0, step - 2),
        "staleness": 2, "objective": "m2po", "tokens": tokens, "log_ratio": list(log_ratio),
        "clipped": list(clipped), "masked": list(masked), "truncated": False, "time": T0 + step, **extra,
    }


def batch(samples, attempt=1) -> dict:
    return {"attempt": attempt, "samples": samples}


def post(client, run_id, token, body, *, gzipped=False):
    data = json.dumps(body).encode() if not isinstance(body, bytes) else body
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    if gzipped:
        data, headers = gzip.compress(data), {**headers, "HTTP_CONTENT_ENCODING": "gzip"}
    return client.post(f"/api/v1/runs/{run_id}/samples", data=data, content_type="application/json", **headers)
