"""The alert rules: kinds, their defaults, and the pure checks (no database, no clock of their own).

Metric rules look at the points of one ingested batch, and only at their own keys:
- `nonfinite`: a NaN or infinite actor/pg_loss or actor/grad_norm;
- `reward_drop`: train/reward_mean, smoothed (EMA), fell by `threshold` from its best smoothed value;
- `entropy_floor`: actor/entropy under `threshold`;
- `clip_ceiling`: actor/clip_frac (masked or clipped tokens) over `threshold`.
- `neg_adv_tail`: the runaway A<0 tail: a token with A < 0 has a ratio r = pi_theta/pi_behav over
  `threshold` (actor/ratio_neg_max) while the largest token carries at least TAIL_SHARE of the
  update's sum r|A| (actor/top_token_share_max), on TAIL_REPEATS updates within TAIL_WINDOW
  updates. Neither M2PO's mask nor PPO's clip bounds that quadrant; with gradient clipping that
  one token sets the update's direction (the collapsing minibatches: r 50-2,870 carrying
  88-99.7%). One such update alone is no runaway: the healthy CPU demo (stale-2 M2PO) has single
  updates at r 166 carrying 92%, each alone among hundreds of updates; a runaway recurs. An
  update whose share is not in the points (a batch that split it) is judged on the ratio alone.
- `staleness_bound`: an async run's observed staleness (rollout/observed_staleness_max, per token at
  the update that trained it) exceeds its configured bound (rollout/staleness_bound, logged beside
  it) by more than `threshold` updates: the bound is not holding (a resumed run, a broken admission).
Time rules run on beat, over active runs:
- `no_heartbeat`: a running run has not sent a heartbeat for `window_s` seconds;
- `no_progress`: a running run's update count has not moved for `window_s` seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NONFINITE, REWARD_DROP, ENTROPY_FLOOR, CLIP_CEILING = "nonfinite", "reward_drop", "entropy_floor", "clip_ceiling"
NEG_ADV_TAIL = "neg_adv_tail"
NO_HEARTBEAT, NO_PROGRESS = "no_heartbeat", "no_progress"
KINDS = (NONFINITE, REWARD_DROP, ENTROPY_FLOOR, CLIP_CEILING, NEG_ADV_TAIL, NO_HEARTBEAT, NO_PROGRESS)
TIME_KINDS = (NO_HEARTBEAT, NO_PROGRESS)
STALENESS_BOUND = "staleness_bound"
KINDS += (STALENESS_BOUND,)

KEYS: dict[str, tuple[str, ...]] = {
    NONFINITE: ("actor/pg_loss", "actor/grad_norm"),
    REWARD_DROP: ("train/reward_mean",),
    ENTROPY_FLOOR: ("actor/entropy",),
    CLIP_CEILING: ("actor/clip_frac",),
    NEG_ADV_TAIL: ("actor/ratio_neg_max", "actor/top_token_share_max"),
    STALENESS_BOUND: ("rollout/observed_staleness_max", "rollout/staleness_bound"),
}
TAIL_SHARE = 0.5  # neg_adv_tail: the largest token's share of sum r|A| that makes a large A<0 ratio a runaway
TAIL_REPEATS, TAIL_WINDOW = 3, 200  # neg_adv_tail: so many such updates within so many updates
WATCHED_KEYS = frozenset(k for keys in KEYS.values() for k in keys)
REWARD_SMOOTHING = 0.8  # EMA weight of the previous value; about the last 5 points
REWARD_MIN_POINTS = 5  # no drop is judged before this many reward points


@dataclass(frozen=True)
class Rule:
    """One rule as it applies to a run: the defaults, else the project's, else the run's own."""

    kind: str
    enabled: bool = True
    threshold: float = 0.0  # reward_drop: drop; entropy_floor: floor; clip_ceiling: ceiling; neg_adv_tail: ratio
    window_s: int = 0  # time rules: seconds without a heartbeat / without progress
    action: str = "notify"  # "notify", "stop" (cancel after a checkpoint) or "cancel" (without one)
    source: str = "default"  # "default", "project" or "run"

    def describe(self) -> str:
        return {
            NONFINITE: "loss or gradient norm is NaN or infinite",
            REWARD_DROP: f"smoothed reward falls {self.threshold:g} below its best",
            ENTROPY_FLOOR: f"entropy below {self.threshold:g}",
            CLIP_CEILING: f"masked/clipped token fraction above {self.threshold:g}",
            NEG_ADV_TAIL: (
                f"a token with A<0 and ratio above {self.threshold:g} carries {TAIL_SHARE:.0%} or more of the update,"
                f" on {TAIL_REPEATS} updates within {TAIL_WINDOW}"
            ),
            STALENESS_BOUND: f"observed staleness exceeds the configured bound by more than {self.threshold:g} updates",
            NO_HEARTBEAT: f"no heartbeat for {self.window_s} s while running",
            NO_PROGRESS: f"no new update for {self.window_s} s while running",
        }[self.kind]


DEFAULTS: dict[str, Rule] = {
    NONFINITE: Rule(NONFINITE),
    REWARD_DROP: Rule(REWARD_DROP, threshold=0.3),
    ENTROPY_FLOOR: Rule(ENTROPY_FLOOR, threshold=0.01),
    CLIP_CEILING: Rule(CLIP_CEILING, threshold=0.2),
    NEG_ADV_TAIL: Rule(NEG_ADV_TAIL, threshold=50.0),
    STALENESS_BOUND: Rule(STALENESS_BOUND, threshold=0.0),
    NO_HEARTBEAT: Rule(NO_HEARTBEAT, window_s=300),
    NO_PROGRESS: Rule(NO_PROGRESS, window_s=1800),
}


@dataclass(frozen=True)
class Firing:
    kind: str
    step: int
    value: float
    message: str


@dataclass
class RewardTrack:
    """The smoothed reward and its best so far (kept per run between batches)."""

    ema: float | None = None
    best: float | None = None
    points: int = 0
    last_step: int = -1  # points at or before it were folded in already (a re-posted batch)


def check_nonfinite(points: dict[str, list[tuple[int, float]]]) -> Firing | None:
    for key in KEYS[NONFINITE]:
        for step, value in points.get(key, ()):
            if not math.isfinite(value):
                return Firing(NONFINITE, step, value, f"{key} is {value} at update {step}")
    return None


def check_below(kind: str, key: str, floor: float, points) -> Firing | None:
    for step, value in points.get(key, ()):
        if math.isfinite(value) and value < floor:
            return Firing(kind, step, value, f"{key} = {value:.4g} at update {step}, under the floor {floor:g}")
    return None


def check_above(kind: str, key: str, ceiling: float, points) -> Firing | None:
    for step, value in points.get(key, ()):
        if math.isfinite(value) and value > ceiling:
            return Firing(kind, step, value, f"{key} = {value:.4g} at update {step}, over the ceiling {ceiling:g}")
    return None


def tail_updates(ratio_bound: float, points) -> list[tuple[int, float, float | None]]:
    """(step, ratio, share) of each update whose largest A<0 ratio is over `ratio_bound` while one
    token carries at least TAIL_SHARE of it (its share absent from the points: on the ratio alone)."""
    ratio_key, share_key = KEYS[NEG_ADV_TAIL]
    shares = dict(points.get(share_key, ()))
    out = []
    for step, ratio in points.get(ratio_key, ()):
        share = shares.get(step)
        if math.isfinite(ratio) and ratio > ratio_bound and (share is None or share >= TAIL_SHARE):
            out.append((step, ratio, share))
    return out


def check_neg_adv_tail(ratio_bound: float, points) -> Firing | None:
    """The first update that makes TAIL_REPEATS tail updates (see tail_updates) within TAIL_WINDOW
    updates, in `points` (a batch, or a run's stored points around a batch's tail update)."""
    ratio_key = KEYS[NEG_ADV_TAIL][0]
    tail = tail_updates(ratio_bound, points)
    for i, (step, ratio, share) in enumerate(tail):
        recent = [t for t in tail[: i + 1] if t[0] > step - TAIL_WINDOW]
        if len(recent) < TAIL_REPEATS:
            continue
        carried = "" if share is None else f" while one token carries {share:.1%} of Σ r|A|"
        return Firing(
            NEG_ADV_TAIL,
            step,
            ratio,
            f"{ratio_key} = {ratio:.4g} at update {step}{carried}; {len(recent)} such updates since update "
            f"{recent[0][0]}: a runaway A<0 tail (over {ratio_bound:g}"
            f"{'' if share is None else f' and {TAIL_SHARE:.0%}'}); algorithm.dual_clip_c bounds it",
        )
    return None


def check_staleness_bound(margin: float, points) -> Firing | None:
    """The first update whose observed staleness exceeds the bound logged at the same update by
    more than `margin` (a batch without the bound's point is not judged)."""
    observed_key, bound_key = KEYS[STALENESS_BOUND]
    bounds = dict(points.get(bound_key, ()))
    for step, observed in points.get(observed_key, ()):
        bound = bounds.get(step)
        if bound is None or not math.isfinite(observed) or not observed > bound + margin:
            continue
        return Firing(
            STALENESS_BOUND,
            step,
            observed,
            f"{observed_key} = {observed:g} at update {step}, over the configured bound {bound:g}"
            f"{f' by more than {margin:g}' if margin else ''}: staleness.max_staleness is not holding",
        )
    return None


def check_reward_drop(track: RewardTrack, drop: float, points) -> Firing | None:
    """Fold the batch's rewards (in step order) into `track`; fire when the EMA is `drop` under its best."""
    fired = None
    for step, value in points.get(KEYS[REWARD_DROP][0], ()):
        if not math.isfinite(value) or step <= track.last_step:
            continue
        track.last_step = step
        track.ema = value if track.ema is None else REWARD_SMOOTHING * track.ema + (1 - REWARD_SMOOTHING) * value
        track.points += 1
        track.best = track.ema if track.best is None else max(track.best, track.ema)
        if fired is None and track.points >= REWARD_MIN_POINTS and track.best - track.ema >= drop:
            fired = Firing(
                REWARD_DROP,
                step,
                track.ema,
                f"smoothed reward {track.ema:.3f} at update {step} is {track.best - track.ema:.3f} "
                f"below its best {track.best:.3f}",
            )
    return fired


def check_batch(rules: dict[str, Rule], points, track: RewardTrack) -> list[Firing]:
    """Every enabled metric rule against one batch's points {key: [(step, value), ...]} (sorted)."""
    out = []
    on = {k: r for k, r in rules.items() if r.enabled}
    if NONFINITE in on and (f := check_nonfinite(points)):
        out.append(f)
    if REWARD_DROP in on and (f := check_reward_drop(track, on[REWARD_DROP].threshold, points)):
        out.append(f)
    if ENTROPY_FLOOR in on and (
        f := check_below(ENTROPY_FLOOR, KEYS[ENTROPY_FLOOR][0], on[ENTROPY_FLOOR].threshold, points)
    ):
        out.append(f)
    if CLIP_CEILING in on and (
        f := check_above(CLIP_CEILING, KEYS[CLIP_CEILING][0], on[CLIP_CEILING].threshold, points)
    ):
        out.append(f)
    if NEG_ADV_TAIL in on and (f := check_neg_adv_tail(on[NEG_ADV_TAIL].threshold, points)):
        out.append(f)
    if STALENESS_BOUND in on and (f := check_staleness_bound(on[STALENESS_BOUND].threshold, points)):
        out.append(f)
    return out
