"""The bounded waits that the fault rows and the live Slurm tests end and start with: a service that
never answers fails the wait with its name and the last reason, after the bound and not before."""

import socket

import pytest

from tests.faults.stack import ServiceDown, wait_answers
from tests.slurm_rest import SlurmrestdDown, slurmrestd_down_reason, wait_for_slurmrestd


def refused_url() -> str:
    with socket.socket() as s:  # a port nothing listens on once this socket is closed
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_a_service_that_never_answers_fails_the_wait_naming_it_and_why():
    def probe():
        raise ConnectionRefusedError("[Errno 111] Connection refused")

    with pytest.raises(ServiceDown) as err:
        wait_answers("the stack's redis-server on port 6391", probe, timeout=0.3, every=0.05)
    assert str(err.value) == (
        "the stack's redis-server on port 6391 did not answer within 0 s "
        "(ConnectionRefusedError: [Errno 111] Connection refused)"
    )


def test_a_service_that_comes_back_within_the_bound_ends_the_wait():
    answers = iter([False, False, True])
    wait_answers("the stack's Celery worker", lambda: next(answers), timeout=5, every=0.01)


def test_a_silent_slurmrestd_fails_the_wait_naming_the_cluster_and_its_url(tmp_path):
    key = tmp_path / "jwt.key"
    key.write_bytes(b"k" * 32)
    env = {"SLURM_REST_URL": refused_url(), "SLURM_REST_USER": "slurmtest", "SLURM_JWT_KEY_FILE": str(key)}
    assert "unreachable" in slurmrestd_down_reason(env)
    with pytest.raises(SlurmrestdDown) as err:
        wait_for_slurmrestd(env, "slurm-22.05", timeout=1)
    message = str(err.value)
    assert message.startswith(f"slurm-22.05: slurmrestd at {env['SLURM_REST_URL']} did not answer within 1 s")
    assert "Connection refused" in message
