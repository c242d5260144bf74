"""Benchmarks and the tools that read a run's home (see README.md)."""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from resources.paths import WAREHOUSE_FILE


@contextmanager
def warehouse_copy(home: Path) -> Iterator[Path]:
    """A copy of the run at `home`'s warehouse, removed on exit: a run that
    holds the warehouse open is not disturbed, nor is it changed."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / WAREHOUSE_FILE
        shutil.copyfile(home / WAREHOUSE_FILE, copy)
        yield copy
