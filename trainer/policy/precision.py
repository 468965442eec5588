"""Mixed precision: low-precision compute over float32 master weights.

`model.dtype` is the compute dtype. Parameters and the optimizer state always stay float32, so an
update of lr 1e-6 still moves a weight of size 1e-2 (in bfloat16 such an update rounds away, and
training silently stops).

- One process: the parameters are float32 and forward passes run under `torch.autocast` in the
  compute dtype.
- Under torchrun: FSDP2's `MixedPrecisionPolicy` casts the gathered parameters to the compute dtype
  for forward and backward and reduces gradients in float32; the sharded parameters stay float32.
- float16 also needs loss scaling (its range underflows small gradients): a `GradScaler` scales
  the loss, unscales before clipping, and skips an update whose gradients overflowed. FSDP2 has no
  scaler of its own, so float16 is refused under torchrun (use bfloat16).
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class Precision:
    def __init__(self, dtype: str, device: torch.device, distributed: bool = False):
        if dtype == "float16" and distributed:
            raise ValueError(
                "model.dtype: float16 needs a gradient scaler, which FSDP does not provide; use bfloat16 under torchrun"
            )
        self.name = dtype
        self.compute_dtype = DTYPES[dtype]
        self.device_type = device.type
        self.distributed = distributed
        self.mixed = self.compute_dtype != torch.float32
        self.scaler = torch.amp.GradScaler(device.type) if dtype == "float16" else None
        self.skipped_updates = 0  # float16 updates skipped because a gradient overflowed

    def fsdp_policy(self):
        """The MixedPrecisionPolicy for fully_shard, or None for float32."""
        if not self.mixed:
            return None
        from torch.distributed.fsdp import MixedPrecisionPolicy

        return MixedPrecisionPolicy(param_dtype=self.compute_dtype, reduce_dtype=torch.float32)

    def autocast(self):
        """Where forward passes run: autocast on one process; FSDP casts by itself under torchrun."""
        if not self.mixed or self.distributed:
            return nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.compute_dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def clip_and_step(self, optimizer: torch.optim.Optimizer, params, max_norm: float) -> float:
        """Clip the true (unscaled) gradient norm, step, and return that norm."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        if self.scaler is None:
            optimizer.step()
            return grad_norm
        scale = self.scaler.get_scale()
        self.scaler.step(optimizer)  # skipped when a gradient is inf/NaN
        self.scaler.update()
        if self.scaler.get_scale() < scale:
            self.skipped_updates += 1
        return grad_norm

    def state_dict(self) -> dict:
        return {
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "skipped_updates": self.skipped_updates,
        }

    def load_state_dict(self, state: dict | None) -> None:
        if not state:
            return
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.skipped_updates = int(state.get("skipped_updates", 0))
