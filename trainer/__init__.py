"""OffPolicy Lab's bundled trainer: stale-k and asynchronous off-policy RL (M2PO and baselines).

Run `python -m trainer run --config FILE.yaml --run-dir DIR [--resume]`. This package never
imports the dashboard; a run is a RunConfig in, metrics and checkpoints out.

Where to read (loop.py's `Trainer` composes the parts, each a module you can read in one sitting):
    config.py         RunConfig, the one schema of a run; derived sizes
    loop.py           the loop: generate, queue, train, evaluate, checkpoint, report
    generation.py     stale_k rollouts (async_gen.py: the asynchronous generator process)
    update.py         the optimizer updates on one batch; objectives.py the losses
    m2po_algorithm1.py  the paper's Algorithm 1, literally (the reference of objectives.m2po_mask)
    evaluation.py     accuracy on the eval sets
    checkpointer.py   save, resume, warm start (checkpoint.py: the files)
    stopping.py       signals, the stop protocol and exit codes (cli.py installs the handlers)
    metric_log.py     metrics.jsonl, the pusher and system metrics; samples.py the rollout samples
"""
