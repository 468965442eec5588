"""Generation: grouped layout, response masks, and behaviour log-probs equal to the trainer's."""

import random

import torch

from trainer.config import ModelConfig
from trainer.data.tasks import ArithmeticTask
from trainer.policy.models import char_tokenizer, load_policy
from trainer.rollout.batch import HFEngine, response_mask_from, token_logprobs


def test_char_tokenizer_round_trips():
    tok = char_tokenizer("0123456789+=")
    ids = tok.encode("12+7=", add_special_tokens=False)
    assert len(ids) == 5 and tok.decode(ids) == "12+7="
    assert len(tok) == 16  # 4 specials + 12 characters: the vocabulary stays tiny


def test_response_mask_keeps_tokens_up_to_and_including_the_first_eos():
    eos = 2
    tokens = torch.tensor([[5, 6, eos, 0, 0], [5, eos, 7, eos, 0], [5, 6, 7, 8, 9]])
    assert response_mask_from(tokens, eos).tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]


def test_engine_log_probs_match_a_full_forward_of_the_same_weights():
    torch.manual_seed(0)
    policy = load_policy(ModelConfig(), "0123456789+=", seed=3, device=torch.device("cpu"))
    task = ArithmeticTask(1, 2)
    problems = task.sample(random.Random(0), 5)  # prompts of different lengths: left padding matters
    gen = HFEngine(policy, torch.device("cpu")).generate(
        [task.prompt_text(p) for p in problems], n=3, max_new_tokens=6, temperature=0.7, top_p=1.0
    )
    assert gen.input_ids.shape[0] == 15 and len(gen.texts) == 15
    with torch.no_grad():
        logp, _ = token_logprobs(policy.model, gen.input_ids, gen.attention_mask, gen.prompt_len, temperature=0.7)
    assert torch.allclose(logp * gen.response_mask, gen.logp, atol=1e-4)
    # each row's prompt is its group's prompt
    prompt_rows = [
        policy.tokenizer.decode(r[gen.attention_mask[i, : gen.prompt_len].bool()].tolist(), skip_special_tokens=True)
        for i, r in enumerate(gen.input_ids[:, : gen.prompt_len])
    ]
    assert prompt_rows == [task.prompt_text(p) for p in problems for _ in range(3)]
