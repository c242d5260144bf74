"""run_verifiers: several verifications of one bundle in one sandbox run give
exactly the verdicts run_verifier gives each alone, including for a child
that crashes or times out, and a bundle whose verify.py is not the
canonical one is verified one run at a time."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from clawloop_assets.harness import verification
from clawloop_assets.harness.verification import CANONICAL_VERIFIER, run_verifier, run_verifiers
from clawloop_assets.synthesis.candidates import VERIFIER_SCRIPT, build_candidate, generator_spec, write_generator
from clawloop_assets.synthesis.catalogs import load_capability_catalog, load_domain_catalog
from clawloop_assets.task_bundle import TaskBundle, load_task_bundle
from resources.sandbox import BubblewrapSandbox, Mount, SandboxLimits

CAPABILITIES = {c.id: c for c in load_capability_catalog()}
DOMAINS = {d.id: d for d in load_domain_catalog()}


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


@pytest.fixture(scope="module")
def bundle(sandbox, tmp_path_factory) -> TaskBundle:
    root = tmp_path_factory.mktemp("bundle")
    spec = generator_spec(CAPABILITIES["grouped_statistics"], DOMAINS["tide_gauge_readings"], 2)
    candidate = build_candidate(sandbox, write_generator(spec, root / "generator"), spec, 0, "round-0001", root / "tasks")
    assert candidate.error is None
    return load_task_bundle(candidate.bundle_dir)


@pytest.fixture
def runs(monkeypatch):
    """The argv of every sandbox run, as they happen."""
    seen: list[list[str]] = []
    original = BubblewrapSandbox.run

    def run(self, argv, mounts, **kwargs):
        seen.append(list(argv))
        return original(self, argv, mounts, **kwargs)

    monkeypatch.setattr(BubblewrapSandbox, "run", run)
    return seen


def workspace(bundle: TaskBundle, path: Path) -> Path:
    shutil.copytree(bundle.environment_dir, path)
    return path


def workspaces(sandbox, bundle: TaskBundle, tmp_path: Path) -> list[Path]:
    """Solved, untouched, wrong, unparsable, holding a link, and not there."""
    solved = workspace(bundle, tmp_path / "solved")
    outcome = sandbox.run(["bash", "/solution/solve.sh"],
                          [Mount(solved, "/workspace", writable=True), Mount(bundle.solution_path.parent, "/solution")])
    assert outcome.exit_code == 0, outcome.output
    deliverable = bundle.answer()["checks"][0]["path"]
    wrong = workspace(bundle, tmp_path / "wrong")
    shutil.copyfile(solved / deliverable, wrong / deliverable)
    with (wrong / deliverable).open("a") as handle:
        handle.write("an,extra,row\n")
    garbage = workspace(bundle, tmp_path / "garbage")
    (garbage / deliverable).write_bytes(b"\xff\xfe not text")
    linked = workspace(bundle, tmp_path / "linked")
    os.symlink("/answer/answer.json", linked / deliverable)
    return [solved, bundle.environment_dir, solved, wrong, garbage, linked, tmp_path / "missing"]


def verdicts(results) -> list[tuple]:
    return [(r.status, r.reward, r.checks, r.error) for r in results]


def test_one_batch_gives_the_verdicts_of_single_runs(sandbox, bundle, tmp_path, runs):
    assert (bundle.tests_dir / "verify.py").read_bytes() == CANONICAL_VERIFIER.read_bytes() == VERIFIER_SCRIPT.read_bytes()
    paths = workspaces(sandbox, bundle, tmp_path)
    runs.clear()
    batched = run_verifiers(sandbox, bundle, paths)
    # One batch, then run_verifier for the workspace holding a link (the missing one needs no run).
    assert len(runs) == 2 and "-c" in runs[0] and runs[1][2] == "/tests/verify.py"
    single = [run_verifier(sandbox, bundle, path) for path in paths]
    assert verdicts(batched) == verdicts(single)
    assert [(r.status, r.reward) for r in batched] == [("scored", 1.0), ("scored", 0.0), ("scored", 1.0),
                                                      ("scored", 0.0), ("scored", 0.0), ("scored", 0.0), ("error", None)]


# A verifier the test makes canonical: the generic one, but it crashes or
# hangs on a workspace that holds a file saying so.
MISBEHAVING = CANONICAL_VERIFIER.read_text(encoding="utf-8").replace(
    "def main():\n",
    "def main():\n"
    "    import sys, time\n"
    "    workspace = sys.argv[sys.argv.index('--workspace') + 1]\n"
    "    if os.path.exists(os.path.join(workspace, 'crash')):\n"
    "        raise RuntimeError('crashed on purpose')\n"
    "    if os.path.exists(os.path.join(workspace, 'hang')):\n"
    "        time.sleep(60)\n", 1)


def test_a_crashing_or_hanging_child_gets_the_verdict_of_a_run_of_its_own(sandbox, bundle, tmp_path, runs, monkeypatch):
    assert "crashed on purpose" in MISBEHAVING
    copied = load_task_bundle(Path(shutil.copytree(bundle.root, tmp_path / "bundle")))
    (copied.tests_dir / "verify.py").write_text(MISBEHAVING, encoding="utf-8")
    monkeypatch.setattr(verification, "_canonical_verifier_bytes", lambda: MISBEHAVING.encode("utf-8"))
    crash = workspace(copied, tmp_path / "crash")
    (crash / "crash").write_text("")
    hang = workspace(copied, tmp_path / "hang")
    (hang / "hang").write_text("")
    paths = [copied.environment_dir, crash, hang, copied.environment_dir]
    limits = SandboxLimits(wall_seconds=2.0, cpu_seconds=5)
    runs.clear()
    batched = run_verifiers(sandbox, copied, paths, limits=limits)
    assert len(runs) == 3  # the batch, then the crashing and the hanging workspace alone
    single = [run_verifier(sandbox, copied, path, limits=limits) for path in paths[1:3]]
    assert verdicts(batched[1:3]) == verdicts(single)
    assert "crashed on purpose" in batched[1].error and "timed out" in batched[2].error
    assert verdicts(batched[:1]) == verdicts(batched[3:]) == [("scored", 0.0, batched[0].checks, None)]


def test_a_verifier_not_the_canonical_one_runs_alone_each_time(sandbox, bundle, tmp_path, runs):
    copied = load_task_bundle(Path(shutil.copytree(bundle.root, tmp_path / "bundle")))
    with (copied.tests_dir / "verify.py").open("a") as handle:
        handle.write("# not the canonical verifier any more\n")
    runs.clear()
    batched = run_verifiers(sandbox, copied, [copied.environment_dir] * 3)
    assert len(runs) == 3 and all(argv[2] == "/tests/verify.py" for argv in runs)
    assert verdicts(batched) == verdicts([run_verifier(sandbox, bundle, bundle.environment_dir)] * 3)


def test_the_batch_driver_calls_main_at_the_depth_of_a_run_of_its_own():
    # A RecursionError's threshold depends on the frame depth main() runs at;
    # a verdict naming one is verified again alone anyway.
    driver = verification._BATCH_DRIVER
    assert "\n            verify.main()\n" in driver and "def " not in driver
