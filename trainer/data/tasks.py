"""Tasks: where prompts come from, how they are shown to the model, and how responses score.

- `arithmetic`: procedural sums ("37+5=" -> "42"), generated offline from the run's seed. The
  training reward is dense (arithmetic_reward: 1.0 for the exact answer then EOS, partial credit
  for a number close to it), so a random-init tiny model improves within a minute on a CPU.
  Evaluation uses exact match.
  With answer_format 'boxed' (for instruct models) the question is asked in words and the reward
  is 1 for the right integer in the last \\boxed{}, 0.1 for a wrong boxed integer, else 0.
- `forks`: restate-and-decide, a CPU task in an LLM's regime. The prompt lists pairs of distinct
  letters ("ca?bd?="); the answer restates each pair and decides its order ("ca>bd<": by the
  alphabet, or with fork_rule 'table' by a fixed arbitrary order of each pair, learnt only pair
  by pair, like facts, so the reward keeps rising for thousands of updates). After a
  warm-up the restated letters and the EOS are near-deterministic (log r stays near 0 at any
  staleness), and the one '<' or '>' per pair is a forking token that decides the reward. The
  reward, (fraction of positions right)^fork_reward_power, needs every decision right at once, so
  small per-token drift moves it a lot (rewards.forks_reward). With the tiny model's character
  tokens, response position 3i+2 is decision i (`decision_positions`), which the trainer uses to
  log M2 and mask/clip fractions per token class (trainer/algo/token_classes.py). A warm-up from random
  init needs `task.demonstrations` (trainer/rollout/demonstrations.py).
- `math`: problems with answers from a JSONL file or a Hugging Face dataset; reward 1/0 from
  math-verify on the last \\boxed{} answer.

Eval sets are scored by their own rule: 'arithmetic' and 'forks' by exact match, benchmark sets by
math-verify.
"""

from __future__ import annotations

import random
import string

from trainer.data.benchmarks import DataError, Problem, fill_prompt, load_benchmark, load_train_file
from trainer.rollout.rewards import MathVerifier, RewardBatch, arithmetic_reward, boxed_integer_reward, forks_reward

ARITHMETIC_EVAL_SEED = 20251001
ARITHMETIC_EVAL_SIZE = 256  # problems of the procedural eval set when eval_max_problems is null
ARITHMETIC_ALPHABET = "0123456789+="
FORKS_EVAL_SEED = 20251002
FORKS_TABLE_SEED = 20251003
FORKS_EVAL_SIZE = 256
FORKS_MARKS = "?=<>"  # a pair's decision slot in the prompt, the prompt's end, the two decisions
TEXT_ALPHABET = string.printable


class Task:
    name: str
    alphabet: str  # characters the tiny preset's tokenizer must cover

    def sample(self, rng: random.Random, n: int) -> list[Problem]:
        raise NotImplementedError

    def prompt_text(self, problem: Problem) -> str:
        raise NotImplementedError

    def train_rewards(self, problems: list[Problem], responses: list[str], finished: list[bool]) -> RewardBatch:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def decision_positions(self) -> list[int] | None:
        """Response positions (character tokens) of the forking decisions; None: not known."""
        return None


class ArithmeticTask(Task):
    name = "arithmetic"
    alphabet = ARITHMETIC_ALPHABET

    def __init__(self, min_digits: int = 1, max_digits: int = 1, num_terms: int = 2, answer_format: str = "bare"):
        self.min_digits, self.max_digits, self.num_terms = min_digits, max_digits, num_terms
        self.answer_format = answer_format
        if answer_format == "boxed":
            self.alphabet = TEXT_ALPHABET

    def _operand(self, rng: random.Random) -> int:
        digits = rng.randint(self.min_digits, self.max_digits)
        low = 0 if digits == 1 else 10 ** (digits - 1)
        return rng.randint(low, 10**digits - 1)

    def sample(self, rng: random.Random, n: int) -> list[Problem]:
        out = []
        for _ in range(n):
            terms = [self._operand(rng) for _ in range(self.num_terms)]
            out.append(Problem("+".join(map(str, terms)), str(sum(terms))))
        return out

    def prompt_text(self, problem: Problem) -> str:
        if self.answer_format == "boxed":
            return f"What is {problem.question}? Put the final answer in \\boxed{{}}."
        return f"{problem.question}="

    def train_rewards(self, problems, responses, finished):
        if self.answer_format == "boxed":
            return RewardBatch.of_scores([boxed_integer_reward(r, p.answer) for p, r in zip(problems, responses)])
        return RewardBatch.of_scores(
            [arithmetic_reward(r, f, p.answer) for p, r, f in zip(problems, responses, finished)]
        )

    def solved(self, problems, responses, finished) -> RewardBatch:
        """Exact-match accuracy, the eval rule."""
        if self.answer_format == "boxed":
            return RewardBatch.of_scores(
                [1.0 if boxed_integer_reward(r, p.answer) == 1.0 else 0.0 for p, r in zip(problems, responses)]
            )
        return RewardBatch.of_scores(
            [1.0 if f and r == p.answer else 0.0 for p, r, f in zip(problems, responses, finished)]
        )

    def eval_problems(self, limit: int) -> list[Problem]:
        return self.sample(random.Random(ARITHMETIC_EVAL_SEED), limit)


class ForksTask(Task):
    name = "forks"

    def __init__(self, pairs: int = 4, letters: int = 8, reward_power: float = 8.0, rule: str = "alphabet"):
        self.pairs, self.reward_power, self.rule = pairs, reward_power, rule
        self.letters = string.ascii_lowercase[:letters]
        draw = random.Random(FORKS_TABLE_SEED)  # the same table in every run: it is the task, not a seed's
        self.lesser = {
            (x, y): (x if draw.random() < 0.5 else y) for i, x in enumerate(self.letters) for y in self.letters[i + 1 :]
        }
        self.alphabet = self.letters + FORKS_MARKS

    def sample(self, rng: random.Random, n: int) -> list[Problem]:
        out = []
        for _ in range(n):
            pairs = [rng.sample(self.letters, 2) for _ in range(self.pairs)]
            question = "".join(f"{a}{b}?" for a, b in pairs)
            answer = "".join(f"{a}{b}{'<' if self.precedes(a, b) else '>'}" for a, b in pairs)
            out.append(Problem(question, answer))
        return out

    def precedes(self, a: str, b: str) -> bool:
        """Whether a comes before b: in the alphabet, or in the fixed table (an arbitrary order of
        each pair, which a model can only memorise pair by pair: no order to generalise from)."""
        if self.rule == "alphabet":
            return a < b
        return self.lesser[(min(a, b), max(a, b))] == a

    def prompt_text(self, problem: Problem) -> str:
        return f"{problem.question}="

    def train_rewards(self, problems, responses, finished):
        return RewardBatch.of_scores(
            [forks_reward(r, f, p.answer, self.reward_power) for p, r, f in zip(problems, responses, finished)]
        )

    def solved(self, problems, responses, finished) -> RewardBatch:
        """Exact match then EOS, the eval rule."""
        return RewardBatch.of_scores(
            [1.0 if f and r == p.answer else 0.0 for p, r, f in zip(problems, responses, finished)]
        )

    def eval_problems(self, limit: int) -> list[Problem]:
        return self.sample(random.Random(FORKS_EVAL_SEED), limit)

    def decision_positions(self) -> list[int]:
        return [3 * i + 2 for i in range(self.pairs)]


class MathTask(Task):
    name = "math"
    alphabet = TEXT_ALPHABET

    def __init__(self, problems: list[Problem], verifier: MathVerifier, prompt_template: str):
        self.problems = problems
        self.verifier = verifier
        self.prompt_template = prompt_template

    def sample(self, rng: random.Random, n: int) -> list[Problem]:
        return [self.problems[rng.randrange(len(self.problems))] for _ in range(n)]

    def prompt_text(self, problem: Problem) -> str:
        return fill_prompt(self.prompt_template, problem.question)

    def train_rewards(self, problems, responses, finished):
        return self.verifier.score(responses, [p.answer for p in problems])

    def close(self) -> None:
        self.verifier.close()


def load_train_problems(task_cfg) -> list[Problem]:
    if task_cfg.train_file:
        return load_train_file(task_cfg.train_file)
    try:
        import datasets  # only when a hub dataset is asked for

        rows = datasets.load_dataset(task_cfg.hf_dataset, split=task_cfg.hf_split)
    except Exception as exc:  # not installed, offline, unknown name
        raise DataError(f"task.hf_dataset: cannot load {task_cfg.hf_dataset!r}: {exc}") from None
    keys = rows.column_names
    q = next((k for k in ("problem", "question", "prompt") if k in keys), None)
    a = next((k for k in ("answer", "final_answer", "solution") if k in keys), None)
    if q is None or a is None:
        raise DataError(f"task.hf_dataset: {task_cfg.hf_dataset!r} has no question/answer columns (has {keys})")
    return [Problem(str(r[q]), str(r[a])) for r in rows]


def build_task(task_cfg, verifier: MathVerifier | None = None) -> Task:
    if task_cfg.name == "arithmetic":
        return ArithmeticTask(task_cfg.min_digits, task_cfg.max_digits, task_cfg.num_terms, task_cfg.answer_format)
    if task_cfg.name == "forks":
        return forks_task(task_cfg)
    verifier = verifier or MathVerifier(task_cfg.reward_workers, task_cfg.reward_timeout_s)
    return MathTask(load_train_problems(task_cfg), verifier, task_cfg.prompt_template)


def forks_task(task_cfg) -> ForksTask:
    return ForksTask(task_cfg.fork_pairs, task_cfg.fork_letters, task_cfg.fork_reward_power, task_cfg.fork_rule)


class EvalSet:
    """One evaluation set: problems, the prompt format, the accuracy rule, and the characters its
    prompts use (the tiny model's tokenizer must cover them)."""

    def __init__(self, name: str, problems: list[Problem], prompt, score, alphabet: str = TEXT_ALPHABET):
        self.name, self.problems, self.prompt_text, self.score = name, problems, prompt, score
        self.alphabet = alphabet


def tokenizer_alphabet(task: Task, eval_sets: list[EvalSet]) -> str:
    """Every character the run's prompts and answers use: the task's and each eval set's."""
    return task.alphabet + "".join(es.alphabet for es in eval_sets if es.alphabet != task.alphabet)


def build_eval_sets(task_cfg, task: Task, verifier_factory) -> list[EvalSet]:
    """Load every eval set up front, so a missing file fails before any model loads."""
    sets = []
    for name in task_cfg.eval_sets:
        if name == "arithmetic":
            arith = task if isinstance(task, ArithmeticTask) else ArithmeticTask()
            limit = task_cfg.eval_max_problems or ARITHMETIC_EVAL_SIZE  # a procedural set has no end
            sets.append(EvalSet(name, arith.eval_problems(limit), arith.prompt_text, arith.solved, arith.alphabet))
        elif name == "forks":
            forks = task if isinstance(task, ForksTask) else forks_task(task_cfg)
            limit = task_cfg.eval_max_problems or FORKS_EVAL_SIZE
            sets.append(EvalSet(name, forks.eval_problems(limit), forks.prompt_text, forks.solved, forks.alphabet))
        else:
            verifier = verifier_factory()
            sets.append(
                EvalSet(
                    name,
                    load_benchmark(name, task_cfg.eval_max_problems),
                    lambda p: fill_prompt(task_cfg.prompt_template, p.question),
                    lambda problems, responses, finished, v=verifier: v.score(responses, [p.answer for p in problems]),
                )
            )
    return sets
