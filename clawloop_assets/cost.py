"""The cost ledger: wall and CPU seconds, rollouts and tokens per round and phase."""

from __future__ import annotations

import resource
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@dataclass
class PhaseCost:
    phase: str
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    rollouts: int = 0
    tokens: int = 0

    def row(self, round_key: str) -> dict:
        return {"round": round_key, "phase": self.phase, "wall_seconds": self.wall_seconds,
                "cpu_seconds": self.cpu_seconds, "rollouts": self.rollouts, "tokens": self.tokens}


@contextmanager
def measure(phase: str) -> Iterator[PhaseCost]:
    """Times the block; the caller adds rollouts and tokens to the yielded cost."""
    cost = PhaseCost(phase)
    wall, cpu = time.monotonic(), _cpu_seconds()
    try:
        yield cost
    finally:
        cost.wall_seconds = time.monotonic() - wall
        cost.cpu_seconds = max(0.0, _cpu_seconds() - cpu)
