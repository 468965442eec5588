"""GPU figures for scripts/gpu-check.sh: training and generation throughput, m2po's overhead, memory.

    python benchmarks/gpu_check.py [--batch 8] [--response 1024] [--repeats 3] [--gen-batch 64] [--json FILE]
    python benchmarks/gpu_check.py --device cpu --tiny     # gpu-check.sh's CPU dry run

On a random-init Qwen2 of Qwen2.5-0.5B's shape (bf16, the trainer's own token_logprobs and
policy_loss), it prints:
- trained tokens/s of one full update (forward, loss, backward, AdamW), grpo and m2po on the same
  batch, and m2po's time per update over grpo's (the baseline, measured in the same run; the
  paper reports a negligible overhead: aim for <= 1.01);
- generation tokens/s of the hf engine's call (transformers generate, sampling at temperature 1,
  no top-k, fixed length);
- peak GPU memory of each part.
--tiny swaps in a 2-layer, 512-token-vocabulary model and a small batch: the dry run checks that
the code runs and reports, not how fast. --json writes the figures for gpu-figures.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks.trainer import QWEN_05B, time_objectives

TINY = {
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
TINY_SIZES = {"batch": 2, "prompt": 16, "response": 32, "repeats": 1, "gen_batch": 2, "gen_tokens": 8}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def generation_tokens_per_s(shape: dict, device: torch.device, batch: int, prompt: int, new_tokens: int) -> float:
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(**shape, tie_word_embeddings=True, max_position_embeddings=4096)
    model = Qwen2ForCausalLM(cfg).to(device, torch.bfloat16).eval()
    ids = torch.randint(0, cfg.vocab_size, (batch, prompt), device=device)
    gen = GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        pad_token_id=0,
        eos_token_id=None,
        use_cache=True,
    )
    with torch.no_grad():
        model.generate(
            input_ids=ids[:, :8],
            attention_mask=torch.ones_like(ids[:, :8]),
            generation_config=GenerationConfig(
                do_sample=True, top_k=0, max_new_tokens=8, min_new_tokens=8, pad_token_id=0, eos_token_id=None
            ),
        )  # warm-up
        synchronize(device)
        t0 = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gen)
        synchronize(device)
    made = (out.shape[1] - prompt) * batch
    return made / (time.perf_counter() - t0)


class PeakMemory:
    """Peak allocated GPU memory of a block, in GiB; None on the CPU (no allocator statistics)."""

    def __init__(self, device: torch.device):
        self.device, self.gib = device, None

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            self.gib = torch.cuda.max_memory_allocated() / 2**30


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--tiny", action="store_true", help="a tiny model and batch (the CPU dry run)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--prompt", type=int, default=256)
    p.add_argument("--response", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--gen-batch", type=int, default=64)
    p.add_argument("--gen-tokens", type=int, default=512)
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args()
    if args.tiny:
        vars(args).update(TINY_SIZES)
    shape, shape_name = (TINY, "tiny Qwen2") if args.tiny else (QWEN_05B, "Qwen2.5-0.5B shape")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_check: torch sees no CUDA device")
    where = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    print(f"{where}, torch {torch.__version__} (CUDA {torch.version.cuda})")
    print(
        f"model: random-init Qwen2, {shape_name}, bf16; "
        f"train batch {args.batch} x ({args.prompt} prompt + {args.response} response)"
    )

    with PeakMemory(device) as train_mem:
        train = time_objectives(shape, device, torch.bfloat16, args.batch, args.prompt, args.response, args.repeats)
    with PeakMemory(device) as gen_mem:
        gen_tps = generation_tokens_per_s(shape, device, args.gen_batch, args.prompt, args.gen_tokens)

    figures = {
        "device": where,
        "model": shape_name,
        "train_batch": [args.batch, args.prompt, args.response],
        "train_tokens_per_s": {"grpo": round(train["grpo"], 1), "m2po": round(train["m2po"], 1)},
        "m2po_over_grpo_time": round(train["grpo"] / train["m2po"], 4),
        "generate": {"batch": args.gen_batch, "new_tokens": args.gen_tokens, "tokens_per_s": round(gen_tps, 1)},
        "peak_gib": {
            "train": train_mem.gib and round(train_mem.gib, 2),
            "generate": gen_mem.gib and round(gen_mem.gib, 2),
        },
    }
    gib = lambda v: "n/a (cpu)" if v is None else f"{v:.2f}"  # noqa: E731
    rows = [
        ("train tokens/s, grpo (baseline)", f"{train['grpo']:.0f}"),
        ("train tokens/s, m2po", f"{train['m2po']:.0f}"),
        ("m2po / grpo time per update", f"{figures['m2po_over_grpo_time']:.4f}"),
        (f"hf generate tokens/s (batch {args.gen_batch} x {args.gen_tokens})", f"{gen_tps:.0f}"),
        ("peak GPU memory, training (GiB)", gib(train_mem.gib)),
        ("peak GPU memory, generation (GiB)", gib(gen_mem.gib)),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"{'measure':<{width}}  value")
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
