"""Taken back (docs/experiments/2026-12-05-what-a-round-can-admit.md): how
many rung candidates the rung's variant hold-back moves between level-0
variants in each round of a finished run, its plans replayed from the
run's evidence: python -m benchmarks.rung_variant_moves HOME RUN_CONFIG"""
import sys
from collections import Counter
from pathlib import Path

from benchmarks import warehouse_copy
from clawloop_assets.assets.synthesis import plan_round
from clawloop_assets.cli import load_run_config
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.synthesis.candidates import variant_seeds
from resources.warehouse import DuckDBWarehouse

home, cfg = Path(sys.argv[1]), Path(sys.argv[2])
loop = LoopConfig(**load_run_config(cfg).get("resources", {}).get("loop", {}).get("config", {}))
with warehouse_copy(home) as copy:
    w = DuckDBWarehouse(path=str(copy))
    for key in w.query("SELECT DISTINCT round FROM synthesis_plans ORDER BY round")["round"].to_list()[1:]:
        caps = w.read("capabilities", {"round": key})["capability_id"].to_list()
        plan, _, _ = plan_round(w, key, caps, loop)
        moved, held = 0, []
        n = int(key[-4:])
        for e in plan:
            if e.difficulty == -1 and e.operation_weights:
                first = n * 1000 + (n - 1) % 4
                new = Counter(s % 4 for s in variant_seeds(first, e.candidates, e.operation_weights))
                old = Counter((first + j) % 4 for j in range(e.candidates))
                moved += sum((new - old).values())
                held.append(f"{e.capability_id}:{[v for v, s in e.operation_weights.items() if s < 0.2]}")
        rung = sum(e.candidates for e in plan if e.difficulty == -1)
        print(key, f"rung {rung}, moved between variants {moved}", "; ".join(held))
