"""GPU figures for scripts/gpu-check.sh: training and generation throughput, m2po's overhead, memory.

    python benchmarks/gpu_check.py [--batch 8] [--response 1024] [--repeats 3] [--gen-batch 64]

On a random-init Qwen2 of Qwen2.5-0.5B's shape (bf16, the trainer's own token_logprobs and
policy_loss), it prints:
- trained tokens/s of one full update (forward, loss, backward, AdamW), grpo and m2po on the same
  batch, and m2po's time per update over grpo's (the baseline, measured in the same run; the
  paper reports a negligible overhead: aim for <= 1.01);
- generation tokens/s of the hf engine's call (transformers generate, sampling at temperature 1,
  no top-k, fixed length);
- peak GPU memory of each part.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.trainer import QWEN_05B, time_objectives  # noqa: E402


def generation_tokens_per_s(batch: int, prompt: int, new_tokens: int) -> float:
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(**QWEN_05B, tie_word_embeddings=True, max_position_embeddings=4096)
    model = Qwen2ForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, cfg.vocab_size, (batch, prompt), device="cuda")
    gen = GenerationConfig(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=new_tokens,
                           min_new_tokens=new_tokens, pad_token_id=0, eos_token_id=None, use_cache=True)
    with torch.no_grad():
        model.generate(input_ids=ids[:, :8], attention_mask=torch.ones_like(ids[:, :8]), generation_config=GenerationConfig(
            do_sample=True, top_k=0, max_new_tokens=8, min_new_tokens=8, pad_token_id=0, eos_token_id=None))  # warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gen)
        torch.cuda.synchronize()
    made = (out.shape[1] - prompt) * batch
    return made / (time.perf_counter() - t0)


def gib(n: int) -> float:
    return n / 2**30


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--prompt", type=int, default=256)
    p.add_argument("--response", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--gen-batch", type=int, default=64)
    p.add_argument("--gen-tokens", type=int, default=512)
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_check: torch sees no CUDA device")
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__} (CUDA {torch.version.cuda})")
    print(f"model: random-init Qwen2, Qwen2.5-0.5B shape, bf16; train batch {args.batch} x ({args.prompt} prompt + {args.response} response)")

    torch.cuda.reset_peak_memory_stats()
    train = time_objectives(QWEN_05B, torch.device("cuda"), torch.bfloat16, args.batch, args.prompt, args.response, args.repeats)
    train_peak = torch.cuda.max_memory_allocated()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    gen_tps = generation_tokens_per_s(args.gen_batch, args.prompt, args.gen_tokens)
    gen_peak = torch.cuda.max_memory_allocated()

    rows = [
        ("train tokens/s, grpo (baseline)", f"{train['grpo']:.0f}"),
        ("train tokens/s, m2po", f"{train['m2po']:.0f}"),
        ("m2po / grpo time per update", f"{train['grpo'] / train['m2po']:.4f}"),
        (f"hf generate tokens/s (batch {args.gen_batch} x {args.gen_tokens})", f"{gen_tps:.0f}"),
        ("peak GPU memory, training (GiB)", f"{gib(train_peak):.2f}"),
        ("peak GPU memory, generation (GiB)", f"{gib(gen_peak):.2f}"),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"{'measure':<{width}}  value")
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    main()
