"""A one-process run's sharded checkpoint says nothing on stderr: DCP is told there is no process
group instead of warning "torch.distributed is disabled" at every save and load, a line the run
page's stderr card showed for every run as if something were wrong."""

import warnings

import torch

from trainer.ckpt.sharded_checkpoint import load_sharded, save_sharded


def test_a_one_process_save_and_load_warn_nothing(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        save_sharded(tmp_path, model, optimizer)
        fresh = torch.nn.Linear(4, 2)
        load_sharded(tmp_path, fresh, torch.optim.AdamW(fresh.parameters(), lr=1e-3))
    assert [str(w.message) for w in caught if "torch.distributed" in str(w.message)] == []
    assert torch.equal(fresh.weight, model.weight)
