"""One rank of the sharded-checkpoint test (run under torchrun, or alone for world size 1).

sharded_worker.py save DIR     train one step from seed 1, save DCP shards and a gathered reference
sharded_worker.py load DIR     load the shards into a model built from another seed; compare on rank 0
sharded_worker.py export DIR   one process: the shards as a Hugging Face folder, loaded back and compared
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

from trainer import distributed
from trainer.models import tiny_model
from trainer.sharded_checkpoint import export_hf, load_sharded, save_sharded

VOCAB, HIDDEN, LAYERS = 64, 64, 3


def build(seed: int, info: distributed.DistInfo):
    model = distributed.wrap_fsdp(tiny_model(VOCAB, HIDDEN, LAYERS, seed), info)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def one_step(model, optimizer) -> None:
    tokens = torch.arange(24).reshape(2, 12) % VOCAB
    loss = model(input_ids=tokens, labels=tokens).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def flat(model, optimizer, info) -> dict[str, torch.Tensor]:
    """Every weight and optimizer tensor, unsharded and keyed by parameter name (rank 0's alone)."""
    options = StateDictOptions(full_state_dict=info.enabled, cpu_offload=info.enabled)
    model_sd, optim_sd = get_state_dict(model, optimizer, options=options)
    if not info.is_main:
        return {}
    out = {f"model.{k}": v.float() for k, v in model_sd.items()}
    for name, state in optim_sd["state"].items():
        for key, value in state.items():
            if torch.is_tensor(value) and value.dim() > 0:
                out[f"optim.{name}.{key}"] = value.float()
    return out


def main(phase: str, folder: Path) -> None:
    info = distributed.init_distributed("cpu")
    if phase == "save":
        model, optimizer = build(1, info)
        one_step(model, optimizer)
        pending = save_sharded(folder / "step", model, optimizer, background=info.enabled)
        pending.wait()
        reference = flat(model, optimizer, info)
        if info.is_main:
            torch.save(reference, folder / "reference.pt")
            (folder / f"saved-by-{info.world}").write_text(f"{pending.bytes_written} {pending.seconds_blocked:.4f}")
    elif phase == "load":
        model, optimizer = build(7, info)
        load_sharded(folder / "step", model, optimizer)
        loaded = flat(model, optimizer, info)
        if info.is_main:
            reference = torch.load(folder / "reference.pt")
            assert loaded.keys() == reference.keys(), sorted(set(loaded) ^ set(reference))[:5]
            unequal = [k for k in reference if not torch.equal(loaded[k], reference[k])]
            assert not unequal, f"{len(unequal)} tensors differ after loading on {info.world} ranks: {unequal[:5]}"
            (folder / f"loaded-by-{info.world}").write_text(str(len(loaded)))
    elif phase == "export":
        model = tiny_model(VOCAB, HIDDEN, LAYERS, 7)
        out = export_hf(folder / "step", model, folder / "hf")
        from transformers import AutoModelForCausalLM

        exported = AutoModelForCausalLM.from_pretrained(out).state_dict()
        reference = torch.load(folder / "reference.pt")
        unequal = [k for k, v in exported.items() if not torch.equal(v.float(), reference[f"model.{k}"])]
        assert not unequal, f"exported weights differ: {unequal[:5]}"
        (folder / "exported").write_text(str(len(exported)))
    if info.enabled:
        # Leave together, and without C++ destructors: a gloo group torn down while its peer is
        # still closing aborts now and then ("terminate called without an active exception").
        torch.distributed.barrier()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
