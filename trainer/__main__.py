import logging
import os
import sys

from trainer.cli import main

code = main()
if int(os.environ.get("WORLD_SIZE", "1")) > 1:
    # A torchrun rank leaves without the interpreter's finalization. By now the run has closed
    # everything it owns (checkpoint committed, metrics pushed, and, unless it failed, the process
    # group torn down after a barrier); finalization would still destroy gloo's native objects and
    # join torch's helper threads. About one two-node run in ten had a rank abort after its last update ("terminate
    # called without an active exception", native, so no Python stack): that node's exit code
    # failed a finished run, and the other node's torchrun waited 300 s for it in its exit barrier.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
