"""A run's rounds side by side: the figures tracked from round to round, read
back from the round_summaries table, as a table and a plot for the round summary."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import NamedTuple, Sequence

import dagster as dg
import polars as pl
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from clawloop_assets.markdown import markdown_table
from clawloop_assets.synthesis.plan import LEVELS
from resources.warehouse import Warehouse


class RoundFigures(NamedTuple):
    round: str
    admission_rate: float | None
    mean_turns: float | None
    rollouts_per_admitted_task: float | None
    heldout_pass_rate_before: float | None
    heldout_pass_rate_after: float | None
    # The fixed evaluation set's pass@1 and its 95% interval (clawloop_assets/evaluation/fixed_set.py).
    evaluation_pass_at_1: float | None = None
    evaluation_ci_low: float | None = None
    evaluation_ci_high: float | None = None
    # What the round's rollouts sampled at (LoopConfig.round_temperatures).
    rollout_temperature: float | None = None
    # pass@1 per level of our own evaluation set: {"<level>": {pass_at_1, ci_low, ci_high, tasks}}
    # (fixed_set.level_figures); None in summaries written before the set was graded.
    evaluation_by_level: dict[str, dict] | None = None


FIGURES = RoundFigures._fields[1:]
LADDER_COLORMAP = colormaps["viridis"]


def validation_effort(rollouts: pl.DataFrame, admitted: int, round_temperature: float | None = None
                      ) -> dict[str, float | None]:
    """What admission cost this round: the mean turns of the scored validation
    rollouts, and the validation rollouts spent (whatever their status: an
    infrastructure failure is spent too) per admitted task; and the round's
    temperature (`round_temperature`, the levels it serves sampled at it), or
    without it the one temperature all its validation rollouts sampled at."""
    validation = rollouts.filter(pl.col("phase") == "validation")
    scored = validation.filter(pl.col("status") == "scored")
    temperatures = validation["temperature"].unique().sort().to_list()
    if round_temperature is None and len(temperatures) == 1:
        round_temperature = temperatures[0]
    return {
        "rollout_temperature": round_temperature,
        "mean_turns": round(float(scored["turns"].mean()), 4) if scored.height else None,
        "rollouts_per_admitted_task": round(validation.height / admitted, 4) if admitted else None,
    }


def round_history(warehouse: Warehouse, up_to: str) -> list[RoundFigures]:
    """Every summarized round up to and including `up_to`, in order. Keys are
    zero-padded ("round-0001"), so string order is round order."""
    rows = warehouse.read("round_summaries").filter(pl.col("round") <= up_to).sort("round")
    history = []
    for row in rows.iter_rows(named=True):
        summary = json.loads(row["summary"])
        # Summaries written before a figure existed lack its key.
        history.append(RoundFigures(row["round"], *(summary.get(name) for name in FIGURES)))
    return history


def evaluation_levels(history: Sequence[RoundFigures]) -> list[int]:
    """Every level of the own evaluation set that some round has a figure for, lowest first."""
    return sorted({int(level) for row in history for level in (row.evaluation_by_level or {})})


def _with_interval(value, low, high) -> str:
    return "–" if value is None else f"{value} [{low}, {high}]"


def history_table(history: Sequence[RoundFigures]) -> dg.MetadataValue:
    levels = evaluation_levels(history)
    headers = ["round", "admission rate", "mean turns", "rollouts / admitted", "held-out before", "held-out after",
               "evaluation pass@1 [95% CI]", *(f"level {level} pass@1 [95% CI]" for level in levels),
               "rollout temperature"]
    rows = []
    for row in history:
        cells = ["–" if v is None else v for v in row[:6]]
        cells.append(_with_interval(row.evaluation_pass_at_1, row.evaluation_ci_low, row.evaluation_ci_high))
        for level in levels:
            part = (row.evaluation_by_level or {}).get(str(level)) or {}
            cells.append(_with_interval(part.get("pass_at_1"), part.get("ci_low"), part.get("ci_high")))
        cells.append("–" if row.rollout_temperature is None else row.rollout_temperature)
        rows.append(cells)
    return markdown_table(headers, rows)


def level_color(level: int) -> tuple[float, float, float, float]:
    """One colour per rung of the ladder, dark (warm-up) to light (level 5)."""
    return LADDER_COLORMAP((level - LEVELS[0]) / (LEVELS[-1] - LEVELS[0]) * 0.9)


def render_plot(history: Sequence[RoundFigures], path: Path) -> bytes:
    """The figures over rounds as a small PNG written to `path`; returns its bytes."""
    x = [int(row.round.rsplit("-", 1)[1]) for row in history]

    def series(name: str) -> list[float]:
        return [float("nan") if getattr(row, name) is None else getattr(row, name) for row in history]

    fig = Figure(figsize=(6, 6), dpi=80)
    FigureCanvasAgg(fig)
    rates, ladder, effort = fig.subplots(3, 1, sharex=True)
    for name, label in [("admission_rate", "admission rate"), ("heldout_pass_rate_before", "held-out before"),
                        ("heldout_pass_rate_after", "held-out after")]:
        rates.plot(x, series(name), marker="o", label=label)
    # The evaluation figure with its interval as a band: the one figure on a fixed set across rounds.
    line = rates.plot(x, series("evaluation_pass_at_1"), marker="D", color="black", label="evaluation pass@1")[0]
    rates.fill_between(x, series("evaluation_ci_low"), series("evaluation_ci_high"), color=line.get_color(), alpha=0.15,
                       label="evaluation 95% CI")
    rates.set_ylim(0, 1)
    rates.set_ylabel("rate")
    rates.legend(fontsize="x-small", loc="upper left")
    # The own evaluation set level by level, each with its interval as a band: where the policy stands on the ladder.
    for level in evaluation_levels(history):
        parts = [(row.evaluation_by_level or {}).get(str(level)) or {} for row in history]

        def level_series(name: str) -> list[float]:
            return [float("nan") if part.get(name) is None else part[name] for part in parts]

        color = level_color(level)
        ladder.plot(x, level_series("pass_at_1"), marker="D", color=color, label=f"level {level}")
        ladder.fill_between(x, level_series("ci_low"), level_series("ci_high"), color=color, alpha=0.12)
    ladder.set_ylim(0, 1)
    ladder.set_ylabel("evaluation pass@1")
    if ladder.get_lines():
        ladder.legend(fontsize="x-small", loc="upper left", ncol=4, title="by level, 95% CI bands",
                      title_fontsize="x-small")
    # Rollouts per admitted task runs to tens while mean turns stays near the
    # turn limit, so each gets its own scale.
    effort.plot(x, series("rollouts_per_admitted_task"), marker="o", color="tab:red", label="rollouts / admitted")
    effort.set_ylabel("rollouts / admitted")
    effort.set_ylim(bottom=0)
    turns = effort.twinx()
    turns.plot(x, series("mean_turns"), marker="s", color="tab:purple", label="mean turns")
    turns.set_ylabel("mean turns")
    turns.set_ylim(bottom=0)
    effort.legend(handles=effort.get_lines() + turns.get_lines(), fontsize="x-small", loc="upper left")
    effort.set_xlabel("round")
    effort.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    png = buffer.getvalue()
    path.write_bytes(png)
    return png


def history_metadata(history: Sequence[RoundFigures], plot_path: Path) -> dict[str, dg.MetadataValue]:
    """The history for the UI: a table, and the plot inline (a data URI, so the
    UI needs no image store) and on disk."""
    png = render_plot(history, plot_path)
    return {
        "rounds_table": history_table(history),
        "rounds_plot": dg.MetadataValue.md(f"![rounds](data:image/png;base64,{base64.b64encode(png).decode()})"),
        "rounds_plot_path": dg.MetadataValue.path(str(plot_path)),
    }
