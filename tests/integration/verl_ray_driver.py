"""Run by .venv-verl's Python (verl 0.9.1, Ray on CPU): verl's own Tracking built inside Ray actors
the way main_ppo's TaskRunner builds it, with trainer.logger=['console','opl'] and no register()
call anywhere (verl loads the client's `verl.plugins` entry point itself). Two runs:

- "verl-v1": the V1 TaskRunner's shape: training raises, and its `finally` calls
  tracking.finish(exit_code=1);
- "verl-v0": the V0 trainer's shape: Tracking is a local of fit() and verl finishes it when it is
  dropped as fit returns.

Prints one JSON line: {"runs": {name: {"id", "dir", "sent"}}}."""

import json
import math
import sys

import ray

STEPS = 3


@ray.remote
class TaskRunner:
    def run(self, name: str, fail: bool) -> dict:
        from verl.utils.tracking import Tracking  # in the actor's process: nothing registered here by hand

        config = {
            "trainer": {"project_name": "verl-lab", "experiment_name": name, "logger": ["console", "opl"]},
            "actor_rollout_ref": {"actor": {"clip_ratio_low": 0.2, "ppo_mini_batch_size": 8}},
            "algorithm": {"adv_estimator": "grpo", "rollout_correction": {"rollout_is": "token"}},
        }
        tracking = Tracking(
            project_name="verl-lab", experiment_name=name, default_backend=["console", "opl"], config=config
        )
        run = tracking.logger["opl"].run
        sent = 0
        try:
            for step in range(1, STEPS + 1):
                data = {
                    "actor/pg_loss": 0.1 * step,
                    "actor/pg_clipfrac": 0.01 * step,
                    "critic/score/mean": math.nan if step == 2 else step / 10,
                    "rollout_corr/training_ppl": 1.0 + step / 100,
                    "training/global_step": step,
                }
                tracking.log(data=data, step=step)
                sent += len(data)
            if fail:
                raise RuntimeError("the trainer crashed")
        except RuntimeError:
            tracking.finish(exit_code=1)  # TaskRunnerV1.run's finally
        answer = {"id": run.id, "dir": str(run.dir), "sent": sent}
        del tracking  # V0: fit()'s local Tracking is dropped when fit returns; verl's __del__ finishes it
        return answer


def main() -> None:
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=True)
    try:
        runs = {}
        for name, fail in (("verl-v1", True), ("verl-v0", False)):
            runner = TaskRunner.remote()
            runs[name] = ray.get(runner.run.remote(name, fail))
            ray.kill(runner)
    finally:
        ray.shutdown()
    print(json.dumps({"runs": runs}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
