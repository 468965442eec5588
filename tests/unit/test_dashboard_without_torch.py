"""The dashboard starts without torch: Django's set-up and every orchestrator module
(views, URL conf, tasks, migrations, management commands) import with torch, transformers and vLLM
blocked, in a fresh interpreter. What the web process needs from the trainer (the config schema,
metric names and directions, checkpoint folders and pins) lives in torch-free modules:
trainer/config.py, trainer/metric_keys.py with trainer/loss_keys.py, trainer/ckpt/checkpoint_files.py."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BLOCKED = ("torch", "transformers", "vllm")

PROBE = f"""
import importlib, os, pkgutil, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ImportError(f"{{name}} is blocked: the dashboard must not need it")
sys.meta_path.insert(0, Block())
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "orchestrator.settings")
import django
django.setup()
import orchestrator
failed, count = [], 0
for module in pkgutil.walk_packages(orchestrator.__path__, "orchestrator."):
    count += 1
    try:
        importlib.import_module(module.name)
    except Exception as exc:
        failed.append(f"{{module.name}}: {{exc!r}}")
print(count)
print("\\n".join(failed))
"""


def test_every_orchestrator_module_imports_with_torch_blocked():
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    count, *failed = done.stdout.strip().split("\n")
    assert int(count) > 150 and [f for f in failed if f] == []
