import os

import pytest

from tests.faults.stack import EmbeddedStack


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/faults" in str(item.fspath):
            item.add_marker(pytest.mark.faults)


@pytest.fixture
def stack(tmp_path):
    """The embedded demo stack on a SQLite file of its own (see stack.py)."""
    s = EmbeddedStack(
        tmp_path,
        redis_url=os.environ["REDIS_URL"],
        extra_env={"OPL_CANCEL_GRACE_SECONDS": "20", "OPL_SUBMIT_STALE_SECONDS": "10"},
    )
    try:
        yield s.start()
    finally:
        s.close()
