"""Rule-based rewards. Kept free of torch so reward worker processes start fast.

- `arithmetic_reward`: exact answer 1, a close number partial credit (the procedural task).
- `forks_reward`: (fraction of the answer's positions right)^power (the restate-and-decide task).
- `MathVerifier`: 1/0 from math-verify on the last \\boxed{} answer, as in the paper's
  `latex_math.compute_score`. math-verify's own timeout uses signal.alarm, which only works in a
  main thread and only takes whole seconds, so checks run in a process pool (each worker runs
  tasks in its main thread, where the signal timeout works), and the trainer also bounds each
  item's wait; a pool whose worker is stuck past that bound is replaced.

A reward that fails is never a silent 0: every score comes with a status ("ok", "error",
"timeout"), `RewardBatch` counts them per step, and the trainer logs the counts, warns, and stops
the run when every item of a step failed (see trainer.loop).
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import multiprocessing as mp
import signal
from dataclasses import dataclass, field

from trainer.data.benchmarks import last_boxed

OK, ERROR, TIMEOUT = "ok", "error", "timeout"


class RewardFailure(RuntimeError):
    """Every reward of a step failed: training on all-zero rewards would be silently wrong."""


@dataclass
class RewardBatch:
    """Scores of one batch of responses, with how many of them could not be computed."""

    scores: list[float]
    errors: int = 0
    timeouts: int = 0
    first_failure: str | None = None  # the first error's message, for the log
    statuses: list[str] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return self.errors + self.timeouts

    @property
    def all_failed(self) -> bool:
        return bool(self.scores) and self.failed == len(self.scores)

    @classmethod
    def of_scores(cls, scores: list[float]) -> RewardBatch:
        """Scores from a rule that cannot fail (the arithmetic rewards)."""
        return cls(list(scores), statuses=[OK] * len(scores))


def check_rewards(rewards: RewardBatch, where: str, log) -> None:
    """Failed rewards are counted (metrics), warned about, and fatal when they are all of a step:
    a run must never train or report on rewards that silently became 0."""
    if not rewards.failed:
        return
    what = (
        f"{where}: {rewards.errors} reward errors and {rewards.timeouts} timeouts out of {len(rewards.scores)}; "
        f"first: {rewards.first_failure}"
    )
    if rewards.all_failed:
        raise RewardFailure(f"every reward failed at {what}")
    log.warning("%s", what)


def arithmetic_reward(response: str, finished: bool, answer: str) -> float:
    """1.0 for exactly the answer then EOS; partial credit for a number close to it.

    A response that is a whole number followed by EOS earns 0.9 * max(0, 1 - |x - answer| / scale)
    with scale = max(5, answer / 2); anything else earns 0. The credit for being close gives a
    random-init model a gradient from the first step (it learns the format, then to get closer)
    while only the exact answer earns the full reward.
    """
    if not finished or not response.isdigit():
        return 0.0
    got, want = int(response), int(answer)
    if got == want and response == answer:
        return 1.0
    scale = max(5.0, want / 2)
    return 0.9 * max(0.0, 1.0 - abs(got - want) / scale)


def forks_positions_right(response: str, finished: bool, answer: str) -> tuple[int, int]:
    """(positions right, positions) of a forks answer: each of its characters, and its end.

    Position i is right when the response has the answer's character there; the last position is
    right when the response ends (EOS) exactly after the answer's length. A response that runs on,
    stops early or never stops loses that last position and every character it does not match.
    """
    right = sum(1 for got, want in zip(response, answer) if got == want)
    return right + int(finished and len(response) == len(answer)), len(answer) + 1


def forks_reward(response: str, finished: bool, answer: str, power: float = 8.0) -> float:
    """(positions right / positions) ** power: 1 only for the exact answer then EOS.

    A steep power makes the reward roughly the product of per-position accuracies, as an LLM's
    answer is right only when a long chain of steps is: with 13 positions and power 8, one wrong
    position costs 47% of the reward, so a few percent of probability moved on each forking token
    moves the reward by tens of percent. Power 1 gives a warm-up dense credit.
    """
    right, total = forks_positions_right(response, finished, answer)
    return (right / total) ** power


def boxed_integer_reward(response: str, answer: str) -> float:
    """1 for the right integer in the last \\boxed{}, 0.1 for another integer there, else 0."""
    boxed = last_boxed(response)
    if boxed is None:
        return 0.0
    text = boxed.strip().replace(",", "")
    if text.lstrip("-").isdigit():
        return 1.0 if int(text) == int(answer) else 0.1
    return 0.0


def whole_seconds(timeout_s: float) -> int:
    """math-verify hands its timeout to signal.alarm, which raises TypeError for a float."""
    return max(1, math.ceil(timeout_s))


def math_verify_outcome(response: str, answer: str, timeout_s: float = 5.0) -> tuple[float, str, str | None]:
    """(score, status, detail) of one response. A response without a boxed answer, or whose answer
    does not parse, is wrong (status ok, score 0). A reference answer that does not parse, or an
    exception or timeout inside math-verify, is a failure of the reward itself."""
    from math_verify import parse, verify
    from math_verify.errors import TimeoutException

    seconds = whole_seconds(timeout_s)
    try:
        gold = parse(f"${answer}$", parsing_timeout=seconds, raise_on_error=True)
        if not gold:
            return 0.0, ERROR, f"reference answer {answer!r} does not parse"
        boxed = last_boxed(response)
        if boxed is None:
            return 0.0, OK, None
        pred = parse(f"$\\boxed{{{boxed}}}$", parsing_timeout=seconds, raise_on_error=True)
        if not pred:
            return 0.0, OK, None
        right = verify(gold, pred, timeout_seconds=seconds, raise_on_error=True)
        return (1.0 if right else 0.0), OK, None
    except TimeoutException:
        return 0.0, TIMEOUT, f"math-verify timed out after {seconds} s"
    except Exception as exc:
        return 0.0, ERROR, f"{type(exc).__name__}: {exc}"


def ignore_stop_signals() -> None:
    """Child processes (reward pool, async generator) leave SIGTERM/SIGUSR1 (the cluster's stop)
    and SIGINT (a person's cancel, or Ctrl-C on the process group) to the trainer, which
    checkpoints and then stops them."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class MathVerifier:
    """Scores (response, answer) pairs in a process pool with a per-item timeout."""

    def __init__(self, workers: int = 2, timeout_s: float = 5.0):
        self.workers = workers
        self.timeout_s = timeout_s
        self._pool: cf.ProcessPoolExecutor | None = None

    def _ensure_pool(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(
                self.workers, mp_context=mp.get_context("spawn"), initializer=ignore_stop_signals
            )
        return self._pool

    def _replace_pool(self) -> None:
        if self._pool is not None:
            for proc in list(getattr(self._pool, "_processes", {}).values()):
                proc.terminate()
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = None

    def score(self, responses: list[str], answers: list[str]) -> RewardBatch:
        pool = self._ensure_pool()
        futures = [pool.submit(math_verify_outcome, r, a, self.timeout_s) for r, a in zip(responses, answers)]
        # A stuck item may hold a worker; allow the queue ahead of it to drain before giving up.
        deadline_per_item = whole_seconds(self.timeout_s) * 2 + 1.0
        out = RewardBatch([])
        stuck = False
        for fut in futures:
            try:
                score, status, detail = fut.result(timeout=deadline_per_item)
            except cf.TimeoutError:
                score, status, detail = 0.0, TIMEOUT, f"no answer from the reward pool within {deadline_per_item:.0f} s"
                stuck = True
            except cf.process.BrokenProcessPool as exc:
                score, status, detail = 0.0, ERROR, f"reward pool broke: {exc}"
                stuck = True
            out.scores.append(score)
            out.statuses.append(status)
            if status == ERROR:
                out.errors += 1
            elif status == TIMEOUT:
                out.timeouts += 1
            if detail is not None and status != OK and out.first_failure is None:
                out.first_failure = detail
        if stuck:
            self._replace_pool()
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
