"""A real pretrained model end to end: the `smollm2-135m` preset learns on `task: math`.

This is the run that would have caught every math reward being 0: a YAML config with the
defaults a user gets (reward_timeout_s: 5.0, behav_logp: recompute), through the CLI, with
math-verify scoring in its process pool and an eval set read from OPL_BENCHMARKS_DIR. The problems
are easy on purpose (SmolLM2-135M, de-quantised from the packaged Q4 GGUF, must answer some of them
within 8 tokens on a CPU): copy a number into \\boxed{}, or add two digits, prompted few-shot as
plain completion (model.chat_template: none).
"""

import json

from tests.integration.trainer.cli_helpers import by_step, read_points, run_trainer, write_config

TEMPLATE = (
    "Question: Write the number 3.\nAnswer: \\boxed{3}\n\n"
    "Question: What is 1+1?\nAnswer: \\boxed{2}\n\n"
    "Question: {question}\nAnswer:"
)
TRAIN = [
    ("Write the number 5.", "5"),
    ("What is 2+3?", "5"),
    ("Write the number 9.", "9"),
    ("What is 4+4?", "8"),
]
EVAL = [("Write the number 7.", "7"), ("Write the number 4.", "4"), ("What is 3+3?", "6")]


def test_smollm2_learns_on_math_with_nonzero_rewards_and_eval_accuracy(tmp_path):
    train = tmp_path / "easy.jsonl"
    train.write_text("".join(json.dumps({"problem": q, "answer": a}) + "\n" for q, a in TRAIN))
    bench = tmp_path / "benchmarks" / "gsm8k"
    bench.mkdir(parents=True)
    (bench / "test.jsonl").write_text(
        "".join(json.dumps({"question": q, "answer": f"work #### {a}"}) + "\n" for q, a in EVAL)
    )
    cfg = write_config(
        tmp_path / "run.yaml",
        {
            "model": {"name": "smollm2-135m", "chat_template": "none"},
            "task": {
                "name": "math",
                "train_file": str(train),
                "prompt_template": TEMPLATE,
                "eval_sets": ["gsm8k"],
                "eval_max_problems": 3,
            },
            "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 8, "temperature": 0.7},
            # m2po with the dual clip on A < 0 tokens: the study's m2po+dual-clip arm
            "algorithm": {"objective": "m2po", "lr": 1.0e-6, "updates_per_step": 1, "dual_clip_c": 3.0},
            "staleness": {"mode": "stale_k", "k": 1},
            "train": {"steps": 2, "seed": 1, "device": "cpu"},
            "eval": {"every": 0, "at_start": True, "samples_per_problem": 2, "temperature": 0.5},
            "checkpoint": {"every": 0},
        },
    )
    result = run_trainer(
        cfg, tmp_path / "run", timeout=900, OPL_BENCHMARKS_DIR=tmp_path / "benchmarks", HF_HUB_OFFLINE=1
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    steps = by_step(read_points(tmp_path / "run"))
    trained = [m for m in steps.values() if "train/reward_mean" in m]
    assert len(trained) == 2
    assert max(m["train/reward_mean"] for m in trained) > 0, trained
    assert all(m["reward/errors"] == 0 and m["reward/timeouts"] == 0 for m in trained)
    for m in trained:  # the correction's own stats and the off-policy diagnostics, every step
        assert m["actor/dual_clip_frac"] >= 0 and 0 < m["actor/ess_frac"] <= 1 and m["actor/kl_k3"] >= 0
        assert m["actor/ratio_neg_p50"] <= m["actor/ratio_neg_p99"] <= m["actor/ratio_neg_max"]
        assert m["rollout/engine_kl_k3"] >= 0 and m["rollout/engine_abs_dlogp"] <= m["rollout/engine_abs_dlogp_max"]
    evals = [m["eval/gsm8k/acc"] for m in steps.values() if "eval/gsm8k/acc" in m]
    assert len(evals) == 2 and max(evals) > 0, evals
    print("rewards", [m["train/reward_mean"] for m in trained], "eval acc", evals)

    # Rollout samples of a real BPE model: the first training step's minibatch (4 rows), tokens
    # decoded one by one with their spaces, and the eval answers with math-verify's verdicts.
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    train = [s for s in samples if s["kind"] == "train"]
    assert [s["index"] for s in train] == [0, 1, 2, 3] and {s["step"] for s in train} == {1}
    questions = dict(TRAIN)
    for s in train:
        question = s["prompt"].rsplit("Question: ", 1)[1].split("\n", 1)[0]
        assert questions[question] == s["reference"] and s["objective"] == "m2po"
        assert len(s["tokens"]) == len(s["log_ratio"]) <= 8
        assert s["response"].strip() in "".join(s["tokens"])  # the pieces, spaces included, make the text
        assert s["correct"] == (s["reward"] >= 1.0) and s["clipped"] == []  # r stays far below c = 3 at lr 1e-6
        assert s["variant"] == "m2po+dual_clip" and set(s["counterfactual"]) == {
            "m2po_cap+dual_clip",
            "grpo+dual_clip",
            "no_clip+dual_clip",
            "gspo+dual_clip",
            "cispo",
            "sapo",
            "m2po+dual_clip+token_mask",
            "m2po+dual_clip+seq_mask",
        }
        assert len(s["entropy"]) == len(s["tokens"]) and all(e >= 0 for e in s["entropy"])
    assert any(" " in t for s in train for t in s["tokens"]), "decode([id]) keeps a word's leading space"
    answers = [s for s in samples if s["kind"] == "eval"]
    assert sorted({s["step"] for s in answers}) == [0, 2] and {s["eval_set"] for s in answers} == {"gsm8k"}
    assert [s["index"] for s in answers if s["step"] == 0] == [0, 1, 2]
    assert {s["reference"] for s in answers} == {a for _, a in EVAL}
    assert all(s["correct"] == (s["reward"] == 1.0) for s in answers)
    # math-verify's verdict agrees with the boxed answer the model wrote
    for s in answers:
        boxed = s["response"].split("\\boxed{", 1)[1].split("}", 1)[0] if "\\boxed{" in s["response"] else None
        if boxed is not None and boxed.strip() == s["reference"]:
            assert s["correct"], s
