"""Helpers shared by the round's assets: recording a phase's cost, and
rendering tables for the UI."""

from typing import Mapping

import dagster as dg

from clawloop_assets.cost import PhaseCost
from clawloop_assets.markdown import markdown_table
from resources.warehouse import Warehouse, table_frame

# Concurrency pools, limited in the instance (dagster.production.yaml; the
# rollouts limit by `clawloop setup` from CLAWLOOP_ROLLOUT_POOL_LIMIT). DuckDB
# takes one writer process: the steps whose work is the warehouse run one at a
# time. Rollout steps spend minutes on the policy server and sandboxes and
# write once at the end (a short transaction, retried while the file is
# locked): they run side by side, up to the pool's limit.
WAREHOUSE_WRITER_POOL = "warehouse_writer"
ROLLOUTS_POOL = "rollouts"


def record_cost(warehouse: Warehouse, round_key: str, cost: PhaseCost) -> None:
    warehouse.replace("cost_ledger", table_frame("cost_ledger", [cost.row(round_key)]), {"round": round_key, "phase": cost.phase})


def histogram_table(counts: Mapping[int, int], label: str) -> dg.MetadataValue:
    """A text histogram: the UI renders markdown, so this needs no image store."""
    top = max(counts.values(), default=0) or 1
    rows = [(k, counts[k], "█" * round(20 * counts[k] / top)) for k in sorted(counts)]
    return markdown_table([label, "tasks", ""], rows)
