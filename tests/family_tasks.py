"""What the family tests share: building a candidate into a bundle (once per
session for the bundles several tests read), running a generator outside the
sandbox, and running the oracle with one contract rule read the other way."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from clawloop_assets.harness.verification import run_verifier, run_verifiers
from clawloop_assets.synthesis.candidates import build_candidate, generator_spec, write_generator
from clawloop_assets.synthesis.catalogs import load_capability_catalog
from clawloop_assets.task_bundle import TaskBundle, load_task_bundle
from clawloop_assets.validation.agent_free import leakage_audit
from resources.sandbox import Mount

CAPABILITIES = {c.id: c for c in load_capability_catalog()}


def build_bundle(sandbox, capability, root: Path, domain, level: int, seed: int) -> TaskBundle:
    spec = generator_spec(capability, domain, level)
    gen = write_generator(spec, root / "generators" / spec.generator_id)
    candidate = build_candidate(sandbox, gen, spec, seed, "round-0001", root / "tasks")
    assert candidate.error is None, candidate.error
    return load_task_bundle(candidate.bundle_dir)


class FamilyBundles:
    """Each (family, domain, level, seed) built once per session: the bundles
    tests only read (validation, level 0, the readings, which copy first)."""

    _built: dict[tuple[str, str, int, int], TaskBundle] = {}

    def __init__(self, sandbox, root: Path):
        self.sandbox, self.root = sandbox, Path(root)

    def get(self, family: str, domain, level: int, seed: int) -> TaskBundle:
        key = (family, domain.id, level, seed)
        if key not in self._built:
            root = self.root / f"{family}-{domain.id}-L{level}-s{seed}"
            self._built[key] = build_bundle(self.sandbox, CAPABILITIES[family], root, domain, level, seed)
        return self._built[key]


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def run_generator(family: str, domain, level: int, seed: int, root: Path) -> Path:
    """The family's generator run directly (no sandbox), as the sandbox runs
    it; the directory it wrote (environment/, solution/, answer/, ...)."""
    spec = generator_spec(CAPABILITIES[family], domain, level)
    gen = write_generator(spec, root / "gen")
    subprocess.run([sys.executable, "-I", str(gen / spec.script_name), "--params", str(gen / "params.json"),
                    "--seed", str(seed), "--out", str(root / "out")], check=True)
    return root / "out"


def family_module(family: str):
    """The family script imported in-process, for checks that need no sandbox."""
    spec = importlib.util.spec_from_file_location(f"{family}_family", CAPABILITIES[family].generator_script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def solve_read_the_other_way(sandbox, built: TaskBundle, edits, tmp_path: Path):
    """The edited solution's run and the verdict on the workspace it left,
    after `edits`: pairs of exact strings, each asserted to occur once in
    solve.sh, or a function of solve.sh giving them. One that crashes is
    judged on what it left, like an agent."""
    bundle = load_task_bundle(Path(shutil.copytree(built.root, tmp_path / "bundle")))
    solve = bundle.solution_path.read_text()
    for correct, other in (edits(solve) if callable(edits) else edits):
        assert solve.count(correct) == 1, correct
        solve = solve.replace(correct, other)
    bundle.solution_path.write_text(solve)
    workspace = Path(shutil.copytree(bundle.environment_dir, tmp_path / "workspace"))
    workspace.chmod(0o755)
    solved = sandbox.run(["bash", "/solution/solve.sh"],
                         [Mount(workspace, "/workspace", writable=True), Mount(bundle.solution_path.parent, "/solution")])
    return solved, run_verifier(sandbox, bundle, workspace)


def domain_dependent_checks(sandbox, bundle, scratch: Path) -> str | None:
    """The checks of agent-free validation whose outcome can hang on a
    domain's data, or the first that fails: no answer value in the
    agent-visible text, the oracle passes the verifier, the untouched
    workspace does not. (The verifier's determinism and its refusal of empty
    and perturbed deliverables are the verifier's own properties:
    test_family_contract.py checks them for every family, level and format.)"""
    leak = leakage_audit(bundle)
    if leak:
        return leak
    untouched = Path(shutil.copytree(bundle.environment_dir, scratch / "untouched"))
    solved = Path(shutil.copytree(bundle.environment_dir, scratch / "solved"))
    for workspace in (untouched, solved):
        os.chmod(workspace, 0o755)
    outcome = sandbox.run(["bash", "/solution/solve.sh"],
                          [Mount(solved, "/workspace", writable=True), Mount(bundle.solution_path.parent, "/solution")])
    if outcome.exit_code != 0:
        return f"oracle exited with {outcome.exit_code}: {outcome.output.strip()[-200:]}"
    # Both verdicts in one sandbox run where the bundle allows it, as agent-free validation does.
    verdicts = run_verifiers(sandbox, bundle, [solved, untouched])
    for workspace, expected, verdict in zip((solved, untouched), (1.0, 0.0), verdicts, strict=True):
        if (verdict.status, verdict.reward) != ("scored", expected):
            return f"{workspace.name}: {verdict.status} {verdict.reward} {verdict.error or verdict.checks}"
    return None
