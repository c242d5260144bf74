"""The Pipes message reader the training launchers use: a message counts only
once all of it (its newline included) is in the file."""

import json
import sys
import textwrap

import dagster as dg
import pytest

from resources.pipes_messages import TornMessageError, WholeLineFileMessageReader, tail_whole_lines


def test_a_line_read_in_two_parts_comes_out_whole(tmp_path):
    path = tmp_path / "messages.jsonl"
    first = json.dumps({"method": "opened", "params": {}}) + "\n"
    second = json.dumps({"method": "report_asset_materialization", "params": {"metadata": {"loss": 0.5}}}) + "\n"
    path.write_text(first + second[:20])  # the reader finds the second message torn at the end of the file
    stops = []

    def should_stop():
        # Called only at the end of the file: first with the torn part pending (the rest arrives), then to stop.
        stops.append(True)
        if len(stops) == 1:
            with path.open("a") as stream:
                stream.write(second[20:])
            return False
        return True

    assert list(tail_whole_lines(str(path), should_stop)) == [first, second]
    assert len(stops) == 2


def test_a_file_that_ends_inside_a_message_is_an_error(tmp_path):
    path = tmp_path / "messages.jsonl"
    path.write_text('{"method": "opened", "params": {}}\n{"method": "log", "par')
    lines = tail_whole_lines(str(path), lambda: True)
    assert next(lines) == '{"method": "opened", "params": {}}\n'
    with pytest.raises(TornMessageError, match=r"messages\.jsonl ends inside a message .*\"method\": \"log\", \"par"):
        next(lines)


# A Pipes job whose every message reaches the file in two writes, 0.2 s apart:
# the reader (polling every 10 ms) always finds each one torn first.
SLOW_WRITER_JOB = textwrap.dedent("""
    import time

    import dagster_pipes

    class TwoPartChannel(dagster_pipes.PipesFileMessageWriterChannel):
        def write_message(self, message):
            line = dagster_pipes.json.dumps(message) + "\\n"
            with open(self._path, "a", encoding="utf-8") as stream:
                stream.write(line[: len(line) // 2])
                stream.flush()
                time.sleep(0.2)
                stream.write(line[len(line) // 2 :])

    dagster_pipes.PipesFileMessageWriterChannel = TwoPartChannel
    with dagster_pipes.open_dagster_pipes() as pipes:
        pipes.report_asset_materialization(metadata={"loss": 0.25, "note": "x" * 5000})
""")


def test_a_real_pipes_job_whose_messages_arrive_in_parts_reports_its_materialization(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(SLOW_WRITER_JOB)
    reported = {}

    @dg.asset
    def checkpoint(context: dg.AssetExecutionContext):
        client = dg.PipesSubprocessClient(message_reader=WholeLineFileMessageReader(str(tmp_path / "messages.jsonl")))
        result = client.run(context=context, command=[sys.executable, str(job)]).get_materialize_result()
        reported.update({key: value.value for key, value in result.metadata.items()})
        return result

    assert dg.materialize([checkpoint], instance=dg.DagsterInstance.ephemeral()).success
    assert reported == {"loss": 0.25, "note": "x" * 5000}
