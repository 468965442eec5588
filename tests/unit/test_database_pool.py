"""DATABASE_POOL=1 makes web requests borrow PostgreSQL connections instead of opening one each."""

import os
import subprocess
import sys

import pytest
from django.db import connection

PROBE = """
import django
django.setup()
from django.db import connection
pids = set()
for _ in range(20):
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pids.add(cur.fetchone()[0])
    connection.close()  # what Django does at the end of every request
print(len(pids))
"""


def backends_used(pool: bool) -> int:
    settings = connection.settings_dict
    url = (
        f"postgres://{settings['USER']}@{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or 5432}/{settings['NAME']}"
    )
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DATABASE_POOL": "1" if pool else "0",
        "DJANGO_SETTINGS_MODULE": "orchestrator.settings",
    }
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


@pytest.mark.django_db
@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="the pool is psycopg's, for PostgreSQL")
def test_closed_connections_go_back_to_the_pool_only_when_it_is_on():
    assert backends_used(pool=False) == 20  # a new server process for every request
    assert backends_used(pool=True) <= 3  # the pool's few connections, reused
