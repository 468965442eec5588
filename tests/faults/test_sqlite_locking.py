"""The embedded SQLite settings against the pattern behind the demo's "database is locked": a
transaction that reads, then writes, while another process writes. With SQLite's defaults
(deferred BEGIN) the reader's upgrade to a writer fails at once, without waiting; with the
settings' IMMEDIATE transactions, WAL and busy timeout, both writers wait their turn and succeed.
Two real processes on one SQLite file, configured by orchestrator/settings.py."""

import os
import subprocess
import sys

from tests.faults.stack import LOCKED, REPO

SCRIPT = r"""
import os, sys, time, django
os.environ["DJANGO_SETTINGS_MODULE"] = "orchestrator.settings"
django.setup()
from django.db import connection, transaction
role, flags = sys.argv[1], sys.argv[2]

def wait_for(name, timeout):
    deadline = time.monotonic() + timeout
    while not os.path.exists(os.path.join(flags, name)) and time.monotonic() < deadline:
        time.sleep(0.01)

def mark(name):
    open(os.path.join(flags, name), "w").close()

if role == "setup":
    with connection.cursor() as c:
        c.execute("CREATE TABLE t (k INTEGER)")
elif role == "read-then-write":  # like a service that checks state, then updates it
    with transaction.atomic(), connection.cursor() as c:
        c.execute("SELECT count(*) FROM t")
        mark("read")
        wait_for("written", 3)  # under IMMEDIATE the writer waits for us instead
        c.execute("INSERT INTO t VALUES (1)")
elif role == "write":  # like a metrics batch or a state transition meanwhile
    wait_for("read", 10)
    with transaction.atomic(), connection.cursor() as c:
        c.execute("INSERT INTO t VALUES (2)")
        mark("written")
        time.sleep(1)
with connection.cursor() as c:
    c.execute("PRAGMA journal_mode")
    print("ok", c.fetchone()[0])
"""


def test_a_read_then_write_transaction_waits_for_a_concurrent_writer_instead_of_failing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}  # the embedded default
    env.update(OPL_VAR_DIR=str(tmp_path / "var"), PYTHONPATH=str(REPO))
    flags = tmp_path / "flags"
    flags.mkdir()

    def start(role):
        return subprocess.Popen(
            [sys.executable, "-c", SCRIPT, role, str(flags)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    setup = start("setup")
    assert setup.wait(60) == 0, setup.stderr.read()
    reader, writer = start("read-then-write"), start("write")
    outs = {name: (p.wait(60), *p.communicate()) for name, p in (("reader", reader), ("writer", writer))}
    for name, (code, out, err) in outs.items():
        assert LOCKED not in err, f"{name}: {err[-1500:]}"
        assert code == 0 and out.strip() == "ok wal", f"{name}: exit {code}\n{out}\n{err[-1500:]}"
    rows = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM t').fetchone()[0])",
            str(tmp_path / "var" / "opl.sqlite3"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert rows.stdout.strip() == "2"  # both writes are there
