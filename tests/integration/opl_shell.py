"""Run the `opl` command line in-process against a live server, as a user's shell would."""

import io

from opl_client.cli import main


def opl(monkeypatch, url, token, *args):
    """(exit status, stdout) of `opl ARGS` with OPL_URL and OPL_TOKEN set."""
    monkeypatch.setenv("OPL_URL", url)
    monkeypatch.setenv("OPL_TOKEN", token)
    out = io.StringIO()
    code = main([str(a) for a in args], out=out)
    return code, out.getvalue()
