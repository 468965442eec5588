"""A checkpoint's weights as a Hugging Face folder, on demand: for evaluation, vLLM and forks.

    python -m trainer.ckpt.export_hf RUN_DIR/ckpt/step-00000040 OUT_DIR

Reads either format (sharded dcp/ or gathered weights.pt) in this one process, into the model the
checkpoint's own config describes, and writes config.json and model.safetensors. A hub or local
model also gets its tokenizer; the tiny model's character tokenizer is built from the task's
alphabet at run time and is not part of the checkpoint, so its folder holds the weights only.
The optimizer's state is never read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from trainer.ckpt import checkpoint as ckpt
from trainer.ckpt.sharded_checkpoint import export_hf, is_sharded
from trainer.config import RunConfig, parse_config


def _tiny_vocab(path: Path) -> int:
    """The tiny model's vocabulary size, read from the saved embedding's shape."""
    name = "model.embed_tokens.weight"
    if is_sharded(path):
        from torch.distributed.checkpoint import FileSystemReader

        meta = FileSystemReader(str(path / ckpt.SHARDED_DIR)).read_metadata()
        return meta.state_dict_metadata[f"model.{name}"].size[0]
    return ckpt.load_weights(path)["model"][name].shape[0]


def _model_and_tokenizer(path: Path, cfg: RunConfig):
    """The run's architecture, unsharded, on the CPU (its weights are overwritten from `path`)."""
    model_cfg = cfg.model
    if model_cfg.name == "tiny":
        from trainer.policy.models import tiny_model

        return tiny_model(_tiny_vocab(path), model_cfg.tiny_hidden_size, model_cfg.tiny_layers, cfg.train.seed), None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.policy.models import SMOLLM2_PRESET, hub_id_or_path, smollm2_folder

    source = smollm2_folder() if model_cfg.name == SMOLLM2_PRESET else hub_id_or_path(model_cfg.name)
    return AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32), AutoTokenizer.from_pretrained(source)


def export(path: Path, out_dir: Path) -> Path:
    """Write the Hugging Face folder of the checkpoint folder `path` into `out_dir`."""
    path, out_dir = Path(path), Path(out_dir)
    cfg = parse_config(ckpt.load_state(path)["config"])
    model, tokenizer = _model_and_tokenizer(path, cfg)
    if is_sharded(path):
        export_hf(path, model, out_dir)
    else:
        model.load_state_dict(ckpt.load_weights(path)["model"])
        model.save_pretrained(out_dir, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(out_dir)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainer.ckpt.export_hf", description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", type=Path, help="a checkpoint folder, RUN_DIR/ckpt/step-NNNNNNNN")
    p.add_argument("out_dir", type=Path, help="the folder to write (config.json, model.safetensors)")
    args = p.parse_args(argv)
    if not (args.checkpoint / "state.pt").is_file():
        p.error(f"{args.checkpoint} is not a checkpoint folder (no state.pt)")
    out = export(args.checkpoint, args.out_dir)
    print(f"[export_hf] wrote {out} from {args.checkpoint}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
