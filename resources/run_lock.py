"""One run at a time per warehouse: an exclusive lock file beside the DuckDB
file, held for the whole of a run that writes it.

The QueuedRunCoordinator (dagster.yaml, max_concurrent_runs 1) only orders
runs launched through the daemon; `clawloop run`, `dg.materialize` and a
second Dagster instance on the same $CLAWLOOP_HOME bypass it. The lock is an
flock, so the kernel releases it when its holder dies (kill -9 included):
there is no stale lock to clear, only the record of who held it last."""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO


class RunLockHeld(RuntimeError):
    """Another live run holds the warehouse."""


@dataclass
class RunLock:
    path: Path
    handle: IO[str] | None  # None: a step of a run whose other step holds the lock
    # The holder recorded in the file when we took it: a run whose process
    # died holding the lock (None when the last holder released it).
    previous_holder: dict | None

    def release(self) -> None:
        if self.handle is None or self.handle.closed:
            return
        self.handle.seek(0)
        self.handle.truncate()  # a released lock names nobody
        self.handle.flush()
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def lock_path_for(database: Path) -> Path:
    return database.with_name(database.name + ".run.lock")


def _read_holder(handle: IO[str]) -> dict | None:
    handle.seek(0)
    text = handle.read().strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return {"unreadable": text[:200]}


def acquire_run_lock(database: Path, run_id: str, partition: str | None) -> RunLock:
    """Take the warehouse's run lock for `run_id`, or raise RunLockHeld naming
    the run that holds it. Never waits: a round takes minutes to hours."""
    path = lock_path_for(database)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(handle) or {}
        handle.close()
        if holder.get("run_id") == run_id:
            # Another step process of this same run (the production profile's
            # multiprocess executor) holds it; its pools keep one writer.
            return RunLock(path, None, None)
        raise RunLockHeld(
            f"warehouse {database} is in use by run {holder.get('run_id', '?')} "
            f"({holder.get('partition') or 'no partition'}, pid {holder.get('pid', '?')}, since {holder.get('since', '?')}); "
            f"one run at a time writes a warehouse: wait for that run to finish or cancel it, then rerun "
            f"(lock file {path})"
        ) from None
    previous = _read_holder(handle)
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps({"run_id": run_id, "partition": partition, "pid": os.getpid(),
                             "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
    handle.flush()
    return RunLock(path, handle, previous)
