"""Shared by the samples tests: spool-shaped samples (docs/SAMPLES.md) and posting them."""

import gzip
import json

T0 = 1764400000.0


def sample(
    step: int,
    index: int,
    *,
    kind: str = "train",
    prompt: str | None = None,
    tokens=None,
    log_ratio=None,
    masked=(),
    clipped=(),
    reward: float = 1.0,
    correct=None,
    **extra,
) -> dict:
    tokens = list(tokens) if tokens is not None else ([" The", " answer", " is", " 4", "."] if kind == "train" else [])
    if log_ratio is None:
        log_ratio = [round(0.01 * (i + 1) * (-1) ** i, 4) for i in range(len(tokens))]
    return {
        "kind": kind,
        "step": step,
        "index": index,
        "eval_set": "gsm8k" if kind == "eval" else None,
        "prompt": prompt if prompt is not None else f"What is {index} + {step}?",
        "response": "".join(tokens) or "The answer is 4.",
        "reference": "4",
        "reward": reward,
        "correct": correct if correct is not None else (reward is not None and reward >= 1),
        "policy_version": max(0, step - 2),
        "staleness": 2,
        "objective": "m2po",
        "tokens": tokens,
        "log_ratio": list(log_ratio),
        "clipped": list(clipped),
        "masked": list(masked),
        "truncated": False,
        "time": T0 + step,
        **extra,
    }


def batch(samples, attempt=1) -> dict:
    return {"attempt": attempt, "samples": samples}


def post(client, run_id, token, body, *, gzipped=False, encoding=None):
    """`gzipped` compresses the body here; `encoding` names the Content-Encoding of bytes sent as they are."""
    data = json.dumps(body).encode() if not isinstance(body, bytes) else body
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    if encoding:
        headers["HTTP_CONTENT_ENCODING"] = encoding
    if gzipped:
        data, headers = gzip.compress(data), {**headers, "HTTP_CONTENT_ENCODING": "gzip"}
    return client.post(f"/api/v1/runs/{run_id}/samples", data=data, content_type="application/json", **headers)


def long_sample(step: int, index: int, *, tokens: int = 4096, seed: int = 0) -> dict:
    """A train sample at samples.max_tokens 4,096 as a large-vocabulary model writes it: subword
    tokens and float32 log ratios (7 significant digits) that compress about as badly as real ones:
    ~97 KB a line, 64 of them ~2.9 MB gzipped (SmolLM2's tokenizer gave 105 KB and 2.9 MB)."""
    import numpy as np

    rng = np.random.default_rng([seed, step, index])
    letters = np.array(list("etaoinshrdlucmfwypvbgkqjxz  etaoinshr.,ETAOIN0123456789"))
    cuts = np.cumsum(rng.integers(1, 7, tokens))
    text = "".join(rng.choice(letters, int(cuts[-1])))
    toks = [text[a:b] for a, b in zip([0, *cuts[:-1].tolist()], cuts.tolist())]
    ratios = [float(f"{v:.7g}") for v in rng.normal(0, 0.05, tokens).astype(np.float32).tolist()]
    masked = sorted(rng.choice(tokens, 40, replace=False).tolist())
    return sample(step, index, tokens=toks, log_ratio=ratios, masked=masked, truncated=True)
