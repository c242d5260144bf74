"""Where ClawLoop keeps its state: everything lives under $CLAWLOOP_HOME
(resources/environment.py reads it)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from resources.environment import read_environment

# The warehouse's file in a home: this one's (warehouse_path) or a finished
# run's that a benchmark reads.
WAREHOUSE_FILE = "warehouse.duckdb"


def clawloop_home() -> Path:
    return read_environment().home


def warehouse_path() -> Path:
    return clawloop_home() / WAREHOUSE_FILE


def rounds_dir() -> Path:
    return clawloop_home() / "rounds"


def round_dir(round_key: str) -> Path:
    return rounds_dir() / round_key


def model_cache_dir() -> Path:
    # Overridable on its own so tests with a throwaway home share one converted model.
    return read_environment().model_cache


def dagster_home() -> Path:
    return Path(os.environ.get("DAGSTER_HOME") or clawloop_home() / "dagster")


def evaluation_imports_dir() -> Path:
    return clawloop_home() / "evaluation" / "imported"


def check_writable(directory: Path) -> None:
    """Create `directory` if need be, then write, sync and remove a probe file
    in it. Raises OSError (read-only, full, not a directory, ...) before
    anything is stored there; nothing already there is touched."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    fd, probe = tempfile.mkstemp(prefix=".clawloop-write-probe-", dir=directory)
    try:
        os.write(fd, b"\0")
        os.fsync(fd)  # a full disk may only say so here
    finally:
        os.close(fd)
        os.unlink(probe)


@contextmanager
def staged_directory(final: Path, replace: bool = False) -> Iterator[Path]:
    """A new directory beside `final` to write into, renamed to `final` when
    the block ends and removed if it raises: a reader finds all of it or none.
    `final` must not exist unless `replace`, which removes it just before."""
    final = Path(final)
    if final.exists() and not replace:
        raise FileExistsError(f"{final} already exists; write to a new directory")
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield staging
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
