"""Rule-based rewards. Kept free of torch so reward worker processes start fast.

- `arithmetic_reward`: exact answer 1, a close number partial credit (the procedural task).
- `MathVerifier`: 1/0 from math-verify on the last \\boxed{} answer, as in the paper's
  `latex_math.compute_score`. math-verify's own timeout uses signal.alarm, which only works in a
  main thread, so checks run in a process pool (each worker runs tasks in its main thread, where
  the signal timeout works), and the trainer also bounds each item's wait; a pool whose worker is
  stuck past that bound is replaced.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import signal

from trainer.benchmarks import last_boxed

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


def boxed_integer_reward(response: str, answer: str) -> float:
    """1 for the right integer in the last \\boxed{}, 0.1 for another integer there, else 0."""
    boxed = last_boxed(response)
    if boxed is None:
        return 0.0
    text = boxed.strip().replace(",", "")
    if text.lstrip("-").isdigit():
        return 1.0 if int(text) == int(answer) else 0.1
    return 0.0


def math_verify_score(response: str, answer: str, timeout_s: float = 5.0) -> float:
    from math_verify import parse, verify

    boxed = last_boxed(response)
    if boxed is None:
        return 0.0
    try:
        gold = parse(f"${answer}$", parsing_timeout=timeout_s)
        pred = parse(f"$\\boxed{{{boxed}}}$", parsing_timeout=timeout_s)
        if not gold or not pred:
            return 0.0
        return 1.0 if verify(gold, pred, timeout_seconds=timeout_s) else 0.0
    except Exception:  # a malformed answer is a wrong answer, never a crashed run
        return 0.0


def ignore_stop_signals() -> None:
    """Child processes leave SIGTERM/SIGUSR1 to the trainer, which checkpoints and then stops them
    (a cluster signals the whole process group)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


class MathVerifier:
    """Scores (response, answer) pairs in a process pool with a per-item timeout."""

    def __init__(self, workers: int = 2, timeout_s: float = 5.0):
        self.workers = workers
        self.timeout_s = timeout_s
        self._pool: cf.ProcessPoolExecutor | None = None
        self.timeouts = 0

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

    def score(self, responses: list[str], answers: list[str]) -> list[float]:
        pool = self._ensure_pool()
        futures = [pool.submit(math_verify_score, r, a, self.timeout_s) for r, a in zip(responses, answers)]
        # A stuck item may hold a worker; allow the queue ahead of it to drain before giving up.
        deadline_per_item = self.timeout_s * 2 + 1.0
        out, stuck = [], False
        for fut in futures:
            try:
                out.append(fut.result(timeout=deadline_per_item))
            except cf.TimeoutError:
                out.append(0.0)
                self.timeouts += 1
                stuck = True
            except cf.process.BrokenProcessPool:
                out.append(0.0)
                stuck = True
        if stuck:
            self._replace_pool()
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
