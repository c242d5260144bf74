import base64
import json

import pytest

from clawloop_assets.reporting.round_history import (
    RoundFigures,
    history_metadata,
    history_table,
    level_color,
    round_history,
    validation_effort,
)
from resources.warehouse import DuckDBWarehouse, table_frame

SUMMARIES = {
    # Written before mean turns and rollouts per admitted task were recorded.
    "round-0001": {"admission_rate": 0.25, "heldout_pass_rate_before": 0.1, "heldout_pass_rate_after": 0.2},
    "round-0002": {"admission_rate": 0.5, "mean_turns": 2.5, "rollouts_per_admitted_task": 16.0,
                   "heldout_pass_rate_before": 0.2, "heldout_pass_rate_after": 0.35,
                   "evaluation_pass_at_1": 0.15, "evaluation_ci_low": 0.04, "evaluation_ci_high": 0.42,
                   "rollout_temperature": 0.85},
    "round-0003": {"admission_rate": 0.125, "mean_turns": 3.0, "rollouts_per_admitted_task": 64.0,
                   "heldout_pass_rate_before": None, "heldout_pass_rate_after": None,
                   "evaluation_pass_at_1": 0.0, "evaluation_ci_low": 0.0, "evaluation_ci_high": 0.2425,
                   # The graded set (its first round): pass@1 per level of the own set.
                   "evaluation_by_level": {"-2": {"pass_at_1": 0.5, "ci_low": 0.3, "ci_high": 0.7, "tasks": 24},
                                           "0": {"pass_at_1": 0.0, "ci_low": 0.0, "ci_high": 0.138, "tasks": 24}}},
    # Past the round being summarized: not in its history.
    "round-0004": {"admission_rate": 0.9, "mean_turns": 1.0, "rollouts_per_admitted_task": 8.0,
                   "heldout_pass_rate_before": 0.5, "heldout_pass_rate_after": 0.6},
}


@pytest.fixture
def warehouse(tmp_path):
    warehouse = DuckDBWarehouse(path=str(tmp_path / "w.duckdb"))
    for key in ["round-0003", "round-0001", "round-0004", "round-0002"]:  # written out of order
        row = {"round": key, "summary": json.dumps({"round": key, "candidates": 8, **SUMMARIES[key]})}
        warehouse.replace("round_summaries", table_frame("round_summaries", [row]), {"round": key})
    return warehouse


def test_history_is_every_round_up_to_the_current_one_in_order(warehouse):
    assert round_history(warehouse, "round-0003") == [
        RoundFigures("round-0001", 0.25, None, None, 0.1, 0.2),
        RoundFigures("round-0002", 0.5, 2.5, 16.0, 0.2, 0.35, 0.15, 0.04, 0.42, 0.85),
        RoundFigures("round-0003", 0.125, 3.0, 64.0, None, None, 0.0, 0.0, 0.2425, None,
                     SUMMARIES["round-0003"]["evaluation_by_level"]),
    ]
    assert [row.round for row in round_history(warehouse, "round-0001")] == ["round-0001"]


def test_history_table_has_a_row_per_round(warehouse):
    table = history_table(round_history(warehouse, "round-0003")).value
    lines = table.splitlines()
    assert lines[0].startswith("| round | admission rate |")
    # A column per level some round has a figure for; rounds before the graded set have none.
    assert "| evaluation pass@1 [95% CI] | level -2 pass@1 [95% CI] | level 0 pass@1 [95% CI] |" in lines[0]
    assert lines[2:] == [
        "| round-0001 | 0.25 | – | – | 0.1 | 0.2 | – | – | – | – |",
        "| round-0002 | 0.5 | 2.5 | 16.0 | 0.2 | 0.35 | 0.15 [0.04, 0.42] | – | – | 0.85 |",
        "| round-0003 | 0.125 | 3.0 | 64.0 | – | – | 0.0 [0.0, 0.2425] | 0.5 [0.3, 0.7] | 0.0 [0.0, 0.138] | – |",
    ]
    # Without any per-level figure, the table has no level columns.
    assert "level" not in history_table(round_history(warehouse, "round-0002")).value.splitlines()[0]


def test_plot_is_a_png_on_disk_and_inline(warehouse, tmp_path):
    path = tmp_path / "rounds_plot.png"
    metadata = history_metadata(round_history(warehouse, "round-0003"), path)
    png = path.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(png) < 100_000  # small enough to ride in the event log
    prefix = "![rounds](data:image/png;base64,"
    inline = metadata["rounds_plot"].value
    assert inline.startswith(prefix) and inline.endswith(")")
    assert base64.b64decode(inline[len(prefix):-1]) == png
    assert metadata["rounds_plot_path"].value == str(path)
    assert "round-0002" in metadata["rounds_table"].value


def _marker_height(png: bytes, rgb, panel: int, what: str) -> float:
    """Mean row (0 = top) of colour `rgb` (0..1) in the right half of panel
    `panel` (0 = top of the three), where round 2's point sits clear of the legend."""
    import io

    import numpy as np
    from matplotlib.image import imread

    image = imread(io.BytesIO(png))[..., :3]
    height, width = image.shape[:2]
    band = slice(panel * height // 3, (panel + 1) * height // 3)
    found = np.all(np.abs(image - np.array(rgb[:3])) < 0.03, axis=-1)
    rows, columns = np.nonzero(found[band, width // 2:])
    assert rows.size, f"no {what} point drawn in panel {panel}"
    return float(rows.mean())


def _admission_marker_height(png: bytes) -> float:
    """Where the admission-rate line (matplotlib's first colour, tab:blue) sits in the upper panel."""
    return _marker_height(png, [0x1F / 255, 0x77 / 255, 0xB4 / 255], 0, "admission-rate")


def test_the_plot_draws_the_admission_rate_where_its_value_is(tmp_path):
    def plot(rate):
        history = [RoundFigures(f"round-000{k}", rate, 2.0, 8.0, None, None) for k in (1, 2)]
        return history_metadata(history, tmp_path / f"{rate}.png") and (tmp_path / f"{rate}.png").read_bytes()

    high, low = _admission_marker_height(plot(0.9)), _admission_marker_height(plot(0.1))
    # Rates run 0 to 1 up the panel: 0.9 is drawn well above 0.1.
    assert high < low - 40, (high, low)


def test_the_plot_draws_each_evaluation_level_where_its_value_is(tmp_path):
    def plot(rate):
        levels = {"-1": {"pass_at_1": rate, "ci_low": rate, "ci_high": rate, "tasks": 24}}
        history = [RoundFigures(f"round-000{k}", None, None, None, None, None, evaluation_by_level=levels)
                   for k in (1, 2)]
        return history_metadata(history, tmp_path / f"{rate}.png") and (tmp_path / f"{rate}.png").read_bytes()

    color = level_color(-1)
    high = _marker_height(plot(0.9), color, 1, "level -1")
    low = _marker_height(plot(0.1), color, 1, "level -1")
    assert high < low - 25, (high, low)
    # Each level its own colour.
    assert len({level_color(level) for level in range(-2, 6)}) == 8


def test_a_single_round_with_no_figures_still_plots(tmp_path):
    path = tmp_path / "rounds_plot.png"
    history_metadata([RoundFigures("round-0001", 0.0, None, None, None, None)], path)
    assert path.read_bytes().startswith(b"\x89PNG")


def rollouts(*rows, temperature=0.85):
    # The validation rollouts sample at the round's temperature; the held-out and T_k ones here at another, which
    # the round's figure must not take.
    return table_frame("rollouts", [{"round": "round-0001", "rollout_id": f"r{i}", "phase": phase, "status": status,
                                     "turns": turns, "temperature": temperature if phase == "validation" else 0.5}
                                    for i, (phase, status, turns) in enumerate(rows)])


def test_validation_effort_counts_validation_rollouts_only():
    frame = rollouts(
        ("validation", "scored", 2), ("validation", "scored", 3), ("validation", "scored", 5),
        ("validation", "sandbox_error", 9),  # spent, but its turns say nothing of the policy
        ("heldout_after", "scored", 8), ("train_before", "scored", 8),
    )
    assert validation_effort(frame, admitted=3) == {"mean_turns": pytest.approx(10 / 3, abs=1e-4),
                                                    "rollouts_per_admitted_task": pytest.approx(4 / 3, abs=1e-4),
                                                    "rollout_temperature": 0.85}
    assert validation_effort(frame, admitted=0) == {"mean_turns": pytest.approx(10 / 3, abs=1e-4),
                                                    "rollouts_per_admitted_task": None, "rollout_temperature": 0.85}
    nothing_scored = rollouts(("validation", "policy_error", 0), ("heldout_before", "scored", 4), temperature=0.7)
    assert validation_effort(nothing_scored, admitted=1) == {"mean_turns": None, "rollouts_per_admitted_task": 1.0,
                                                             "rollout_temperature": 0.7}
    assert validation_effort(rollouts(("heldout_before", "scored", 4)), admitted=0)["rollout_temperature"] is None
