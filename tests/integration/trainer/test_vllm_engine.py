"""The vLLM engine, where vLLM and a GPU exist: log-probs agree with the trainer's, and weights
update in place from a state dict."""

import pytest
import torch

# Marked gpu: `make test` deselects it (CI has no GPU); on a GPU machine `pytest -m gpu` runs it.
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="the vLLM engine needs a CUDA GPU"),
]


def test_vllm_log_probs_match_the_trainer_and_follow_in_place_weight_updates(tmp_path):
    pytest.importorskip("vllm", reason="vLLM is not installed (GPU extra: requirements-gpu.txt)")
    from trainer.config import RunConfig
    from trainer.policy.models import load_policy
    from trainer.rollout.batch import token_logprobs
    from trainer.rollout.vllm_engine import VLLMEngine

    cfg = RunConfig.model_validate(
        {"rollout": {"engine": "vllm", "vllm_gpu_memory_utilization": 0.2}, "train": {"device": "cuda"}}
    )
    dev = torch.device("cuda")
    policy = load_policy(cfg.model, "0123456789+=", seed=1, device=dev)
    engine = VLLMEngine.from_policy(policy, cfg, work_dir=tmp_path / "model")

    def check():
        gen = engine.generate(["1+2=", "7+8="], n=4, max_new_tokens=6, temperature=1.0, top_p=1.0)
        with torch.no_grad():
            lp, _ = token_logprobs(policy.model, gen.input_ids.to(dev), gen.attention_mask.to(dev), gen.prompt_len, 1.0)
        assert torch.allclose(lp.cpu() * gen.response_mask, gen.logp, atol=2e-3)

    check()
    with torch.no_grad():  # new weights: the engine must serve them without reloading from disk
        for p in policy.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    engine.load_weights(policy.model.state_dict())
    check()
