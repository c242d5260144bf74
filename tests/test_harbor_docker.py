"""Harbor tasks run the Harbor way on our Docker engine
(clawloop_assets/harbor/docker_run.py): the Dockerfile's base mapped to our
Debian images, the reward read by Harbor's rules, and an exported task of
ours built from its own Dockerfile, its oracle scoring 1 and its untouched
environment 0."""

import json
import os

import pytest

from clawloop_assets.harbor.docker_run import (
    DEBIAN_BASE,
    PYTHON_BASE,
    HarborRunError,
    map_base_image,
    read_reward,
    run_harbor_task,
    task_dockerfile,
    validate_the_harbor_way,
)


@pytest.mark.parametrize(("image", "local", "note"), [
    ("python:3.11-slim", PYTHON_BASE, None),
    ("python:3.13-slim-bookworm", PYTHON_BASE, "Python 3.13 asked for, Debian bookworm's 3.11 used"),
    ("ghcr.io/laude-institute/t-bench/python-3-13:20250620", None, "no local stand-in"),
    ("ubuntu:24.04", DEBIAN_BASE, "Debian bookworm"),
    ("nvidia/cuda:12.4.0-runtime-ubuntu22.04", None, "no local stand-in"),
])
def test_base_images_map_to_our_debian_images_or_are_refused(image, local, note):
    if local is None:
        with pytest.raises(HarborRunError, match=note):
            map_base_image(image, "Dockerfile:1")
        return
    mapped, adaptation = map_base_image(image, "Dockerfile:1")
    assert mapped == local and adaptation.startswith(f"Dockerfile:1: FROM {image} built from {local}")
    assert note is None or note in adaptation


def test_the_dockerfile_is_rewritten_stage_by_stage_and_gets_the_tests_apt_packages(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM --platform=linux/amd64 python:3.12 AS build\nRUN echo hi\n"
                          "FROM build\nUSER app\nWORKDIR /app\n")
    text, adaptations = task_dockerfile(dockerfile, ["curl"])
    assert text.splitlines() == [f"FROM {PYTHON_BASE} AS build", "RUN echo hi", "FROM build", "USER app", "WORKDIR /app",
                                 "USER root", "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                                 "--no-install-recommends curl && rm -rf /var/lib/apt/lists/*", "USER app"]
    assert len(adaptations) == 2 and "Python 3.12 asked for" in adaptations[0]


@pytest.mark.parametrize(("files", "reward", "detail"), [
    ({"reward.txt": "1\n"}, 1.0, "reward.txt says 1"),
    ({"reward.json": '{"reward": 0.5, "style": 1, "note": "x"}'}, 0.5, "reward.json says 0.5"),
    ({"reward.json": '{"a": 1, "b": 0}', "reward.txt": "0"}, 0.0, "reward.txt says 0"),
    ({"reward.json": '{"score": 1}'}, 1.0, "reward.json 'score' says 1"),
    ({"reward.json": '{"a": 1, "b": 0}'}, None, "no 'reward' and 2 other numbers"),
    ({"reward.txt": "2"}, None, "not a number in [0, 1]"),
    ({"reward.txt": "yes"}, None, "not a number"),
    ({}, None, "no /logs/verifier/reward.txt or reward.json"),
])
def test_the_reward_is_read_by_harbors_rules(tmp_path, files, reward, detail):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    value, why, _named = read_reward(tmp_path)
    assert value == reward and detail in why


def test_a_reward_file_that_is_a_link_is_not_read(tmp_path):
    (tmp_path / "elsewhere").write_text("1")
    os.symlink(tmp_path / "elsewhere", tmp_path / "reward.txt")
    value, why, _ = read_reward(tmp_path)
    assert value is None and "plain file" in why


@pytest.fixture
def exported_task(clawloop_home, tmp_path):
    from test_transfer import ROUND, record_round

    from clawloop_assets.harbor.task_format import export_round
    from clawloop_assets.synthesis import catalogs

    domain = catalogs.load_domain_catalog()[0].id
    warehouse, task_ids = record_round(tmp_path, [("log_analysis", domain, 31)], admitted=1, heldout=set())
    (task_dir,) = export_round(warehouse, ROUND, tmp_path / "harbor")
    return task_dir


@pytest.mark.slow
def test_an_exported_task_run_the_harbor_way_scores_its_oracle_1_and_untouched_0(exported_task):
    failure, solved, untouched = validate_the_harbor_way(exported_task)
    assert failure is None, failure
    assert solved.reward == 1.0 and solved.oracle_exit == 0, solved.detail
    assert untouched.reward == 0.0 and not untouched.oracle, untouched.detail
    assert solved.image == untouched.image  # built once, reused
    result = json.loads((exported_task / "tests" / "answer.json").read_text())
    assert result["checks"]  # our verifier's answer key travelled with the task


@pytest.mark.slow
def test_the_oracle_runs_without_network_or_capabilities(exported_task):
    solve = exported_task / "solution" / "solve.sh"
    solve.write_text("#!/bin/bash\nset -e\n"
                     "grep -q '^CapEff:[[:space:]]*0000000000000000$' /proc/self/status\n"
                     "test \"$(ls /sys/class/net)\" = lo\n"
                     "if python3 -c 'import socket; socket.create_connection((\"deb.debian.org\", 80), timeout=3)'; "
                     "then exit 9; fi\n"
                     + solve.read_text().split("\n", 1)[1])
    run = run_harbor_task(exported_task)
    assert run.oracle_exit == 0 and run.reward == 1.0, run.detail
