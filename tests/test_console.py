"""clawloop run's console: a real Dagster run through the clawloop_console
logger prints its steps and progress compactly and keeps everything in the
log file; the rate and ETA come from the step's own clock; warnings stay
out of the console; a finished round fits one screen."""

import logging
import warnings

import dagster as dg

from clawloop_assets.console import CompactConsole, clawloop_console, round_screen, warnings_to


def test_a_real_run_prints_steps_and_progress_and_logs_everything(tmp_path, capsys):
    @dg.asset
    def candidates(context: dg.AssetExecutionContext) -> None:
        for done in (1, 2):
            context.log.info(f"built {done}/4 candidates")
        context.log.debug("a detail only the log file keeps")

    job = dg.define_asset_job("job")
    defs = dg.Definitions(assets=[candidates], jobs=[job], loggers={"clawloop_console": clawloop_console})
    log = tmp_path / "round" / "run.log"
    result = defs.resolve_job_def("job").execute_in_process(run_config={"loggers": {"clawloop_console": {
        "config": {"log_file": str(log), "round": "round-0007"}}}})
    assert result.success
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "[round-0007] candidates: started"
    assert lines[1].startswith("[round-0007] candidates: built 1/4 candidates  (") and "ETA" in lines[1]
    assert lines[2].startswith("[round-0007] candidates: built 2/4 candidates  (")
    assert lines[3].startswith("[round-0007] candidates: done in ")
    assert len(lines) == 4  # the run's other events (materialization, outputs, engine) stay off the console
    full = log.read_text()
    assert "a detail only the log file keeps" in full and "ASSET_MATERIALIZATION" in full


def record(message: str = "", step: str = "validation_rollouts", event: str | None = None, level=logging.INFO):
    class Event:
        event_type_value = event

    item = logging.LogRecord("dagster", level, __file__, 1, message, (), None)
    item.dagster_meta = {"step_key": step, "orig_message": message, "dagster_event": Event() if event else None}
    return item


def test_the_rate_and_eta_come_from_the_steps_start():
    console = CompactConsole(stream=None, round_key="round-0001")
    assert console.line(record(event="STEP_START"), now=100.0) == "[round-0001] validation_rollouts: started"
    # 16 of 64 in 8 s since the step started: 2 a second, 24 s to go.
    assert console.line(record("sampled 16/64 tasks x 8 in 3.1s"), now=108.0) == (
        "[round-0001] validation_rollouts: sampled 16/64 tasks x 8 in 3.1s  (2.00/s, ETA 24s)")
    # A turn counter counts no work: no rate. Nor does a count already complete.
    assert console.line(record("turn 1/2: sampling 64 rollouts"), now=110.0).endswith("sampling 64 rollouts")
    assert console.line(record("sampled 64/64 tasks x 8 in 3.1s"), now=130.0).endswith("in 3.1s")
    assert console.line(record("a debug detail", level=logging.DEBUG), now=131.0) is None
    assert console.line(record(event="ASSET_MATERIALIZATION"), now=131.0) is None
    assert console.line(record(event="STEP_SUCCESS"), now=250.0) == "[round-0001] validation_rollouts: done in 2.5min"


def test_library_warnings_go_to_the_log_not_the_console(tmp_path, capsys):
    log = tmp_path / "run.log"
    with warnings_to(log):
        warnings.warn("a deprecated call", DeprecationWarning)
    assert "a deprecated call" in log.read_text()
    assert "a deprecated call" not in capsys.readouterr().err


def test_a_finished_round_fits_one_screen_and_says_where_to_look(tmp_path):
    summary = {"round": "round-0002", "seconds": {"total": 812.0}, "candidates": 24, "agent_free_passed": 20,
               "admitted": 9, "admission_rate": 0.375, "rollout_temperature": 0.95, "sft_examples": 31,
               "grpo_groups": 7, "heldout_pass_rate_before": 0.25, "heldout_pass_rate_after": 0.4,
               "evaluation_tasks": 96, "evaluation_pass_at_1": 0.1, "evaluation_ci_low": 0.02,
               "evaluation_ci_high": 0.3,
               "evaluation_by_level": {"-2": {"pass_at_1": 0.4167, "ci_low": 0.2447, "ci_high": 0.6117, "tasks": 24},
                                       "0": {"pass_at_1": 0.0, "ci_low": 0.0, "ci_high": 0.1380, "tasks": 24}},
               "rollout_errors": {"validation": {"sandbox_error": 2}},
               "rollout_error_rate": 0.01, "patterns": [{"count": 5, "description": "copying a file fails"}]}
    screen = round_screen(summary, tmp_path / "round-0002").splitlines()
    assert len(screen) <= 24
    assert screen[0] == "== round-0002 finished in 13.5min =="
    text = "\n".join(screen)
    for figure in ("9 admitted (37.5%)", "25.0% -> 40.0%", "pass@1 10.0% [2.0%, 30.0%] on all 96 fixed tasks",
                   "level -2   pass@1 41.7% [24.5%, 61.2%] on 24 tasks", "level  0   pass@1 0.0% [0.0%, 13.8%] on 24 tasks",
                   "2 rollouts (1.0%)",
                   "5 x copying a file fails", str(tmp_path / "round-0002" / "diagnosis_report.md"),
                   str(tmp_path / "round-0002" / "rounds_plot.png"), str(tmp_path / "round-0002" / "run.log")):
        assert figure in text, figure
