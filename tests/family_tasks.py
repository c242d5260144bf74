"""What the family test files share: building one candidate into a bundle,
and running the oracle with one contract rule read the other way."""

from __future__ import annotations

import shutil
from pathlib import Path

from clawloop_assets.synthesis import build_candidate, generator_spec, write_generator
from clawloop_assets.task_bundle import TaskBundle, load_task_bundle
from clawloop_assets.verification import run_verifier
from resources.sandbox import Mount


def build_bundle(sandbox, capability, root: Path, domain, level: int, seed: int) -> TaskBundle:
    spec = generator_spec(capability, domain, level)
    gen = write_generator(spec, root / "generators" / spec.generator_id)
    candidate = build_candidate(sandbox, gen, spec, seed, "round-0001", root / "tasks")
    assert candidate.error is None, candidate.error
    return load_task_bundle(candidate.bundle_dir)


def solve_read_the_other_way(sandbox, built: TaskBundle, edits, tmp_path: Path):
    """The verdict on the oracle's workspace after `edits` (pairs of exact
    strings, each asserted to occur once in solve.sh), or None when the edited
    solution crashed (a reading that crashes fails just as surely)."""
    bundle = load_task_bundle(Path(shutil.copytree(built.root, tmp_path / "bundle")))
    solve = bundle.solution_path.read_text()
    for correct, other in edits:
        assert solve.count(correct) == 1, correct
        solve = solve.replace(correct, other)
    bundle.solution_path.write_text(solve)
    workspace = Path(shutil.copytree(bundle.environment_dir, tmp_path / "workspace"))
    solved = sandbox.run(["bash", "/solution/solve.sh"],
                         [Mount(workspace, "/workspace", writable=True), Mount(bundle.solution_path.parent, "/solution")])
    return run_verifier(sandbox, bundle, workspace) if solved.exit_code == 0 else None
