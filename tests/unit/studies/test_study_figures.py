"""`study_report`'s figures without a browser driver: the compare page's grouped chart (mean line and
min-max band per group) drawn from the stored series by Plotly and exported to PNG by Kaleido, which
starts the machine's Chromium itself. The band is checked against values worked out by hand."""

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from orchestrator.studies.figures import FigureError, FigureSpec, aggregate, draw, figure
from tests.unit.studies.sweeps import finished_staleness_sweep

pytestmark = pytest.mark.django_db
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def sweep(alice, tiny_config, settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"
    return finished_staleness_sweep(alice, tiny_config)


def test_aggregate_is_the_mean_and_the_min_max_where_each_curve_has_data():
    a = (np.array([0.0, 10.0]), np.array([0.0, 10.0]))
    b = (np.array([0.0, 5.0]), np.array([2.0, 2.0]))  # ends halfway: only `a` counts after x=5
    band = aggregate([a, b], grid=3)
    assert band.x.tolist() == [0.0, 5.0, 10.0]
    assert band.mean.tolist() == [1.0, 3.5, 10.0]
    assert band.lower.tolist() == [0.0, 2.0, 10.0] and band.upper.tolist() == [2.0, 5.0, 10.0]
    assert aggregate([(np.array([]), np.array([]))]) is None


def test_a_figure_has_a_band_and_a_mean_per_group(sweep):
    k8 = [r.pk for r in sweep.runs.all() if r.sweep_values["staleness.k"] == 8]
    fig = figure(FigureSpec("r.png", "Reward at k=8", k8, "algorithm.objective", "rollout_reward"))
    means = {t.name: t for t in fig.data if t.name}
    assert sorted(means) == ["algorithm.objective=grpo (n=2)", "algorithm.objective=m2po (n=2)"]
    grpo = means["algorithm.objective=grpo (n=2)"]
    # seeds 1 and 2 (tiny_config seeds from 1) end at 0.41 and 0.42 at step 198: the mean ends at 0.415
    assert grpo.x[-1] == 198 and grpo.y[-1] == pytest.approx(0.415)
    lower, upper = (t for t in fig.data if not t.name and t.legendgroup == "algorithm.objective=grpo")
    assert lower.y[-1] == pytest.approx(0.41) and upper.y[-1] == pytest.approx(0.42) and upper.fill == "tonexty"


def test_study_report_writes_the_document_with_png_figures(alice, sweep, tmp_path):
    out = tmp_path / "docs" / "STUDY.md"
    call_command("study_report", sweep.pk, user="alice", out=out)
    text = out.read_text()
    assert "## Verdicts" in text and "| (a) stale clip" in text and "**reproduced**" in text
    images = sorted((tmp_path / "docs" / "study").glob("*.png"))
    assert [p.name for p in images] == ["reward-k0.png", "reward-k8.png", "token-fraction-k8.png"]  # no entropy logged
    for image in images:
        assert image.read_bytes()[:8] == PNG and image.stat().st_size > 5_000
        assert f"study/{image.name}" in text


def test_a_panel_without_data_is_an_error_not_a_blank_image(sweep, tmp_path):
    spec = FigureSpec("x.png", "x", list(sweep.runs.values_list("id", flat=True)), "algorithm.objective", "grad_norm")
    with pytest.raises(FigureError, match="x.png: the runs logged no 'grad_norm' data"):
        draw([spec], tmp_path)
    assert not (tmp_path / "x.png").exists()


def test_a_figure_kaleido_dropped_is_drawn_again_alone(sweep, tmp_path, monkeypatch):
    """Kaleido hands a figure's render error back instead of raising it, and plotly's write_images drops
    it: here that batch call writes every figure but the first, as a timed-out render leaves it."""
    import plotly.io as pio

    write_images = pio.write_images
    monkeypatch.setattr(pio, "write_images", lambda figs, paths, **kw: write_images(figs[1:], paths[1:], **kw))
    k8 = [r.pk for r in sweep.runs.all() if r.sweep_values["staleness.k"] == 8]
    specs = [FigureSpec(f"{m}.png", m, k8, "algorithm.objective", m) for m in ("rollout_reward", "clip_frac")]
    paths = draw(specs, tmp_path)
    for path in paths:
        assert path.read_bytes()[:8] == PNG and path.stat().st_size > 5_000


def test_study_report_appends_each_appendix_in_order_and_names_a_missing_one(alice, sweep, tmp_path):
    tests, notes = tmp_path / "tests.md", tmp_path / "notes.md"
    tests.write_text("## How each claim is tested\n")
    notes.write_text("## How the preset was calibrated\n")
    out = tmp_path / "STUDY.md"
    call_command("study_report", sweep.pk, user="alice", out=out, no_figures=True, appendix=[tests, notes])
    text = out.read_text()
    assert text.index("## Verdicts") < text.index("## How each claim is tested") < text.index("## How the preset")
    with pytest.raises(CommandError, match="--appendix: no such file: .*gone.md"):
        call_command(
            "study_report", sweep.pk, user="alice", out=out, no_figures=True, appendix=[tests, tmp_path / "gone.md"]
        )


def test_a_long_caption_wraps_inside_the_figure_instead_of_running_off_its_edge(sweep):
    k8 = [r.pk for r in sweep.runs.all() if r.sweep_values["staleness.k"] == 8]
    caption = (
        "Reward of fresh rollouts by objective, staleness staleness.k=16 (16 × 4 = 64 updates); "
        "mean and min-max band over seeds"
    )
    fig = figure(FigureSpec("r.png", caption, k8, "algorithm.objective", "rollout_reward"))
    lines = fig.layout.title.text.split("<br>")
    assert len(lines) == 2 and all(len(line) <= 105 for line in lines)
    assert " ".join(lines) == caption and fig.layout.margin.t >= 60
