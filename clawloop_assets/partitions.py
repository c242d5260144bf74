"""Rounds: one dynamic partition per round of the loop (round-0001, ...)."""

from __future__ import annotations

import re

import dagster as dg

round_partitions = dg.DynamicPartitionsDefinition(name="rounds")

_ROUND = re.compile(r"^round-(\d{4})$")


def round_key(number: int) -> str:
    if not 1 <= number <= 9999:
        raise ValueError(f"round numbers run from 1 to 9999, got {number}")
    return f"round-{number:04d}"


def round_number(key: str) -> int:
    match = _ROUND.match(key)
    if not match:
        raise ValueError(f"{key!r} is not a round key (expected round-NNNN)")
    return int(match.group(1))


def round_after(keys) -> str:
    """The round after the highest of these round keys; round-0001 for none."""
    return round_key(max((round_number(k) for k in keys), default=0) + 1)


def previous_round(key: str) -> str | None:
    """Round k-1's key, or None for round 1 (which starts from the base model)."""
    number = round_number(key)
    return round_key(number - 1) if number > 1 else None
