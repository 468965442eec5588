"""The stop protocol (trainer/stopping.py): which signal wins, and that the log line and the exit
code say the same thing however the signals interleave with the checkpoint."""

import signal

import pytest

from trainer.run_markers import CANCEL_MARKER, NO_CHECKPOINT_MARKER
from trainer.stopping import (
    CANCEL,
    CANCEL_WITHOUT_CHECKPOINT,
    EX_CANCELLED,
    EX_TEMPFAIL,
    REQUEUE,
    StopProtocol,
    StopRequest,
)


def _alone(level: int) -> int:
    return level  # one process: the max over ranks is its own level


@pytest.mark.parametrize(
    "signals, level",
    [
        ([signal.SIGUSR1], REQUEUE),
        ([signal.SIGTERM], REQUEUE),
        ([signal.SIGINT], CANCEL),
        # Python runs pending handlers in signal-number order: SIGINT's before SIGTERM's, whichever
        # came first. A later requeue signal must not turn the cancel back into a requeue.
        ([signal.SIGINT, signal.SIGTERM], CANCEL),
        ([signal.SIGTERM, signal.SIGINT], CANCEL),
    ],
)
def test_a_cancel_outranks_a_requeue_in_any_order(tmp_path, signals, level):
    stop = StopRequest()
    for signum in signals:
        stop.note(signum, tmp_path)
    assert stop.level == level and stop.signal == signals[-1]


def test_the_markers_turn_sigterm_into_a_cancel_with_or_without_checkpoint(tmp_path):
    (tmp_path / CANCEL_MARKER).write_text("")
    stop = StopRequest()
    stop.note(signal.SIGTERM, tmp_path)  # Slurm's scancel after the orchestrator's cancel
    assert stop.level == CANCEL
    (tmp_path / NO_CHECKPOINT_MARKER).write_text("")
    stop.note(signal.SIGTERM, tmp_path)
    assert stop.level == CANCEL_WITHOUT_CHECKPOINT


def test_a_cancel_that_arrives_while_the_checkpoint_is_written_is_the_exit_code_and_the_line(tmp_path, capsys):
    """The demo's Ctrl-C: SIGTERM reaches the whole job (a requeue), its supervisor answers with
    SIGINT (a cancel, which its exit.json records) while the trainer is already checkpointing."""
    stop = StopRequest()
    stop.note(signal.SIGTERM, tmp_path)
    protocol = StopProtocol(stop, _alone)
    assert protocol.due()
    saved = []

    def save():
        saved.append(True)
        stop.note(signal.SIGINT, tmp_path)

    assert protocol.finish(7, save) == EX_CANCELLED
    out = capsys.readouterr().out
    assert saved and "cancelled at update 7" in out and "stopping for requeue" not in out


def test_a_plain_requeue_checkpoints_and_exits_75(tmp_path, capsys):
    stop = StopRequest()
    stop.note(signal.SIGUSR1, tmp_path)
    protocol = StopProtocol(stop, _alone)
    saved = []
    assert protocol.due() and protocol.finish(3, lambda: saved.append(True)) == EX_TEMPFAIL
    assert saved and "stopping for requeue at update 3" in capsys.readouterr().out


def test_another_ranks_cancel_is_this_ranks_too(tmp_path):
    stop = StopRequest()  # this rank saw nothing
    protocol = StopProtocol(stop, lambda level: max(level, CANCEL))  # another rank holds a cancel
    assert protocol.due() and protocol.agreed == CANCEL
    assert protocol.finish(1, lambda: None) == EX_CANCELLED


def test_nothing_asked_is_not_due():
    assert not StopProtocol(StopRequest(), _alone).due()


def test_a_signal_handled_as_the_all_reduce_returns_is_not_lost(tmp_path):
    """The handler runs between bytecodes, so it can land right after the all-reduce read the old
    level: the request must keep it for the next iteration (it was once overwritten with 0)."""
    stop = StopRequest()

    def all_reduce_then_signal(level):
        stop.note(signal.SIGUSR1, tmp_path)  # arrives while the collective had 0 from this rank
        return level

    protocol = StopProtocol(stop, all_reduce_then_signal)
    assert not protocol.due()  # this iteration went on with what the ranks had sent
    assert stop.level == REQUEUE
    assert StopProtocol(stop, _alone).due() and protocol.due()  # the next iteration stops
