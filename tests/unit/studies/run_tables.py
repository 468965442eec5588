"""Crafted tables of runs for the claims' tests: a study in the paper's regime, and its variations."""

from orchestrator.studies.run_table import RUN_COLUMNS

STALENESS = 256
# per-seed offsets shared by every cell: seed effects the pairing removes
SEED_OFFSETS = (-0.02, -0.01, 0.0, 0.01, 0.02)
NOISE = (0.002, -0.001, 0.0, 0.001, -0.002)  # small within-pair differences: tight intervals


def in_regime(**cells) -> list[dict]:
    """5 seeds of grpo at 0 and grpo, m2po, no_clip at 256, long enough and in the paper's regime:
    stale clip 0.05 below on-policy, M2PO and no-clip level with it. `cells` overrides per
    (staleness, objective) any column: a value, or a function of the seed index."""
    base = {
        (0, "grpo"): {"tail": 0.8, "clipped_fraction": 0.0001},
        (STALENESS, "grpo"): {"tail": 0.75, "clipped_fraction": 0.012},
        (STALENESS, "m2po"): {"tail": 0.8, "masked_fraction": 0.0006},
        (STALENESS, "no_clip"): {"tail": 0.79},
    }
    rows = []
    for (s, objective), columns in base.items():
        override = cells.get(f"{objective}{s}", {})
        for i, (offset, noise) in enumerate(zip(SEED_OFFSETS, NOISE, strict=True)):
            row = {
                "objective": objective,
                "staleness": s,
                "seed": i + 1,
                "warmup": "w1",
                "lr": 1e-6,
                "updates_after_ramp": 3000,
                "m2_median_over_tau": 0.6,
                "masked_fraction": "",
                "clipped_fraction": "",
                "near_deterministic_fraction": 0.8,
                "reward_movement": 0.2,
                "collapsed": 0,
                **columns,
            }
            row["tail"] = row["tail"] + offset + (noise if s else 0)
            for column, value in override.items():
                row[column] = value(i) if callable(value) else value
            rows.append(row)
    return rows


def as_csv(rows: list[dict]) -> str:
    lines = [",".join(RUN_COLUMNS)]
    lines += [",".join(str(row.get(c, "")) for c in RUN_COLUMNS) for row in rows]
    return "\n".join(lines) + "\n"
