"""Rewards that cannot be forged: what an agent can leave in its workspace
never changes a reward, and verification is deterministic, on each sandbox
backend (bubblewrap; Docker in the slow suite) and identical across them."""

import json
import shutil
from pathlib import Path

import pytest
from conftest import SANDBOX_BACKENDS, docker_sandbox, make_sandbox

from clawloop_assets.harness.verification import run_verifier
from clawloop_assets.synthesis.candidates import build_candidate, generator_spec, write_generator
from clawloop_assets.synthesis.catalogs import load_capability_catalog, load_domain_catalog
from clawloop_assets.task_bundle import load_task_bundle
from resources.sandbox import BubblewrapSandbox, Mount

bubblewrap = BubblewrapSandbox()
CASES = [(c.id, level) for c in load_capability_catalog() for level in (0, 2)]

# Files an agent could plant to hijack a Python verifier, or to pose as its result.
FORGERIES = {
    "sitecustomize.py": "import os\nos._exit(0)\n",
    "usercustomize.py": "import os\nos._exit(0)\n",
    "conftest.py": "import os\nos._exit(0)\n",
    "forge.pth": "import os; os._exit(0)\n",
    "json.py": "raise SystemExit(0)\n",
    "result.json": '{"reward": 1.0, "checks": [{"name": "all", "passed": true}]}\n',
    "PASSED": "PASSED\n",
}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    root = tmp_path_factory.mktemp("integrity")
    domain = load_domain_catalog()[3]
    capabilities = {c.id: c for c in load_capability_catalog()}
    built = {}
    for capability, level in CASES:
        spec = generator_spec(capabilities[capability], domain, level)
        generator = write_generator(spec, root / "generators" / spec.generator_id)
        build = build_candidate(bubblewrap, generator, spec, 11, "round-0001", root / "tasks")
        assert build.error is None, build.error
        built[(capability, level)] = load_task_bundle(build.bundle_dir)
    return built


@pytest.fixture(params=SANDBOX_BACKENDS)
def sandbox(request):
    return make_sandbox(request.param)


def workspace_of(bundle, tmp_path: Path, solved: bool, sandbox=bubblewrap) -> Path:
    workspace = tmp_path / "workspace"
    shutil.copytree(bundle.environment_dir, workspace)
    if solved:
        result = sandbox.run(["bash", "/solution/solve.sh"],
                             [Mount(workspace, "/workspace", writable=True), Mount(bundle.solution_path.parent, "/solution")])
        assert result.exit_code == 0, result.output
    return workspace


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-L{c[1]}")
def test_planted_files_never_change_a_reward(sandbox, bundles, tmp_path, case):
    bundle = bundles[case]
    workspace = workspace_of(bundle, tmp_path, solved=False)
    for name, text in FORGERIES.items():
        (workspace / name).write_text(text)
    (workspace / "lib").mkdir()
    (workspace / "lib" / "sitecustomize.py").write_text(FORGERIES["sitecustomize.py"])
    verdict = run_verifier(sandbox, bundle, workspace)
    assert (verdict.status, verdict.reward) == ("scored", 0.0)


def test_a_deliverable_linked_to_the_answer_key_is_not_followed(sandbox, bundles, tmp_path):
    # The agent never sees /answer, but a link it leaves resolves inside the
    # verifier's sandbox: the verifier must not follow it.
    bundle = bundles[("grouped_statistics", 0)]
    workspace = workspace_of(bundle, tmp_path, solved=False)
    for check in json.loads(bundle.answer_path.read_text())["checks"]:
        path = check.get("path")
        if path:
            target = workspace / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)
            target.symlink_to("/answer/answer.json")
    verdict = run_verifier(sandbox, bundle, workspace)
    assert (verdict.status, verdict.reward) == ("scored", 0.0)


@pytest.mark.slow
def test_both_backends_give_identical_verdicts(bundles, tmp_path):
    # The same tasks, solved and not, on bubblewrap and on Docker: the same
    # rewards and the same checks, down to each check's message, and Docker's
    # twice alike. (On bubblewrap, agent-free validation checks that the
    # oracle passes, the untouched workspace fails and three verdicts agree,
    # for every family and level: test_family_contract, test_generators.)
    docker = docker_sandbox()
    for (capability, level), bundle in bundles.items():
        for solved in (False, True):
            verdicts = []
            for name, backend, runs in (("bubblewrap", bubblewrap, 1), ("docker", docker, 2)):
                workspace = workspace_of(bundle, tmp_path / f"{capability}-{level}-{solved}-{name}", solved, backend)
                for _ in range(runs):
                    verdict = run_verifier(backend, bundle, workspace)
                    verdicts.append((verdict.status, verdict.reward, verdict.checks))
            assert verdicts[0][:2] == ("scored", 1.0 if solved else 0.0), (capability, level, solved, verdicts[0])
            assert verdicts[0] == verdicts[1] == verdicts[2], (capability, level, solved)
