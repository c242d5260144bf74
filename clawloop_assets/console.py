"""What `clawloop run` prints: a line when a step of the round starts and
ends, each progress message of its assets (with the rate and an ETA where a
message counts done/total), and one screen per finished round. Dagster's
own events and library warnings go to the round's `run.log`; the full event
log is in the UI as always."""

from __future__ import annotations

import logging
import re
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, TextIO

import dagster as dg

# "built 5/24 candidates", "sampled 16/64 tasks x 8": a count worth a rate.
# Turn counters ("turn 1/2") count no work done and get none.
_COUNT = re.compile(r"^(?!turn\b)\D*?\b(\d+)/(\d+)\b")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 90 else f"{seconds / 60:.1f}min"


class CompactConsole(logging.Handler):
    """One short line per step start, step end and progress message; every
    other Dagster event is left to the log file."""

    def __init__(self, stream: TextIO, round_key: str) -> None:
        super().__init__(logging.DEBUG)  # Dagster logs step events at DEBUG; line() picks what shows
        self.stream = stream
        self.round_key = round_key
        self.started: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.line(record, time.monotonic())
            if line:
                self.stream.write(line + "\n")
                self.stream.flush()
        except Exception:  # a console that cannot print must not fail the round
            self.handleError(record)

    def line(self, record: logging.LogRecord, now: float) -> str | None:
        meta = getattr(record, "dagster_meta", None) or {}
        step = meta.get("step_key") or "run"
        prefix = f"[{self.round_key}] {step}"
        event = meta.get("dagster_event")
        if event is not None:
            kind = event.event_type_value
            if kind == "STEP_START":
                self.started[step] = now
                return f"{prefix}: started"
            if kind == "STEP_SUCCESS":
                return f"{prefix}: done in {_duration(now - self.started.get(step, now))}"
            if kind == "STEP_FAILURE":
                return f"{prefix}: FAILED: {(meta.get('orig_message') or '').strip()[:300]}"
            return None
        if record.levelno < logging.INFO:
            return None
        message = (meta.get("orig_message") or record.getMessage()).strip()
        count = _COUNT.match(message)
        if count and step in self.started:
            done, total = int(count[1]), int(count[2])
            elapsed = now - self.started[step]
            if 0 < done < total and elapsed > 0:
                rate = done / elapsed
                message += f"  ({rate:.2f}/s, ETA {_duration((total - done) / rate)})"
        return f"{prefix}: {message}"


@dg.logger(
    config_schema={"log_file": dg.Field(str, description="Every event and warning of the run, in full."),
                   "round": dg.Field(str, default_value="", description="The round key the lines start with.")},
    description="clawloop run's console: steps and progress on stdout, everything in log_file.",
)
def clawloop_console(init_context: dg.InitLoggerContext) -> logging.Logger:
    config = init_context.logger_config
    logger = logging.Logger("clawloop_console", level=logging.DEBUG)
    path = Path(config["log_file"])
    path.parent.mkdir(parents=True, exist_ok=True)
    full = logging.FileHandler(path, encoding="utf-8")
    full.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(full)
    logger.addHandler(CompactConsole(sys.stdout, config["round"]))
    return logger


@contextmanager
def warnings_to(path: Path) -> Iterator[None]:
    """Library warnings (deprecations, previews) go to `path`, not the console."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s WARNING %(message)s"))
    captured = logging.getLogger("py.warnings")
    captured.addHandler(handler)
    captured.propagate = False
    logging.captureWarnings(True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            yield
    finally:
        logging.captureWarnings(False)
        captured.removeHandler(handler)
        captured.propagate = True
        handler.close()


def round_screen(summary: dict, round_dir: Path) -> str:
    """The finished round on one screen: what it admitted, what training
    gained, the evaluation, the errors, the time, and where to look next."""

    def rate(value) -> str:
        return "-" if value is None else f"{value:.1%}"

    lines = [
        f"== {summary['round']} finished in {_duration(summary.get('seconds', {}).get('total', 0.0))} ==",
        f"candidates   {summary['candidates']}, {summary['agent_free_passed']} passed agent-free validation, "
        f"{summary['admitted']} admitted ({rate(summary['admission_rate'])}) at temperature "
        f"{summary.get('rollout_temperature')}",
        f"training     SFT on {summary['sft_examples']} trajectories, GRPO on {summary['grpo_groups']} groups; "
        f"held-out pass rate {rate(summary['heldout_pass_rate_before'])} -> {rate(summary['heldout_pass_rate_after'])}",
    ]
    if summary.get("evaluation_tasks"):
        lines.append(f"evaluation   pass@1 {rate(summary['evaluation_pass_at_1'])} "
                     f"[{rate(summary['evaluation_ci_low'])}, {rate(summary['evaluation_ci_high'])}] "
                     f"on all {summary['evaluation_tasks']} fixed tasks")
        # Our own set level by level: where the policy stands on the ladder.
        for level, part in (summary.get("evaluation_by_level") or {}).items():
            lines.append(f"  level {int(level):>2}   pass@1 {rate(part['pass_at_1'])} "
                         f"[{rate(part['ci_low'])}, {rate(part['ci_high'])}] on {part['tasks']} tasks")
    errors = summary.get("rollout_errors") or {}
    lines.append(f"errors       {sum(sum(v.values()) for v in errors.values())} rollouts "
                 f"({rate(summary.get('rollout_error_rate'))})" + (f": {errors}" if errors else ""))
    for pattern in summary.get("patterns", [])[:3]:
        lines.append(f"failure      {pattern['count']} x {pattern['description'][:100]}")
    lines += [
        f"report       {round_dir / 'diagnosis_report.md'}",
        f"plot         {round_dir / 'rounds_plot.png'}",
        f"summary      {round_dir / 'summary.json'}",
        f"full log     {round_dir / 'run.log'}",
    ]
    return "\n".join(lines)
