"""Reading a Pipes job's messages file without tearing a message in two.

Dagster's `PipesFileMessageReader` tails the file with `readline()` and parses
whatever it returns. A job writes each message with one `write()`, but a read
racing that write can see only its first part (a write that crosses a page
boundary reaches the page cache page by page), and `readline()` at the end of
the file returns that part as if it were a line. The reader thread then dies on
a `JSONDecodeError`, every later message is lost, and a job that succeeded
fails with "No materialization results received" (it happened to a CI run).
Here a line counts only once its newline has arrived.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from threading import Event
from typing import TYPE_CHECKING

import dagster as dg

if TYPE_CHECKING:
    from dagster._core.pipes.context import PipesMessageHandler

POLL_SECONDS = 0.01


class TornMessageError(RuntimeError):
    """The messages file ended in the middle of a message."""


def tail_whole_lines(path: str, should_stop: Callable[[], bool]) -> Iterator[str]:
    """Each newline-terminated line of `path` as it is appended, until
    `should_stop()` holds at the end of the file. A part of a line waits for
    the rest; a file that ends in one raises `TornMessageError`."""
    pending = ""
    with open(path, encoding="utf-8") as stream:
        while True:
            text = stream.readline()
            if text:
                pending += text
                if pending.endswith("\n"):
                    yield pending
                    pending = ""
            elif should_stop():
                break
            else:
                time.sleep(POLL_SECONDS)
    if pending:
        raise TornMessageError(f"{path} ends inside a message ({len(pending)} characters with no newline): {pending[:200]!r}")


class WholeLineFileMessageReader(dg.PipesFileMessageReader):
    """`PipesFileMessageReader` that parses a message only once all of it is in the file."""

    def _reader_thread(self, handler: PipesMessageHandler, is_resource_complete: Event) -> None:
        try:
            for line in tail_whole_lines(self._path, is_resource_complete.is_set):
                handler.handle_message(json.loads(line))
        except BaseException:
            handler.report_pipes_framework_exception(f"{self.__class__.__name__} reader thread", sys.exc_info())
            raise
