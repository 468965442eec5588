"""The `vllm` rollout engine (GPU). Imported lazily: nothing else needs vLLM installed.

Written against vLLM's documented offline API: `vllm.LLM` with `worker_extension_cls` and
`LLM.collective_rpc` for in-place weight updates (see vllm_worker.py), `LLM.generate` on prompt
token ids with `SamplingParams(n, temperature, top_p, max_tokens, logprobs=0)`, and
`LLM.reset_prefix_cache()` after every weight update so no KV block computed with old weights is
reused. The engine starts from a folder holding the policy's initial weights (written once with
save_pretrained); from then on every update comes from the trainer's state dict in memory.

Behaviour log-probs: the engine runs with `logprobs_mode="processed_logprobs"`, i.e. after
temperature (and after top_p truncation when top_p < 1; use rollout.behav_logp: recompute for the
trainer's own full-vocabulary log-probs, as the paper does).
"""

from __future__ import annotations

from pathlib import Path

import torch

from trainer.rollout import Generation, _finish, encode_prompts, response_mask_from


class VLLMEngine:
    def __init__(self, model_dir: Path, policy, cfg):
        try:
            from vllm import LLM
        except ImportError as exc:
            raise RuntimeError("rollout.engine 'vllm' needs vLLM: pip install -r requirements-gpu.txt") from exc
        self.policy = policy
        self.llm = LLM(
            model=str(model_dir),
            dtype=cfg.model.dtype,
            seed=cfg.train.seed,
            gpu_memory_utilization=cfg.rollout.vllm_gpu_memory_utilization,
            skip_tokenizer_init=True,  # we pass token ids and decode with our own tokenizer
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",
            worker_extension_cls="trainer.vllm_worker.WeightLoaderExtension",
        )

    @classmethod
    def from_policy(cls, policy, cfg, work_dir: Path | None = None) -> "VLLMEngine":
        import tempfile

        folder = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="opl-vllm-"))
        folder.mkdir(parents=True, exist_ok=True)
        model = policy.model
        model.save_pretrained(folder, safe_serialization=True)
        policy.tokenizer.save_pretrained(folder)
        return cls(folder, policy, cfg)

    def load_weights(self, state_dict: dict) -> None:
        """Update the served weights in place from the trainer's state dict."""
        named = [(name, t.detach()) for name, t in state_dict.items()]
        self.llm.collective_rpc("opl_load_weights", args=(named,))
        self.llm.reset_prefix_cache()

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, max_new_tokens: int, temperature: float, top_p: float) -> Generation:
        from vllm import SamplingParams

        tok = self.policy.tokenizer
        ids, mask = encode_prompts(self.policy, prompts, torch.device("cpu"))
        rows = [r[m.bool()].tolist() for r, m in zip(ids, mask)]
        params = SamplingParams(
            n=n, temperature=temperature, top_p=top_p, max_tokens=max_new_tokens, logprobs=0,
            stop_token_ids=[tok.eos_token_id], detokenize=False,
        )
        outputs = self.llm.generate([{"prompt_token_ids": r} for r in rows], params, use_tqdm=False)
        samples = [(i, o) for i, out in enumerate(outputs) for o in out.outputs]  # grouped per prompt
        width = max(1, max(len(o.token_ids) for _, o in samples))
        responses = torch.full((len(samples), width), tok.pad_token_id, dtype=torch.long)
        logp = torch.zeros((len(samples), width))
        for row, (_, o) in enumerate(samples):
            responses[row, : len(o.token_ids)] = torch.tensor(list(o.token_ids), dtype=torch.long)
            for t, (token, entry) in enumerate(zip(o.token_ids, o.logprobs or [])):
                logp[row, t] = entry[token].logprob
        prompt_rows = torch.stack([ids[i] for i, _ in samples])
        prompt_mask = torch.stack([mask[i] for i, _ in samples])
        rmask = response_mask_from(responses, tok.eos_token_id)
        sequences = torch.cat([prompt_rows, responses], dim=1)
        return _finish(tok, sequences, prompt_mask, rmask, logp * rmask, ids.shape[1])
