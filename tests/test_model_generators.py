"""Generators written by the synthesis model: a scripted reply (a unit-test
double for the model) that is a known generator goes through the same build
and validation as a built-in family; garbage replies are rejected, each with a
recorded reason, before anything runs."""

from pathlib import Path

import dagster as dg
import pytest
from conftest import MODEL_CACHE

from clawloop_assets.synthesis.candidates import build_candidate, generator_spec, write_generator
from clawloop_assets.synthesis.catalogs import load_capability_catalog, load_domain_catalog
from clawloop_assets.synthesis.model_generators import (
    GeneratorReplyError,
    extract_generator,
    generator_prompt,
    write_model_generator,
)
from clawloop_assets.task_bundle import load_task_bundle
from clawloop_assets.validation.agent_free import validate_without_agent
from resources.policy import Completion, PolicyModel, PolicySession
from resources.sandbox import BubblewrapSandbox

GENERATORS = Path(__file__).parents[1] / "clawloop_assets" / "synthesis" / "generators"


def model_style(family: str) -> str:
    """A built-in family written the way the prompt asks a model to (a build function
    and run(build) under __main__) instead of with the family skeleton's footer."""
    source = (GENERATORS / f"{family}.py").read_text()
    footer = "build = family(__name__, LEVELS)\n"
    assert source.endswith(footer)
    return source[: -len(footer)] + (
        "from generator_common import build_level, run  # noqa: E402\n\n\n"
        "def build(seed, params):\n    return build_level(LEVELS, seed, params)\n\n\n"
        "if __name__ == \"__main__\":\n    run(build)\n")
CAPABILITIES = {c.id: c for c in load_capability_catalog()}
DOMAIN = load_domain_catalog()[2]


def fenced(code: str) -> str:
    return f"Here is the generator.\n```python\n{code}```\nIt is deterministic."


def test_the_prompt_states_the_interface_and_the_target():
    messages = generator_prompt(CAPABILITIES["ledger_reconciliation"], DOMAIN, 2, guidance="premature termination")
    system, user = messages[0]["content"], messages[1]["content"]
    assert "--params /generator/params.json --seed N --out /out" in system
    assert "assemble(params, instruction, environment, contract, checks, key, solution, fmt)" in system
    assert "run(build):" in system  # the shared helpers are listed from generator_common itself
    assert "ledger_reconciliation" in user and DOMAIN.id in user and "level 2" in user
    assert "premature termination" in user


def test_a_reply_holding_a_known_generator_builds_the_same_task(tmp_path):
    sandbox = BubblewrapSandbox()
    spec = generator_spec(CAPABILITIES["grouped_statistics"], DOMAIN, 1)
    reply = fenced(model_style("grouped_statistics"))
    written = write_model_generator(spec, reply, tmp_path / "model")
    model_build = build_candidate(sandbox, written, spec, 3, "round-0001", tmp_path / "model-tasks")
    builtin_build = build_candidate(sandbox, write_generator(spec, tmp_path / "builtin"), spec, 3, "round-0001",
                                    tmp_path / "builtin-tasks")
    assert model_build.error is None and builtin_build.error is None
    same = [p.relative_to(model_build.bundle_dir) for p in sorted(model_build.bundle_dir.rglob("*"))]
    assert same == [p.relative_to(builtin_build.bundle_dir) for p in sorted(builtin_build.bundle_dir.rglob("*"))]
    assert validate_without_agent(sandbox, load_task_bundle(model_build.bundle_dir), tmp_path / "scratch").passed


GARBAGE = [
    ("prose only", "I would generate a CSV of hives and ask for totals.", "no ```python block"),
    ("empty", "", "no ```python block"),
    ("syntax error", fenced("def build(seed, params:\n    return 1\n"), "does not parse: line 1"),
    ("no entry point", fenced("def helper():\n    return 1\n"), "must define build(seed, params) and call run(build)"),
    ("network import", fenced("import urllib.request\ndef build(seed, params):\n    pass\nrun(build)\n"),
     "imports urllib, outside the allowed standard modules"),
    ("subprocess", fenced("import subprocess\ndef build(seed, params):\n    pass\nrun(build)\n"),
     "imports subprocess"),
    ("too long", fenced("x = 1\n" * 20000), "over the 65536-byte limit"),
]


@pytest.mark.parametrize("label, reply, reason", GARBAGE, ids=[g[0] for g in GARBAGE])
def test_garbage_replies_are_rejected_with_a_reason(tmp_path, label, reply, reason):
    spec = generator_spec(CAPABILITIES["grouped_statistics"], DOMAIN, 0)
    with pytest.raises(GeneratorReplyError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        write_model_generator(spec, reply, tmp_path / "generator")
    assert not (tmp_path / "generator").exists()  # nothing written, nothing to run


def test_a_reply_that_passes_the_text_checks_but_raises_is_a_recorded_build_failure(tmp_path):
    # Text checks cannot see behaviour: running it (in the sandbox) can.
    code = ("import os, sys\nsys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\n"
            "from generator_common import run\n\ndef build(seed, params):\n    raise KeyError('group_field')\n\n"
            "if __name__ == '__main__':\n    run(build)\n")
    assert extract_generator(fenced(code)) == code
    spec = generator_spec(CAPABILITIES["grouped_statistics"], DOMAIN, 0)
    written = write_model_generator(spec, fenced(code), tmp_path / "generator")
    failed = build_candidate(BubblewrapSandbox(), written, spec, 0, "round-0001", tmp_path / "tasks")
    assert failed.bundle_dir is None and "exited with code 1" in failed.error and "group_field" in failed.error


class ScriptedGeneratorPolicy(PolicyModel):
    """A unit-test double for a capable synthesis model: it answers a prompt for
    grouped statistics with the built-in family's program, anything else with prose."""

    def base_checkpoint(self):
        return MODEL_CACHE / "smollm2-135m-instruct"

    def load(self, checkpoint_dir):
        return ScriptedGeneratorSession()


class ScriptedGeneratorSession(PolicySession):
    def encode(self, text):
        return [ord(c) for c in text]

    def decode(self, token_ids):
        return "".join(chr(t) for t in token_ids)

    def chat_text(self, messages, *, add_generation_prompt):
        return "\n".join(m["content"] for m in messages)

    def sample(self, prompts, n, params):
        assert params.stop == ()  # the program is fenced: no stop string may cut it
        replies = []
        for prompt in prompts:
            text = self.decode(prompt)
            reply = (fenced(model_style("grouped_statistics"))
                     if "Capability: grouped_statistics" in text else "I cannot write that one.")
            replies.append([Completion(self.encode(reply), [0.0] * len(reply), reply, "stop")] * n)
        return replies


def test_a_round_can_take_its_generators_from_the_model(clawloop_home, base_checkpoint_dir):
    from clawloop_assets.definitions import gate_checks, round_assets
    from clawloop_assets.loop_config import LoopConfig
    from resources.training_launcher import SubprocessTrainingLauncher
    from resources.warehouse import DuckDBWarehouse

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("rounds", ["round-0001"])
    result = dg.materialize(
        [*round_assets, *gate_checks], partition_key="round-0001", instance=instance,
        selection=dg.AssetSelection.assets("candidate_tasks").upstream(),
        resources={"policy": ScriptedGeneratorPolicy(), "sandbox": BubblewrapSandbox(),
                   "warehouse": DuckDBWarehouse(), "training_launcher": SubprocessTrainingLauncher(),
                   "loop": LoopConfig(candidates_per_round=9, generator_source="model", synthesis_routes=["capability"])},
    )
    assert result.success
    warehouse = DuckDBWarehouse()
    generators = warehouse.read("generators", {"round": "round-0001"})
    assert set(generators["source"]) == {"model"}
    # One generator per capability x domain x level, each candidate in its own domain; the scripted
    # model writes a real generator only for grouped_statistics and garbage for every other capability.
    plan = warehouse.read("synthesis_plans", {"round": "round-0001"})
    planned = dict(zip(plan["capability_id"], plan["candidates"]))
    good, others = planned["grouped_statistics"], sum(planned.values()) - planned["grouped_statistics"]
    written = generators.filter(generators["status"] == "written")
    assert set(written["capability_id"]) == {"grouped_statistics"} and written.height == good >= 1
    rejected = generators.filter(generators["status"] == "rejected")
    assert rejected.height == others > 0 and rejected["path"].null_count() == others
    assert set(rejected["reason"]) == {"generator reply rejected: the reply holds no ```python block"}
    tasks = warehouse.read("tasks", {"round": "round-0001"})
    built = tasks.filter(tasks["build_status"] == "built")
    assert set(built["capability_id"]) == {"grouped_statistics"} and built.height == good
    failed = tasks.filter(tasks["build_status"] == "failed")
    assert set(failed["build_error"]) == {"generator reply rejected: the reply holds no ```python block"}
