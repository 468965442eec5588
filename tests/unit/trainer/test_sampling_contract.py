"""Sampling is exactly what the run config says, whatever the model's own generation_config ships.

The model here is a local folder, as a user's checkpoint would be: a small Qwen2 whose
generation_config.json sets a repetition penalty, min_p, top_k and a second EOS id, the way hub
models do (Qwen2.5-Instruct ends on 151645 or 151643). It is loaded by path, through the trainer's
own loading code and the YAML defaults.
"""

import textwrap

import pytest
import torch
from transformers import GenerationConfig

from trainer.config import load_config, parse_config
from trainer.data.tasks import ArithmeticTask
from trainer.loop import Trainer
from trainer.policy.models import char_tokenizer, load_policy, tiny_model
from trainer.rollout.batch import HFEngine, response_mask_from, token_logprobs

ALPHABET = ArithmeticTask.alphabet
PROMPT = "3+4="
MIN_P = 0.5


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A peaked policy (so min_p and top_k would matter) whose most likely first token after the
    prompt is declared a second EOS id, so that many responses end on it at once."""
    folder = tmp_path_factory.mktemp("local-model")
    tok = char_tokenizer(ALPHABET)
    model = tiny_model(len(tok), hidden=64, layers=2, seed=7)
    ids = torch.tensor([[tok.bos_token_id] + tok.encode(PROMPT, add_special_tokens=False)])
    with torch.no_grad():
        # Spread the (tied) head's logits until min_p would cut a good share of the probability.
        for _ in range(40):
            first = torch.softmax(model(input_ids=ids).logits[0, -1], -1)
            if first[first < MIN_P * first.max()].sum() > 0.35:
                break
            model.model.embed_tokens.weight.mul_(1.15)
    second_eos = int(first.argmax())
    assert second_eos != tok.eos_token_id
    model.generation_config = GenerationConfig(
        do_sample=True,
        temperature=0.3,
        top_k=2,
        min_p=MIN_P,
        repetition_penalty=1.5,
        eos_token_id=[tok.eos_token_id, second_eos],
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
    )
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder, second_eos, first


def _policy(folder):
    cfg = parse_config({"model": {"name": str(folder)}})
    return load_policy(cfg.model, ALPHABET, seed=1, device=torch.device("cpu"))


def test_the_policy_stops_on_every_eos_id_of_the_model(model_dir):
    folder, second_eos, _ = model_dir
    policy = _policy(folder)
    assert second_eos in policy.eos_token_ids and policy.tokenizer.eos_token_id in policy.eos_token_ids
    # nothing else of the model's sampling defaults survives loading
    gc = policy.model.generation_config
    assert gc.repetition_penalty in (None, 1.0) and gc.min_p is None and gc.top_k in (None, 50)


def test_samples_follow_the_configured_distribution_not_the_models_defaults(model_dir):
    """Tokens that the model's min_p / top_k would forbid must still be drawn at their rate."""
    folder, _, first = model_dir
    policy = _policy(folder)
    policy.prepend_bos = True  # the char tokenizer's format (the fixture computed `first` with BOS)
    torch.manual_seed(0)
    gen = HFEngine(policy, torch.device("cpu")).generate([PROMPT], n=400, max_new_tokens=1, temperature=1.0, top_p=1.0)
    drawn = gen.input_ids[:, gen.prompt_len]
    forbidden = first < MIN_P * first.max()  # what min_p would cut (top_k=2 cuts at least as much)
    expected = float(first[forbidden].sum())
    assert expected > 0.2, "the fixture's model is not spread enough for this test to mean anything"
    observed = float(forbidden[drawn].float().mean())
    assert observed > expected / 2, f"min_p/top_k were applied: {observed:.3f} of draws vs {expected:.3f} expected"


def test_engine_log_probs_are_those_of_the_distribution_sampled(model_dir):
    """The recorded log-probs equal a full forward's softmax(logits / T): had a penalty been
    applied while sampling, the processor's view would differ from the forward's."""
    folder, _, _ = model_dir
    policy = _policy(folder)
    torch.manual_seed(1)
    gen = HFEngine(policy, torch.device("cpu")).generate(
        ["1+2=", "33+4=", "5+66="], n=8, max_new_tokens=8, temperature=0.8, top_p=1.0
    )
    with torch.no_grad():
        logp, _ = token_logprobs(policy.model, gen.input_ids, gen.attention_mask, gen.prompt_len, temperature=0.8)
    diff = ((logp - gen.logp).abs() * gen.response_mask).max()
    assert float(diff) < 1e-4


def test_a_response_that_ends_on_the_second_eos_is_masked_there(model_dir):
    folder, second_eos, _ = model_dir
    policy = _policy(folder)
    torch.manual_seed(2)
    gen = HFEngine(policy, torch.device("cpu")).generate(
        [PROMPT, "8+8="], n=16, max_new_tokens=6, temperature=1.0, top_p=1.0
    )
    responses = gen.input_ids[:, gen.prompt_len :]
    ended_on_second = 0
    for row, mask, finished in zip(responses.tolist(), gen.response_mask.tolist(), gen.finished):
        stops = [i for i, t in enumerate(row) if t in policy.eos_token_ids]
        if not stops:
            assert mask == [1.0] * len(row) and not finished
            continue
        end = stops[0]
        assert mask == [1.0] * (end + 1) + [0.0] * (len(row) - end - 1)
        assert finished
        ended_on_second += row[end] == second_eos
    assert ended_on_second > 0, "no response ended on the second EOS id; the test proves nothing"
    assert response_mask_from(torch.tensor([[5, second_eos, 5, 2]]), policy.eos_token_ids).tolist() == [
        [1.0, 1.0, 0.0, 0.0]
    ]


def test_first_update_at_staleness_zero_has_zero_log_ratio(model_dir, tmp_path):
    """The run a user starts from YAML (behav_logp defaults to recompute): staleness 0, fp32."""
    folder, second_eos, _ = model_dir
    config = tmp_path / "run.yaml"
    config.write_text(
        textwrap.dedent(f"""
        model: {{name: {folder}}}
        task: {{name: arithmetic, eval_sets: []}}
        rollout: {{group_size: 4, prompts_per_step: 4, max_new_tokens: 6}}
        algorithm: {{objective: m2po, updates_per_step: 1, lr: 1.0e-3}}
        staleness: {{k: 0}}
        train: {{steps: 1, device: cpu}}
        eval: {{every: 0, at_start: false}}
    """)
    )
    cfg = load_config(config)
    assert cfg.rollout.behav_logp == "recompute"
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        trainer.setup()
        batch = trainer.rollouts.generate(0, 0)
        metrics = trainer.updater.train_on(batch)
    finally:
        trainer.close()
    assert metrics["actor/m2_all"] ** 0.5 <= 1e-6  # root-mean-square of log r over valid tokens
    assert abs(metrics["actor/ppo_kl"]) <= 1e-6
    # the engine's own log-probs agree with the trainer's recomputation of the same weights
    assert metrics["rollout/engine_kl"] == pytest.approx(0.0, abs=1e-4)


def test_engine_log_probs_with_truncated_sampling_are_refused():
    with pytest.raises(ValueError, match="rollout.behav_logp"):
        parse_config({"rollout": {"behav_logp": "engine", "top_p": 0.9}})
    assert parse_config({"rollout": {"top_p": 0.9}}).rollout.behav_logp == "recompute"
