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
    ("ubuntu:24.04", "clawloop/harbor-ubuntu:noble", "ubuntu noble, bootstrapped here"),
    ("debian:13.0-slim", "clawloop/harbor-debian:trixie", "debian trixie, bootstrapped here"),
    ("debian:bookworm-slim", DEBIAN_BASE, "Debian bookworm"),
    ("ubuntu:16.04", DEBIAN_BASE, "Debian bookworm"),
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


def test_tests_that_run_uv_get_an_interpreter_at_build_time(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM ubuntu:24.04\nWORKDIR /app\n")
    text, adaptations = task_dockerfile(dockerfile, [], interpreter=True)
    assert text.splitlines()[-1].endswith("--no-install-recommends python3 && rm -rf /var/lib/apt/lists/*")
    assert "python3 installed at build time for tests/test.sh's uv" in adaptations[-1]
    assert "python3" not in task_dockerfile(dockerfile, [])[0]


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


def task_capabilities_mask() -> str:
    """/proc/self/status's CapEff of a task container's processes."""
    from clawloop_assets.harbor.docker_run import TASK_CAPABILITIES

    bits = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6, "SETUID": 7,
            "NET_BIND_SERVICE": 10, "SYS_CHROOT": 18}  # linux/capability.h
    return f"{sum(1 << bits[name] for name in TASK_CAPABILITIES):016x}"


@pytest.mark.slow
def test_the_oracle_runs_without_network_and_with_only_the_task_capabilities(exported_task):
    mask = task_capabilities_mask()
    solve = exported_task / "solution" / "solve.sh"
    solve.write_text("#!/bin/bash\nset -e\n"
                     f"grep -q '^CapEff:[[:space:]]*{mask}$' /proc/self/status\n"
                     "grep -q '^NoNewPrivs:[[:space:]]*1$' /proc/self/status\n"
                     # chroot and ptrace as Docker's default allows them; mount denied as in our sandbox
                     "python3 -c \"import os; os.chroot('/')\"\n"
                     "python3 -c 'import ctypes; assert ctypes.CDLL(None).ptrace(0, 0, 0, 0) == 0'\n"
                     "python3 -c \"import ctypes; assert ctypes.CDLL(None).mount(b'x', b'/mnt', b'tmpfs', 0, None)\"\n"
                     "test \"$(ls /sys/class/net)\" = lo\n"
                     "if python3 -c 'import socket; socket.create_connection((\"deb.debian.org\", 80), timeout=3)'; "
                     "then exit 9; fi\n"
                     + solve.read_text().split("\n", 1)[1])
    run = run_harbor_task(exported_task)
    assert run.oracle_exit == 0 and run.reward == 1.0, run.detail


def test_a_task_budget_caps_each_step_and_says_so():
    from clawloop_assets.harbor.docker_run import TaskBudget

    assert TaskBudget(None).cap(600.0, "the oracle") == (600.0, "600 s")
    timeout, text = TaskBudget(100.0).cap(600.0, "the oracle")
    assert 98.0 < timeout <= 100.0 and "per-task budget of 100 s" in text
    assert TaskBudget(100.0).cap(30.0, "tests/test.sh") == (30.0, "30 s")
    with pytest.raises(HarborRunError, match="per-task time budget of 0.5 s ran out before the image build"):
        TaskBudget(0.5).cap(600.0, "the image build")


def test_docker_containers_get_the_cpu_weight_asked_for():
    from resources.sandbox import DockerSandbox, Mount, SandboxLimits

    def line(sandbox):
        return sandbox.command_line(["true"], [Mount("/tmp", "/workspace")], "/workspace", {}, SandboxLimits(), "n")

    weighted = line(DockerSandbox(cpu_shares=2))
    assert weighted[weighted.index("--cpu-shares") + 1] == "2"
    assert "--cpu-shares" not in line(DockerSandbox())


def test_the_benchmark_groups_reasons_from_task_images_apart(tmp_path):
    from benchmarks.harbor_import import reason_group

    root = tmp_path
    built = (f"in its own image: {root}/a/environment/Dockerfile: the image build failed: E: Unable to locate "
             "package libfoo\nmore")
    assert reason_group(built, root) == ("image: environment/Dockerfile: the image build failed: an apt package Debian "
                                         "bookworm (our stand-in base) does not have")
    beyond = (f"in its own image: {root}/b/solution/solve.sh: fetches from github.com, which this machine's registry "
              f"proxy does not reach (only deb.debian.org, ...); the oracle exited with 1; {root}/b/tests/test.sh: ...")
    assert reason_group(beyond, root) == "image: solution/solve.sh: fetches from a host beyond the package registries"
    for task, python in (("mailman", "3.12"), ("regex-chess", "3.11")):  # one group, whatever the package and Python
        no_wheel = (f"in its own image: {root}/{task}/tests/test.sh:26: PyPI has no wheel of x==1 (with its "
                    f"dependencies) for Python {python} on Linux x86-64: ERROR: Could not find a version")
        assert reason_group(no_wheel, root) == ("image: tests/test.sh: PyPI has no wheel of a requirement (pip "
                                                "download's ERROR)")
    both = (f"in its own image: {root}/s/tests/test.sh:20: `curl -L x` needs the network, which our sandbox does not "
            f"have; {root}/s/tests/test.sh:29: uv requirement 'git+https://x' is not a package name")
    assert reason_group(both, root) == "image: tests/test.sh: `…` needs the network, which our sandbox does not have"
    # A build failure is named by the step that failed, not taken for a RUN.
    image = f"in its own image: {root}/c/environment/Dockerfile: the image build failed: "
    missing = image + "Step 3/8 : COPY weights.pt /app/; COPY failed: file not found in build context or excluded"
    registry = image + ("Step 3/8 : COPY --from=ghcr.io/astral-sh/uv:0.8.15 /uv /bin/; invalid from flag value "
                        "ghcr.io/astral-sh/uv:0.8.15: dial tcp: lookup ghcr.io")
    run = image + "Step 4/9 : RUN make; The command '/bin/sh -c make' returned a non-zero code: 2"
    prefix = "image: environment/Dockerfile: the image build failed: "
    assert reason_group(missing, root) == prefix + "a COPY source missing from the task's files"
    assert reason_group(registry, root) == prefix + "COPY --from an image no registry here serves"
    assert reason_group(run, root) == prefix + "a RUN step failed"


# A task whose Dockerfile runs a build step our sandbox cannot replay (a
# RUN that writes a file the tests need): on Docker it validates in its
# own image, where our agent runs it (test_harbor_image_episode); on
# bubblewrap it is left out. Its image also needs what the official python
# images ship for C extensions (Python.h).
IMAGE_ONLY_DOCKERFILE = """FROM python:3.11-slim
WORKDIR /app
COPY logs/ /app/logs/
COPY README.txt .
RUN python3 -c "open('/app/expected.txt', 'w').write('3')"
RUN python3 -c "import os, sysconfig; assert os.path.exists(sysconfig.get_paths()['include'] + '/Python.h')"
"""
IMAGE_ONLY_TEST_SH = """#!/bin/bash
pip install pytest==8.4.1 pytest-json-ctrf==0.3.5
if python3 -c 'import pytest' && [ "$(cat /app/error_count.txt 2>/dev/null)" = "$(cat /app/expected.txt)" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


@pytest.fixture
def image_only_task(tmp_path):
    import shutil
    from pathlib import Path

    src = Path(shutil.copytree(Path(__file__).parent / "harbor_tasks" / "count-error-lines",
                               tmp_path / "bench" / "build-step-task"))
    (src / "environment" / "Dockerfile").write_text(IMAGE_ONLY_DOCKERFILE)
    (src / "tests" / "test.sh").write_text(IMAGE_ONLY_TEST_SH)
    return src


@pytest.mark.slow
def test_a_task_that_builds_only_as_an_image_validates_there_and_is_left_out_on_bubblewrap(image_only_task, tmp_path):
    from clawloop_assets.evaluation.fixed_set import image_only_tasks, imported_tasks
    from clawloop_assets.evaluation.task_dir import EvalError, load_eval_tasks, not_evaluated
    from clawloop_assets.harbor.docker_run import task_images
    from clawloop_assets.harbor.task_format import import_harbor_directory, import_harbor_task
    from resources.sandbox import BubblewrapSandbox, DockerSandbox

    dest = tmp_path / "dest"
    on_bubblewrap = import_harbor_task(image_only_task, dest, BubblewrapSandbox())
    assert not on_bubblewrap.validated and on_bubblewrap.image is None
    assert any("is a build step our sandbox cannot replay" in r for r in on_bubblewrap.reasons), on_bubblewrap.reasons

    (result,), manifest = import_harbor_directory(image_only_task.parent, dest, DockerSandbox(), task_budget_s=300)
    assert result.validated and not result.runnable and result.bundle_dir is None, result.reasons
    assert result.image.startswith("clawloop-harbor/build-step-task:") and result.image in task_images()
    assert "validates only in its own image" in result.reasons[0]
    assert any("tests/test.sh:2: `pip install pytest==8.4.1" in note and "offline wheelhouse" in note
               for note in result.adaptations), result.adaptations
    assert any("build step our sandbox cannot replay" in r for r in result.reasons[1:])  # why our agent cannot run it
    assert not (dest / "build-step-task").exists()
    rows = json.loads(manifest.read_text())
    assert rows["runnable"] == [] and [r["task_id"] for r in rows["image_only"]] == ["build-step-task"]
    assert rows["image_only"][0]["image"] == result.image and rows["image_only"][0]["sandbox"] == "docker"
    # Off Docker never loaded, never scored: named wherever it is left out (test_harbor_image_episode runs it).
    assert imported_tasks(dest) == [] and [r["task_id"] for r in image_only_tasks(dest)] == ["build-step-task"]
    with pytest.raises(EvalError, match="1 validate only in their own image, where our agent runs on the Docker"):
        load_eval_tasks(dest)
    assert "build-step-task" in not_evaluated(dest)
    # The prune policy keeps an image while a destination lists its task as validated in it.
    from clawloop_assets.harbor.docker_run import prune_task_images

    repository = "clawloop-harbor/build-step-task"
    assert prune_task_images([dest], repository) == ([], [result.image])
    assert prune_task_images([], repository) == ([result.image], []) and result.image not in task_images()
    (result,), _ = import_harbor_directory(image_only_task.parent, dest, DockerSandbox(), task_budget_s=300)
    assert result.image in task_images()  # built again (its layers were removed with it)

    # Its oracle broken: not validated, the reason says so, its image removed.
    (image_only_task / "solution" / "solve.sh").write_text("#!/bin/bash\nset -e\npip install clawloop-absent\n")
    broken = import_harbor_task(image_only_task, dest, DockerSandbox(), task_budget_s=300)
    assert not broken.validated
    assert broken.reasons[0].startswith(f"in its own image: {image_only_task}/tests/test.sh: the oracle's run does not "
                                        "pass: the oracle exited with 1"), broken.reasons[0]
    assert "No matching distribution found for clawloop-absent" in broken.reasons[0]  # PyPI answered, through the proxy
    assert result.image not in task_images()
    # An oracle that goes on past a fetch beyond the registries and exits 0: the host is still named as the cause.
    (image_only_task / "solution" / "solve.sh").write_text("#!/bin/bash\ncurl -sfO https://github.com/x/y.tar.gz\ntrue\n")
    broken = import_harbor_task(image_only_task, dest, DockerSandbox(), task_budget_s=300)
    assert broken.reasons[0].startswith(f"in its own image: {image_only_task}/solution/solve.sh: fetches from "
                                        "github.com, which this machine's registry proxy does not reach (only "
                                        "archive.ubuntu.com, deb.debian.org,"), broken.reasons[0]
    assert "the oracle exited with 0" in broken.reasons[0]
    # Refused after its image was built (a test.sh requirement offline cannot meet): no image kept either.
    (image_only_task / "tests" / "test.sh").write_text("#!/bin/bash\nuvx -w ./vendored/plugin pytest\n")
    refused = import_harbor_task(image_only_task, dest, DockerSandbox(), task_budget_s=300)
    assert "uv requirement './vendored/plugin' is not a package name; it needs the network" in refused.reasons[0]
    assert task_images("clawloop-harbor/build-step-task") == []


@pytest.mark.slow
def test_a_multi_stage_build_leaves_no_untagged_stage_behind(image_only_task):
    import subprocess
    import uuid

    from clawloop_assets.harbor.docker_run import build_task_image, remove_task_image

    marker = f"clawloop-stage-{uuid.uuid4().hex[:12]}"
    (image_only_task / "environment" / "Dockerfile").write_text(
        f"FROM python:3.11-slim AS stage\nRUN echo {marker} > /made\n"
        "FROM python:3.11-slim\nWORKDIR /app\nCOPY --from=stage /made /app/made\n")
    tag, _ = build_task_image(image_only_task)
    remove_task_image(tag)

    def history(image):
        return subprocess.run(["docker", "history", "--no-trunc", "--format", "{{.CreatedBy}}", image],
                              capture_output=True, text=True).stdout

    images = subprocess.run(["docker", "images", "-aq"], capture_output=True, text=True, check=True).stdout.split()
    assert not [image for image in set(images) if marker in history(image)]


@pytest.mark.slow
def test_a_build_that_fetches_from_an_unreachable_host_says_so(image_only_task):
    from clawloop_assets.harbor.docker_run import build_task_image

    dockerfile = image_only_task / "environment" / "Dockerfile"
    dockerfile.write_text(IMAGE_ONLY_DOCKERFILE + "RUN python3 -c \"import urllib.request; "
                          "urllib.request.urlopen('http://clawloop-test.invalid/x')\"\nRUN false\n")
    with pytest.raises(HarborRunError, match="fetches from a host this machine cannot reach"):
        build_task_image(image_only_task)


@pytest.mark.slow
def test_an_ubuntu_task_builds_on_ubuntu_bootstrapped_from_its_archive(tmp_path):
    from clawloop_assets.harbor.docker_run import build_task_image, remove_task_image

    task = tmp_path / "ubuntu-task"
    (task / "environment").mkdir(parents=True)
    (task / "task.toml").write_text('version = "1.0"\n')
    (task / "environment" / "Dockerfile").write_text(
        "FROM ubuntu:24.04\nRUN grep -q 'VERSION_ID=\"24.04\"' /etc/os-release && apt-get update -qq "
        "&& apt-get install -y -qq --no-install-recommends jq >/dev/null\nWORKDIR /app\n")
    tag, adaptations = build_task_image(task)
    remove_task_image(tag)
    assert "clawloop/harbor-ubuntu:noble (ubuntu noble, bootstrapped here)" in adaptations[0]


@pytest.mark.slow
def test_test_sh_requirements_outside_the_wheelhouse_are_fetched_as_wheels_for_the_images_python(tmp_path):
    from clawloop_assets.harbor.docker_run import TaskBudget, fetch_wheels

    note = fetch_wheels({"toml==0.10.2": "tests/test.sh:18"}, "3.12.3", tmp_path, TaskBudget(300))
    assert [p.name for p in tmp_path.iterdir()] == ["toml-0.10.2-py2.py3-none-any.whl"]
    assert note.startswith("tests/test.sh:18: toml==0.10.2 (not in the offline wheelhouse) fetched from PyPI for Python 3.12")
    with pytest.raises(HarborRunError, match="the task's image has no python3"):
        fetch_wheels({"toml==0.10.2": "tests/test.sh:18"}, None, tmp_path, TaskBudget(300))


# The tests' check that the registry proxy is gone: CONNECT through the
# relay's port must not be answered.
_PROXY_GONE_CHECK = (
    "python3 -c \"import socket,sys\ntry:\n s=socket.create_connection(('127.0.0.1',3128),3);"
    "s.sendall(b'CONNECT pypi.org:443 HTTP/1.1\\r\\n\\r\\n');sys.exit(9 if b' 200 ' in s.recv(100) else 0)\n"
    "except OSError: pass\" || { echo 0 > /logs/verifier/reward.txt; exit 0; }\n")


@pytest.mark.slow
def test_an_oracle_that_fetches_reaches_the_package_registries_and_nothing_else(exported_task):
    solve = exported_task / "solution" / "solve.sh"
    solve.write_text("#!/bin/bash\nset -e\n"
                     "test \"$(ls /sys/class/net)\" = lo\n"
                     "pip install --quiet --no-deps --target /tmp/site six==1.16.0\n"  # HTTPS, by CONNECT
                     "ls /tmp/site/six.py\n"
                     "grep -q 127.0.0.1:3128 /etc/apt/apt.conf.d/99clawloop-registry-proxy\n"
                     "curl -sf -o /dev/null http://deb.debian.org/debian/dists/bookworm/Release\n"  # plain HTTP
                     "if curl -sf -o /dev/null https://github.com/; then exit 9; fi\n"
                     "if python3 -c 'import socket; socket.create_connection((\"deb.debian.org\", 80), timeout=3)'; "
                     "then exit 9; fi\n"
                     + solve.read_text().split("\n", 1)[1])
    test_sh = exported_task / "tests" / "test.sh"
    first, rest = test_sh.read_text().split("\n", 1)
    test_sh.write_text(f"{first}\n{_PROXY_GONE_CHECK}test ! -e /etc/apt/apt.conf.d/99clawloop-registry-proxy || "
                       "{ echo 0 > /logs/verifier/reward.txt; exit 0; }\n" + rest)
    run = run_harbor_task(exported_task)
    assert run.oracle_exit == 0 and run.reward == 1.0, run.detail
    assert run.registries and run.refused_hosts == ("github.com",)
    assert any("through ClawLoop's registry proxy" in note and "solve.sh:4: `pip install" in note for note in run.adaptations)
    untouched = run_harbor_task(exported_task, oracle=False)
    assert not untouched.registries and untouched.reward == 0.0, untouched.detail


@pytest.mark.slow
def test_an_oracle_that_fetches_beyond_the_registries_is_refused_naming_the_host(exported_task):
    solve = exported_task / "solution" / "solve.sh"
    solve.write_text("#!/bin/bash\nset -e\ngit clone https://github.com/example/repo.git /tmp/repo || "
                     "curl -sf https://raw.githubusercontent.com/example/x -o /tmp/x\n")
    failure, solved, untouched = validate_the_harbor_way(exported_task)
    assert untouched is None and solved.refused_hosts
    assert failure.startswith(f"{solve}: fetches from ") and "which this machine's registry proxy does not reach" in failure
    assert "raw.githubusercontent.com" in failure


def test_the_benchmark_counts_the_tasks_validated_with_the_registries(tmp_path):
    from benchmarks.harbor_import import summarize
    from clawloop_assets.harbor.task_format import ImportResult

    results = [ImportResult("a", tmp_path / "a", False, None, ("validates only in its own image",), image="i/a:1",
                            registries=True),
               ImportResult("b", tmp_path / "b", False, None, ("validates only in its own image",), image="i/b:1"),
               ImportResult("c", tmp_path / "c", True, tmp_path / "dest" / "c"),
               ImportResult("d", tmp_path / "d", False, None, (f"{tmp_path}/d/task.toml: asks for a GPU",))]
    text = summarize(results, tmp_path, "docker")
    assert text.startswith("3 of 4 tasks import and validate on docker (75%)\n"), text
    assert "1 in our sandbox" in text and "2 only in their own image" in text
    assert "1 of them with the package registries for the oracle (and our agent)" in text
    assert "| 1 | task.toml: asks for a GPU |" in text
