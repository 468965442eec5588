"""A typical W&B training script, changed in one line: `import opl as wandb` instead of `import wandb`.

    OPL_URL=http://127.0.0.1:8000 OPL_TOKEN=opl_... python examples/tracking/wandb_style.py --steps 50

It logs odd keys as W&B users write them, a step counted in tokens (past 2^31), a histogram, a
table of samples, summaries, a metric definition and an alert; --fail ends it with exit code 1,
which ends the run failed. It prints {"run": id, "points": n} with the number of points it logged.
"""

import argparse
import json
import math
import random
from dataclasses import dataclass, field

import opl as wandb


@dataclass
class Optim:
    lr: float = 1e-5
    betas: list = field(default_factory=lambda: [0.9, 0.95])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--project", default="wandb-style")
    parser.add_argument("--name", default="grpo-7b")
    parser.add_argument("--fail", action="store_true")
    args = parser.parse_args()

    run = wandb.init(project=args.project, name=args.name, config=args, entity="ignored", job_type="train")
    wandb.config.update({"optim": Optim(), "model": {"name": "qwen-7b", "layers": 28}})
    wandb.config.group_size = 8
    wandb.define_metric("eval/accuracy", summary="max")
    rng = random.Random(0)
    points = 0
    tokens_per_step = 300_000_000  # steps counted in tokens pass 2^31 after 8 steps
    for i in range(args.steps):
        step = (i + 1) * tokens_per_step
        reward = 1 - math.exp(-i / 10) + rng.uniform(-0.05, 0.05)
        values = {
            "train/reward": reward,
            "train/rewards/<lambda>/mean": reward / 2,
            "grpo-7b - train/kl": 0.01 * i,
            "Accuracy (val)": reward * 0.9,
            "loss [%]": 100 * (1 - reward),
            "#tokens": float(step),
            "Genauigkeit/Übung": reward,
            "lr": wandb.config.optim["lr"],
        }
        if i % 5 == 4:
            values["eval/accuracy"] = reward
            values["train/advantages"] = wandb.Histogram([rng.gauss(0, 1) for _ in range(256)])
        wandb.log(values, step=step)
        points += sum(1 for v in values.values() if isinstance(v, float | int))
    table = wandb.Table(columns=["prompt", "response", "reward"])
    table.add_data("1+1=", "2", 1.0)
    table.add_data("2+2=", "5", 0.0)
    wandb.log({"samples": table}, step=args.steps * tokens_per_step)
    wandb.summary["best_reward"] = max(reward, 0.0)
    run.summary.update({"final/tokens": args.steps * tokens_per_step})
    wandb.watch(None)
    wandb.alert(title="reward plateau", text=f"reward {reward:.3f} after {args.steps} steps", level="WARN")
    print(json.dumps({"run": run.id, "points": points}), flush=True)
    wandb.finish(exit_code=1 if args.fail else 0)


if __name__ == "__main__":
    main()
