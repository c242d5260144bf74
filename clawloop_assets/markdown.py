"""Markdown tables for asset metadata: the Dagster UI renders them."""

from __future__ import annotations

from typing import Sequence

import dagster as dg


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> dg.MetadataValue:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    return dg.MetadataValue.md("\n".join(lines))
