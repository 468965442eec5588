"""OffPolicy Lab's bundled trainer: stale-k and asynchronous off-policy RL (M2PO and baselines).

Run `python -m trainer run --config FILE.yaml --run-dir DIR [--resume]`. This package never
imports the dashboard; a run is a RunConfig in, metrics and checkpoints out.

Where to read (loop.py's `Trainer` composes the parts, each a module you can read in one sitting):
    config.py         RunConfig, the one schema of a run; derived sizes
    loop.py           the loop: generate, queue, train, evaluate, checkpoint, report
    stopping.py       signals, the stop protocol and exit codes (cli.py installs the handlers)
    rollout/          generation.py: stale_k rollouts (async_gen.py: the asynchronous generator
                      process); batch.py the batch, log-probs and the hf engine; rewards
    algo/             objectives.py the losses; m2po_algorithm1.py the paper's Algorithm 1,
                      literally (the reference of objectives.m2po_mask); advantages, diagnostics
    policy/           update.py the optimizer updates on one batch; models, precision, FSDP
    data/             tasks, the math eval sets, evaluation.py: accuracy on the eval sets
    ckpt/             checkpointer.py save, resume, warm start (checkpoint.py: the files)
    telemetry/        metric_log.py metrics.jsonl, the pusher and system metrics; samples.py the
                      rollout samples

The modules at the top level (config, vocabulary, metric_keys, loss_keys, reporting, run_markers)
and ckpt/checkpoint_files.py never import torch: the dashboard reads them. No package's
__init__ imports anything.
"""
