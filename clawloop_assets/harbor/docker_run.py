"""A Harbor task run the Harbor way, on our Docker engine: its
environment/Dockerfile built into an image, a container of it started, the
oracle (solution/solve.sh) run in it, then tests/test.sh, and the reward read
from /logs/verifier (reward.txt or reward.json).

What differs from Harbor, each for a reason:

- The `FROM` image is mapped to one built here (no image registry is
  reachable): `python:*` to `clawloop/harbor-python:bookworm` (Debian
  bookworm's python3 with pip, venv and `python`; sandbox_images/
  harbor-python), `debian:*` and `ubuntu:*` to the Debian base that
  sandbox_images/harness/build.sh imports. Any other base image is not
  runnable here. A Python version other than Debian's is an adaptation.
- The build runs with the host's network (Debian's mirror and PyPI), as
  Harbor's does; nothing after it has a network. The host's own added CA
  certificates go into the mapped base, so the build's HTTPS trusts what
  the host trusts.
- apt packages test.sh installs are installed at build time instead (the
  tests run offline), and test.sh is adapted as the import adapts it
  (task_format._adapt_test_sh): uv's installer and apt lines become no-ops,
  uv/uvx resolve from the offline toolchain mounted read-only at
  /harbor-toolchain.

The containers are hardened as our Docker sandbox's: `--network none`,
every capability dropped but the few a task's root needs to install and
serve (TASK_CAPABILITIES), no-new-privileges, our seccomp profile (less
chroot and ptrace, which Docker's default allows: TASK_SYSCALLS), a memory
limit without swap from task.toml `memory`, `--cpus` from its `cpus`, a
process limit, no core files. Unlike the sandbox's, the root filesystem is
writable and the commands run as the image's user (root with only those
capabilities, unless the Dockerfile says USER): the task's WORKDIR is part
of the image, as in Harbor, and its files belong to the image's user.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import math
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from clawloop_assets.harbor.registry_proxy import (
    APT_PROXY_CONF,
    APT_PROXY_TEXT,
    PROXY_ENV,
    RegistryProxy,
    RegistryProxyError,
    registries_text,
)
from clawloop_assets.harbor.task_format import (
    _NETWORK_USE,
    HARBOR_MAX_PROCESSES,
    IMAGE_WHEELS,
    REWARD_DIR,
    HarborTaskError,
    _adapt_test_sh,
    _dockerfile_instructions,
    _read_task_toml,
    _task_id,
)
from clawloop_assets.harbor.toolchain import TOOLCHAIN_ENV, TOOLCHAIN_MOUNT, Toolchain, load_toolchain
from resources.environment import read_environment
from resources.sandbox import SandboxError, SandboxUnavailable, _docker_seccomp_file

# The Debian bookworm image sandbox_images/harness/build.sh imports, and the
# two built from it that stand in for Harbor's bases: Debian with the host's
# added CA certificates (and the variables that make pip, requests and curl
# use the system's CA bundle), and that plus Python's tools.
DEBIAN_IMPORTED = "clawloop/debian-bookworm:base"
DEBIAN_BASE = "clawloop/harbor-debian:bookworm"
PYTHON_BASE = "clawloop/harbor-python:bookworm"
BASE_LABEL = "clawloop.harbor.base"  # a digest of what an image was built from: rebuilt when it changes
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
IMAGE_REPOSITORY = "clawloop-harbor"
PYTHON_BASE_CONTEXT = Path(__file__).resolve().parents[2] / "sandbox_images" / "harbor-python"
HOST_EXTRA_CAS = Path("/usr/local/share/ca-certificates")
DEFAULT_BUILD_TIMEOUT_S = 600.0
OUTPUT_CAP = 1 << 20
# How long a container may take to start or to be removed.
CONTAINER_SECONDS = 60.0


class HarborRunError(HarborTaskError):
    """The task cannot be run the Harbor way here (its base image, its build,
    a test.sh line that needs the network); the message names the file."""


@dataclass(frozen=True)
class HarborRun:
    """One run: the oracle (or nothing, `oracle=False`), then the tests."""

    task: Path
    image: str
    oracle: bool
    reward: float | None  # None: test.sh left no valid reward (see detail)
    detail: str
    rewards: dict[str, float] = field(default_factory=dict)  # every named reward reward.json held
    oracle_exit: int | None = None  # None: no oracle run, or it timed out
    oracle_timed_out: bool = False
    test_exit: int | None = None  # None: test.sh timed out
    adaptations: tuple[str, ...] = ()
    seconds: float = 0.0
    registries: bool = False  # the oracle's run had the package registries (registry_proxy)
    refused_hosts: tuple[str, ...] = ()  # what it asked the proxy for and did not get


class TaskBudget:
    """A time cap on one task's whole Harbor-way validation (build, oracle,
    tests, both runs): each step's timeout is its own or what is left of
    the budget, whichever is less, and says which (`None`: no cap)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.end = None if seconds is None else time.monotonic() + seconds

    def cap(self, own: float, what: str) -> tuple[float, str]:
        """(the timeout of `what`, how to name it in a reason). Raises
        HarborRunError when the budget is spent before `what` starts."""
        if self.end is None:
            return own, f"{own:g} s"
        left = self.end - time.monotonic()
        if left < 1.0:
            raise HarborRunError(f"not judged: the per-task time budget of {self.seconds:g} s ran out before {what}")
        if left < own:
            return left, f"{left:.0f} s (what was left of the per-task budget of {self.seconds:g} s)"
        return own, f"{own:g} s"


def cpu_shares_setting() -> int | None:
    """The CPU weight (docker --cpu-shares) of the builds and containers, for
    a machine shared with other work (resources.environment: CLAWLOOP_DOCKER_CPU_SHARES)."""
    return read_environment().docker_cpu_shares


def _docker() -> str:
    path = shutil.which("docker")
    if path is None:
        raise SandboxUnavailable("the Docker client is not installed: run `make docker-backend`")
    return path


def _image_id(image: str) -> str | None:
    probe = subprocess.run([_docker(), "image", "inspect", "--format", "{{.Id}}", image],
                           capture_output=True, text=True, timeout=CONTAINER_SECONDS)
    return probe.stdout.strip() if probe.returncode == 0 else None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A build log's line saying a fetch found no route to its host.
_UNREACHABLE = re.compile(r"Could not resolve host|Name or service not known|Temporary failure in name resolution|"
                          r"Could not resolve '|Failed to establish a new connection|Network is unreachable|"
                          r"unable to resolve host address|Could not connect to|No address associated with hostname")


def _build(context: Path, tag: str, timeout_s: float, cpu_shares: int | None, what: str,
           timeout_text: str | None = None, build_args: dict[str, str] | None = None) -> None:
    """`docker build` of `context` with the host's network (the classic
    builder: no BuildKit daemon is set up here). A build that fails or runs
    past `timeout_s` raises HarborRunError with the log's last lines, and
    the layers it made are removed (a successful build's stay as the
    image's parents, removed with it)."""
    args = [_docker(), "build", "--network", "host", "--force-rm", "-t", tag,
            *(["--cpu-shares", str(cpu_shares)] if cpu_shares else []),
            *[f"--build-arg={name}={value}" for name, value in (build_args or {}).items()], str(context)]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "DOCKER_BUILDKIT": "0"})
    except subprocess.TimeoutExpired as exc:
        _remove_layers(_ANSI.sub("", _text(exc.stdout)))
        raise HarborRunError(f"{what}: the image build did not finish within {timeout_text or f'{timeout_s:g} s'}") from None
    log = _ANSI.sub("", done.stdout + done.stderr)
    if done.returncode == 0:
        if len(re.findall(r"^Step \S+ : FROM ", log, re.M | re.I)) > 1:
            # A multi-stage build leaves its earlier stages' images untagged.
            built = re.search(r"^Successfully built ([0-9a-f]+)", log, re.M)
            _remove_layers(log, keep=built.group(1) if built else None)
        return
    if done.returncode != 0:
        _remove_layers(log)
        unreachable = next((line.strip() for line in log.splitlines() if _UNREACHABLE.search(line)), None)
        if unreachable:
            # Whatever failed last, a fetch that could not reach its host came first.
            raise HarborRunError(f"{what}: the image build failed: it fetches from a host this machine cannot reach "
                                 f"(builds here reach Debian's mirror and PyPI): {unreachable[:300]}")
        raise HarborRunError(f"{what}: the image build failed: {_failed_step(log)}")


# The classic builder's own lines, not a step's output.
_BUILDER_CHATTER = re.compile(r"^( ---> |Removing intermediate container |Sending build context|DEPRECATED: The legacy "
                              r"builder|\s+BuildKit is currently disabled|\s+environment-variable\.|\s*$)")


def _failed_step(log: str) -> str:
    """The failed step of a build log, its last output lines and the
    builder's verdict (`The command ... returned a non-zero code: N`)."""
    lines = log.splitlines()
    start = max((i for i, line in enumerate(lines) if line.startswith("Step ")), default=0)
    step = lines[start].strip() if lines and lines[start].startswith("Step ") else ""
    verdict = [line.strip() for line in lines[start:] if line.startswith(("The command ", "COPY failed", "ADD failed",
                                                                          "failed to ", "error ", "Error "))]
    output = [line.strip() for line in lines[start + 1:] if not _BUILDER_CHATTER.match(line) and
              line.strip() not in verdict]
    text = "; ".join(part for part in [step[:200], " | ".join(output[-4:])[-700:], " ".join(verdict)[-300:]] if part)
    return text or "no build output"


def _text(output) -> str:
    return output.decode("utf-8", "replace") if isinstance(output, bytes) else output or ""


def _remove_layers(log: str, keep: str | None = None) -> None:
    """Remove the intermediate images a build made, newest first: the
    classic builder's log names each (` ---> <id>`) after a step; a FROM's
    image, one taken from the cache (` ---> Using cache`) and `keep` (the
    image built) stay. One still in use (the built image's own layers,
    or one another build took from the cache since) is left: `docker image
    rm` refuses an image with children, and is never forced here."""
    made, step, previous = [], "", ""
    for line in log.splitlines():
        if line.startswith("Step "):
            step = line
        match = re.fullmatch(r" ---> ([0-9a-f]{12,64})", line.rstrip())
        if (match and previous.strip() != "---> Using cache" and not re.match(r"Step \S+ : FROM ", step, re.I)
                and not (keep and keep.startswith(match.group(1)[:12]))):
            made.append(match.group(1))
        previous = line
    for image in reversed(made):
        subprocess.run([_docker(), "image", "rm", image], capture_output=True, timeout=CONTAINER_SECONDS)


def _label(image: str) -> str | None:
    probe = subprocess.run([_docker(), "image", "inspect", "--format", f'{{{{index .Config.Labels "{BASE_LABEL}"}}}}',
                            image], capture_output=True, text=True, timeout=CONTAINER_SECONDS)
    return probe.stdout.strip() if probe.returncode == 0 else None


_BASE_LOCK = threading.Lock()  # tasks imported at once build the bases once
_RELEASE_LOCKS: dict[str, threading.Lock] = {}


def ensure_base_images(cpu_shares: int | None = None, releases: list[str] = (),
                       budget: TaskBudget | None = None) -> None:
    """The local stand-ins for Harbor's base images, built when missing or
    when what they are built from (the imported Debian image, the host's
    added CA certificates, sandbox_images/harbor-python) changed; and each
    of `releases` (`clawloop/harbor-<distribution>:<suite>`) bootstrapped
    from its archive when missing."""
    with _BASE_LOCK:
        _ensure_base_images(cpu_shares)
        locks = [_RELEASE_LOCKS.setdefault(release, threading.Lock()) for release in releases]
    # One lock per release: a task never waits on the bootstrap of a release it does not use.
    for release, lock in zip(releases, locks):
        with lock:
            if _image_id(release) is None:
                _bootstrap_release(release, cpu_shares, budget or TaskBudget(None))


def _build_generated(dockerfile: str, cas: list[Path], tag: str, timeout_s: float, cpu_shares: int | None, what: str,
                     timeout_text: str | None = None, build_args: dict[str, str] | None = None) -> None:
    """`_build` of `dockerfile` (its text) in a throwaway context that holds
    only it and the host's extra CA certificates `cas`, under ca/."""
    with tempfile.TemporaryDirectory(prefix="clawloop-harbor-base-") as tmp:
        context = Path(tmp)
        if cas:
            (context / "ca").mkdir()
            for ca in cas:
                shutil.copyfile(ca, context / "ca" / ca.name)
        (context / "Dockerfile").write_text(dockerfile, encoding="utf-8")
        _build(context, tag, timeout_s, cpu_shares, what, timeout_text, build_args)


def _bootstrap_release(tag: str, cpu_shares: int | None, budget: TaskBudget) -> None:
    """A distribution release as a base image, as its official image is
    made: debootstrap (minbase) from its archive, run from our Debian base,
    each Release file checked against the distribution's keyring; then its
    usual apt sources (with updates and security), ca-certificates with the
    host's added CAs, and the CA variables of DEBIAN_BASE."""
    distribution, suite = re.fullmatch(r"clawloop/harbor-(ubuntu|debian):([a-z]+)", tag).groups()
    mirror, components, security = _ARCHIVES[distribution]
    cas = sorted(HOST_EXTRA_CAS.glob("*.crt")) if HOST_EXTRA_CAS.is_dir() else []
    if distribution == "ubuntu":
        keyring = "/tmp/keyring/usr/share/keyrings/ubuntu-archive-keyring.gpg"
        fetch_keyring = (
            f"python3 -c \"import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], '/tmp/keyring.deb')\" "
            f"{mirror}/{UBUNTU_KEYRING[0]} && echo '{UBUNTU_KEYRING[1]}  /tmp/keyring.deb' | sha256sum -c - "
            "&& dpkg -x /tmp/keyring.deb /tmp/keyring && ")
        script = "/usr/share/debootstrap/scripts/gutsy"  # the one script every Ubuntu release links to
    else:
        keyring, fetch_keyring, script = "/usr/share/keyrings/debian-archive-keyring.gpg", "", "/usr/share/debootstrap/scripts/sid"
    security_suite = f"{suite}-security" if distribution == "ubuntu" or suite != "bullseye" else "bullseye-security"
    sources = (f"deb {mirror} {suite} {components}\\ndeb {mirror} {suite}-updates {components}\\n"
               f"deb {security} {security_suite} {components}\\n")
    dockerfile = "\n".join([
        f"FROM {DEBIAN_BASE} AS boot",
        "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap "
        "debian-archive-keyring && " + fetch_keyring +
        f"debootstrap --foreign --variant=minbase --keyring={keyring} {suite} /rootfs {mirror} {script}",
        "FROM scratch",
        "COPY --from=boot /rootfs/ /",
        "RUN /debootstrap/debootstrap --second-stage && rm -rf /var/cache/apt/archives/*.deb",
        f"RUN printf '{sources}' > /etc/apt/sources.list",
        *(["COPY ca/ /usr/local/share/ca-certificates/"] if cas else []),
        "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates "
        "&& update-ca-certificates >/dev/null && rm -rf /var/lib/apt/lists/*",
        f"ENV PIP_CERT={CA_BUNDLE} REQUESTS_CA_BUNDLE={CA_BUNDLE} SSL_CERT_FILE={CA_BUNDLE} CURL_CA_BUNDLE={CA_BUNDLE}",
        'CMD ["bash"]',
    ]) + "\n"
    timeout, timeout_text = budget.cap(DEFAULT_BUILD_TIMEOUT_S, f"the base image {tag}")
    _build_generated(dockerfile, cas, tag, timeout, cpu_shares, f"the base image {tag} (bootstrapped from {mirror})",
                     timeout_text)


def _ensure_base_images(cpu_shares: int | None) -> None:
    imported = _image_id(DEBIAN_IMPORTED)
    if imported is None:
        raise SandboxUnavailable(f"the Debian base image {DEBIAN_IMPORTED} is missing: run `make docker-backend`")
    cas = sorted(HOST_EXTRA_CAS.glob("*.crt")) if HOST_EXTRA_CAS.is_dir() else []
    # Builds reach PyPI and the mirror through whatever the host trusts;
    # pip and requests read their own CA bundles unless told the system's.
    debian = "\n".join([
        f"FROM {DEBIAN_IMPORTED}",
        *(["COPY ca/ /usr/local/share/ca-certificates/", "RUN update-ca-certificates >/dev/null"] if cas else []),
        f"ENV PIP_CERT={CA_BUNDLE} REQUESTS_CA_BUNDLE={CA_BUNDLE} SSL_CERT_FILE={CA_BUNDLE} CURL_CA_BUNDLE={CA_BUNDLE}",
    ]) + "\n"
    digest = hashlib.sha256(imported.encode() + debian.encode() + b"".join(ca.read_bytes() for ca in cas)).hexdigest()[:16]
    if _label(DEBIAN_BASE) != digest:
        _build_generated(debian + f'LABEL {BASE_LABEL}="{digest}"\n', cas, DEBIAN_BASE, DEFAULT_BUILD_TIMEOUT_S,
                         cpu_shares, f"the base image {DEBIAN_BASE}")
    python = (PYTHON_BASE_CONTEXT / "Dockerfile").read_text(encoding="utf-8")
    digest = hashlib.sha256((_image_id(DEBIAN_BASE) or "").encode() + python.encode()).hexdigest()[:16]
    if _label(PYTHON_BASE) != digest:
        _build_generated(python + f'LABEL {BASE_LABEL}="{digest}"\n', [], PYTHON_BASE, DEFAULT_BUILD_TIMEOUT_S,
                         cpu_shares, str(PYTHON_BASE_CONTEXT / "Dockerfile"), build_args={"BASE": DEBIAN_BASE})


_PYTHON_IMAGE = re.compile(r"(^|/)python:(\d+\.\d+)?")
_DEBIAN_IMAGE = re.compile(r"(^|/)(debian|ubuntu|buildpack-deps)(:|$)")


# Releases bootstrapped here from their own archives (debootstrap, each
# Release file checked against the distribution's keyring): the image's tag
# -> (distribution, suite). Debian bookworm is the imported base itself.
_RELEASES = {
    "ubuntu": {"24.04": "noble", "noble": "noble", "latest": "noble", "": "noble", "22.04": "jammy",
               "jammy": "jammy", "20.04": "focal", "focal": "focal"},
    "debian": {"11": "bullseye", "bullseye": "bullseye", "13": "trixie", "trixie": "trixie"},
}
_ARCHIVES = {
    "ubuntu": ("http://archive.ubuntu.com/ubuntu", "main restricted universe multiverse",
               "http://security.ubuntu.com/ubuntu"),
    "debian": ("http://deb.debian.org/debian", "main", "http://deb.debian.org/debian-security"),
}
# Ubuntu's archive keyring (Debian bookworm has no package of it), from
# Ubuntu's archive, checked against this digest (noble's Packages index).
UBUNTU_KEYRING = ("pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1_all.deb",
                  "36de43b15853ccae0028e9a767613770c704833f82586f28eb262f0311adb8a8")


def release_base(distribution: str, suite: str) -> str:
    return f"clawloop/harbor-{distribution}:{suite}"


def map_base_image(image: str, where: str) -> tuple[str, str | None]:
    """(the local image standing in for `image`, the adaptation or None)."""
    name = image.lower()
    python = _PYTHON_IMAGE.search(name)
    if python:
        version = python.group(2)
        note = None if version == "3.11" else f"Python {version or '(unpinned)'} asked for, Debian bookworm's 3.11 used"
        return PYTHON_BASE, f"{where}: FROM {image} built from {PYTHON_BASE}" + (f" ({note})" if note else "")
    release = re.search(r"(?:^|/)(ubuntu|debian):?([a-z]+|\d+(?:\.\d+)?)?", name)
    if release:
        distribution, tag = release.group(1), release.group(2) or ""
        tag = tag if distribution == "ubuntu" else tag.split(".")[0]
        suite = _RELEASES[distribution].get(tag)
        if suite:
            local = release_base(distribution, suite)
            return local, f"{where}: FROM {image} built from {local} ({distribution} {suite}, bootstrapped here)"
    if _DEBIAN_IMAGE.search(name):
        return DEBIAN_BASE, f"{where}: FROM {image} built from {DEBIAN_BASE} (Debian bookworm)"
    raise HarborRunError(f"{where}: base image {image!r} has no local stand-in here "
                         f"(only python:*, debian:* and ubuntu:* map to our Debian bases)")


def task_dockerfile(dockerfile: Path, apt_packages: list[str], interpreter: bool = False) -> tuple[str, list[str]]:
    """The task's Dockerfile as built here: each FROM mapped (map_base_image;
    a FROM naming an earlier stage is kept), and test.sh's apt packages
    installed at the end, as root, then the Dockerfile's last USER again."""
    lines = dockerfile.read_text(encoding="utf-8").splitlines()
    stages, adaptations, user = set(), [], None
    for number, keyword, args, _heredocs in _dockerfile_instructions(dockerfile):
        if keyword == "USER":
            user = args.strip()
        if keyword != "FROM":
            continue
        where = f"{dockerfile}:{number}"
        words = [w for w in args.split() if not w.startswith("--")]
        if not words:
            raise HarborRunError(f"{where}: FROM names no image")
        image = words[0]
        alias = words[2] if len(words) >= 3 and words[1].lower() == "as" else None
        if image in stages:
            local = image
        else:
            local, note = map_base_image(image, where)
            adaptations.append(note)
        if alias:
            stages.add(alias)
        lines[number - 1] = f"FROM {local}" + (f" AS {alias}" if alias else "")
    installs = sorted(set(apt_packages) | ({"python3"} if interpreter else set()))
    if installs:
        lines += ["USER root",
                  "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
                  f"{' '.join(installs)} && rm -rf /var/lib/apt/lists/*"]
        if user:
            lines.append(f"USER {user}")
    if apt_packages:
        adaptations.append(f"apt packages tests/test.sh installs ({', '.join(apt_packages)}) installed at build time: "
                           "the tests run offline")
    if interpreter:
        adaptations.append("python3 installed at build time for tests/test.sh's uv: Harbor's uv downloads its own "
                           "interpreter, which the tests cannot offline (a no-op where the image has python3)")
    return "\n".join(lines) + "\n", adaptations


def build_task_image(task_dir: Path, apt_packages: list[str] = (), cpu_shares: int | None = None,
                     budget: TaskBudget | None = None, interpreter: bool = False) -> tuple[str, list[str]]:
    """Build `task_dir`'s environment/ into an image (reused when its
    context, its mapped Dockerfile and the base images are unchanged).
    Returns the tag and the adaptations. A task keeps one image: once a
    build succeeds, the task's images under other tags are removed."""
    task_dir = Path(task_dir)
    context, dockerfile = task_dir / "environment", task_dir / "environment" / "Dockerfile"
    if not dockerfile.is_file():
        raise HarborRunError(f"{dockerfile}: missing; a Harbor run builds the task's image from it")
    text, adaptations = task_dockerfile(dockerfile, sorted(apt_packages), interpreter)
    releases = sorted({m.group(0) for m in re.finditer(r"clawloop/harbor-(?:ubuntu|debian):[a-z]+", text)}
                      - {DEBIAN_BASE})
    ensure_base_images(cpu_shares, releases, budget)
    digest = hashlib.sha256(text.encode())
    for base in (DEBIAN_BASE, PYTHON_BASE, *releases):
        digest.update((_image_id(base) or "").encode())
    for path in sorted(p for p in context.rglob("*") if p.is_file() and not p.is_symlink()):
        mode = checkout_mode(path.lstat().st_mode, False)
        digest.update(str(path.relative_to(context)).encode() + f"\0{mode:o}\0".encode() + path.read_bytes())
    tag = f"{IMAGE_REPOSITORY}/{_task_id(task_dir.name).lower()}:{digest.hexdigest()[:16]}"
    if _image_id(tag) is None:
        timeout = float(tomllib_get(task_dir / "task.toml", "environment", "build_timeout_sec", DEFAULT_BUILD_TIMEOUT_S))
        timeout, timeout_text = (budget or TaskBudget(None)).cap(timeout, "the image build")
        with tempfile.TemporaryDirectory(prefix="clawloop-harbor-build-") as tmp:
            build = Path(tmp) / "context"
            shutil.copytree(context, build, symlinks=True)
            with_checkout_modes(build)
            (build / "Dockerfile").write_text(text, encoding="utf-8")
            try:
                _build(build, tag, timeout, cpu_shares, str(dockerfile), timeout_text)
            except HarborRunError as exc:
                # Built on our stand-ins, not the task's own bases: the reason says so.
                bases = "; ".join(note.split(": ", 1)[1] for note in adaptations if ": FROM " in note)
                raise HarborRunError(f"{exc} [{bases}]" if bases else str(exc)) from None
        for older in task_images(tag.split(":")[0]):
            if older != tag:
                remove_task_image(older)
    return tag, adaptations


def checkout_mode(mode: int, is_dir: bool) -> int:
    """The mode a git checkout gives a task's file: git records only the
    executable bit, so 0755 for a directory or an executable, else 0644.
    A task's own modes may be a copy's (a read-only mirror's 0444), and a
    COPY keeps them: a file the oracle must rewrite would then be read-only
    in the image (Harbor's task authors expect a checkout's modes)."""
    return 0o755 if is_dir or mode & 0o111 else 0o644


def with_checkout_modes(root: Path) -> None:
    """Give every file and directory under `root` (a copy of ours) its
    checkout mode (`checkout_mode`); links are left as they are."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            info = path.lstat()
            if not stat.S_ISLNK(info.st_mode):
                os.chmod(path, checkout_mode(info.st_mode, stat.S_ISDIR(info.st_mode)))
    os.chmod(root, 0o755)


def task_images(repository: str = IMAGE_REPOSITORY) -> list[str]:
    """The tags of the built task images: all of them (`clawloop-harbor/*`)
    or one task's (`clawloop-harbor/<task>`)."""
    pattern = f"{repository}/*" if repository == IMAGE_REPOSITORY else repository
    done = subprocess.run([_docker(), "image", "ls", "--filter", f"reference={pattern}", "--format",
                           "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True, timeout=CONTAINER_SECONDS)
    if done.returncode != 0:
        raise SandboxError(f"listing the images {pattern} failed: {done.stderr.strip()[-300:]}")
    return sorted(line for line in done.stdout.split() if line.startswith(IMAGE_REPOSITORY + "/"))


# How long removing an image may take: a large one, on an engine busy with builds, takes minutes.
IMAGE_REMOVAL_SECONDS = 600.0


def remove_task_image(tag: str) -> bool:
    """Remove a built task image (never another repository's). False when
    the engine did not answer in time (it goes on removing it): cleanup,
    never a reason to stop what called it."""
    if not tag.startswith(IMAGE_REPOSITORY + "/"):
        raise ValueError(f"{tag!r} is not a task image ({IMAGE_REPOSITORY}/...)")
    try:
        subprocess.run([_docker(), "image", "rm", "--force", tag], capture_output=True, timeout=IMAGE_REMOVAL_SECONDS)
    except subprocess.TimeoutExpired:
        return False
    return True


def tomllib_get(path: Path, table: str, key: str, default):
    import tomllib

    value = tomllib.loads(path.read_text(encoding="utf-8")).get(table, {}).get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise HarborTaskError(f"{path}: [{table}] {key} must be a positive number, got {value!r}")
    return value


def read_reward(directory: Path) -> tuple[float | None, str, dict[str, float]]:
    """The reward test.sh left in `directory` (the host side of
    /logs/verifier), read by Harbor's rules as the bundle wrapper reads it:
    reward.json's "reward", else reward.txt, else reward.json's only number.
    (None, why, {}) when there is none or it is not a number in [0, 1].
    Files are opened without following links: the container wrote them."""

    def plain(name: str) -> str | None:
        path = directory / name
        if not os.path.lexists(path):
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            raise ValueError(f"{name} cannot be read as a plain file ({exc.strerror})") from None
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ValueError(f"{name} is not a regular file")
            return f.read(1 << 16).decode("utf-8", "replace")

    def number(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    try:
        text, data = plain("reward.txt"), plain("reward.json")
        named: dict[str, float] = {}
        if data is not None:
            try:
                parsed = json.loads(data)
            except ValueError:
                return None, f"reward.json is not JSON: {data[:60]!r}", {}
            if not isinstance(parsed, dict):
                return None, f"reward.json is not an object of named rewards: {data[:60]!r}", {}
            named = {str(k): float(v) for k, v in parsed.items() if number(v)}
            if "reward" in named:
                value, source = named["reward"], "reward.json"
            elif text is not None:
                value, source = float(text.strip()), "reward.txt"
            elif len(named) == 1:
                (key, value), = named.items()
                source = f"reward.json {key!r}"
            else:
                return None, f"reward.json holds no 'reward' and {len(named)} other numbers", named
        elif text is not None:
            value, source = float(text.strip()), "reward.txt"
        else:
            return None, f"no {REWARD_DIR}/reward.txt or reward.json", {}
    except ValueError as exc:
        return None, f"the reward is not a number: {exc}", {}
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        return None, f"{source} holds {value!r}, not a number in [0, 1]", named
    return value, f"{source} says {value:g}", named


def _exec(container: str, argv: list[str], timeout_s: float, env: dict[str, str] | None = None,
          workdir: str | None = None, user: str | None = None) -> tuple[int | None, str]:
    """Run `argv` in the container; (exit code or None when it ran past
    `timeout_s`, its output capped). Past the timeout, every process in the
    container but its pid 1 is killed, as Harbor ends an agent's time."""
    args = [_docker(), "exec", *(["-w", workdir] if workdir else []), *(["-u", user] if user else [])]
    for name, value in (env or {}).items():
        args += ["-e", f"{name}={value}"]
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([*args, container, *argv], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            subprocess.run([_docker(), "exec", container, "kill", "-9", "-1"], capture_output=True,
                           timeout=CONTAINER_SECONDS)
            proc.kill()
            proc.wait()
            code = None
        size = out.seek(0, os.SEEK_END)
        out.seek(max(0, size - OUTPUT_CAP))
        return code, out.read().decode("utf-8", "replace")


def _image_path(image: str) -> str:
    done = subprocess.run([_docker(), "image", "inspect", "--format", "{{json .Config.Env}}", image],
                          capture_output=True, text=True, timeout=CONTAINER_SECONDS)
    env = json.loads(done.stdout or "null") or []
    return next((e.split("=", 1)[1] for e in env if e.startswith("PATH=")), "/usr/local/bin:/usr/bin:/bin")


def toolchain_mounts(toolchain: Toolchain | None, wheels: Path, test_path: Path) -> list[str]:
    """The `-v` mounts of the offline toolchain for a test.sh that runs uv:
    the toolchain read-only, and `wheels` (made here, filled with the
    wheelhouse; wheels fetched for the tests are added to it later, which
    the mount shows) read-only at IMAGE_WHEELS."""
    if toolchain is None:
        raise HarborRunError(f"{test_path}: uses uv, and the offline toolchain is not built: run `make setup`")
    wheels.mkdir(exist_ok=True)
    for wheel in (toolchain.root / "wheels").iterdir():
        shutil.copyfile(wheel, wheels / wheel.name)
    os.chmod(wheels, 0o755)
    return [f"{toolchain.root}:{TOOLCHAIN_MOUNT}:ro", f"{wheels}:{IMAGE_WHEELS}:ro"]


# What a task's root needs to install, serve and test as Harbor's tasks
# expect (apt's download user, dpkg's file owners, useradd, a server
# dropping to its user, tests that run a program under chroot): a part of
# Docker's default set, which Harbor's containers have. Not the rest (raw
# sockets, device nodes, file capabilities), and no-new-privileges holds:
# no setuid program gains anything. Of the calls our seccomp filter
# denies, Docker's default profile allows chroot and ptrace (a program's
# anti-debugging check, a debugger on the task's own program), and so do
# these containers: neither reaches beyond the container's pid namespace,
# and no agent process outlives its command to trace the tests.
TASK_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "NET_BIND_SERVICE",
                     "SYS_CHROOT")
TASK_SYSCALLS = frozenset({"chroot", "ptrace"})


def start_task_container(name: str, image: str, memory_bytes: int, cpus: float, cpu_shares: int | None,
                         mounts: list[str]) -> None:
    """Start a container of a task image, idle (`sleep infinity` as pid 1)
    for `docker exec`, hardened: no network, every capability dropped but
    TASK_CAPABILITIES, no-new-privileges, our seccomp profile less
    TASK_SYSCALLS, task.toml's memory (no swap) and cpus (at most this
    machine's cores: Docker refuses more, and a task asking more only runs
    slower here; `cpu_adaptation` says so), a process limit, no core files; `mounts` are `-v` specs. An engine that cannot
    start it raises SandboxError."""
    cpus = min(cpus, float(os.cpu_count() or 1))
    args = [_docker(), "run", "-d", "--name", name, "--network", "none", "--hostname", "harbor",
            "--cap-drop", "ALL", *[part for cap in TASK_CAPABILITIES for part in ("--cap-add", cap)],
            "--security-opt", "no-new-privileges", "--security-opt", f"seccomp={_docker_seccomp_file(TASK_SYSCALLS)}",
            "--memory", str(memory_bytes), "--memory-swap", str(memory_bytes), "--cpus", f"{cpus:g}",
            "--pids-limit", str(HARBOR_MAX_PROCESSES), "--ulimit", "core=0:0",
            *(["--cpu-shares", str(cpu_shares)] if cpu_shares else []),
            *[part for mount in mounts for part in ("-v", mount)]]
    try:
        started = subprocess.run([*args, "--entrypoint", "sleep", image, "infinity"], capture_output=True, text=True,
                                 timeout=CONTAINER_SECONDS)
    except subprocess.TimeoutExpired:
        subprocess.run([_docker(), "rm", "-f", name], capture_output=True, timeout=CONTAINER_SECONDS)
        raise SandboxError(f"the container of {image} did not start within {CONTAINER_SECONDS:g} s") from None
    if started.returncode != 0:
        raise SandboxError(f"the container of {image} did not start: {started.stderr.strip()[-500:]}")


def cpu_adaptation(task_toml: Path, cpus: float) -> list[str]:
    """The note when task.toml asks more cpus than this machine has (start_task_container caps them)."""
    cores = os.cpu_count() or 1
    return ([f"{task_toml}: [environment] cpus = {cpus:g}, more than this machine's {cores} cores: the container gets "
             f"{cores}"] if cpus > cores else [])


def run_harbor_task(task_dir: Path, *, oracle: bool = True, cpu_shares: int | None = None,
                    toolchain: Toolchain | None = None, oracle_timeout_s: float | None = None,
                    budget: TaskBudget | None = None) -> HarborRun:
    """Build the task's image, start a container of it, run the oracle
    (unless `oracle` is False: the untouched environment), then tests/test.sh,
    and read the reward. A task that cannot be built or run here raises
    HarborRunError; an engine that fails raises SandboxError. `budget` caps
    the build, the oracle and the tests together."""
    started = time.monotonic()
    task_dir = Path(task_dir)
    cpu_shares = cpu_shares if cpu_shares is not None else cpu_shares_setting()
    config = _read_task_toml(task_dir / "task.toml")
    if config["reasons"]:
        raise HarborRunError("; ".join(config["reasons"]))
    test_path = task_dir / "tests" / "test.sh"
    if not test_path.is_file():
        raise HarborRunError(f"{test_path}: missing; it is the verifier")
    solve = task_dir / "solution" / "solve.sh"
    if oracle and not solve.is_file():
        raise HarborRunError(f"{solve}: missing; there is no oracle to run")
    toolchain = toolchain or load_toolchain()
    test_sh = test_path.read_text(encoding="utf-8")
    first = _adapt_test_sh(test_sh, test_path, toolchain, None, in_image=True)
    budget = budget or TaskBudget(None)
    image, adaptations = build_task_image(task_dir, sorted(first.apt), cpu_shares, budget,
                                          interpreter=first.uses_uv)
    adaptations += cpu_adaptation(task_dir / "task.toml", config["cpus"])
    name = f"clawloop-harbor-{uuid.uuid4().hex[:12]}"
    memory = int(config["memory_bytes"])
    with tempfile.TemporaryDirectory(prefix="clawloop-harbor-run-") as tmp:
        logs = Path(tmp) / "verifier"
        logs.mkdir()
        os.chmod(tmp, 0o755)
        os.chmod(logs, 0o777)  # the image's user writes the reward; made fresh for this run
        mounts = [f"{logs}:{REWARD_DIR}:rw"]
        wheels = Path(tmp) / "wheels"
        wheels.mkdir()
        if first.uses_toolchain:
            mounts += toolchain_mounts(toolchain, wheels, test_path)
        # An oracle that fetches gets the package registries, and nothing
        # else, for its run only (registry_proxy); the tests stay offline.
        fetch = network_line(solve) if oracle else None
        proxy = None
        if fetch:
            try:
                proxy = RegistryProxy()
            except RegistryProxyError as exc:
                raise SandboxError(f"the registry proxy for {solve} could not be set up: {exc}") from exc
            mounts.append(proxy.mount)
            adaptations.append(f"{fetch}: the oracle's run reached the package registries ({registries_text()}) "
                               "through ClawLoop's registry proxy, nothing else; the tests ran offline")
        refused: list[str] = []
        try:
            start_task_container(name, image, memory, config["cpus"], cpu_shares, mounts)
            oracle_exit, timed_out = None, False
            if oracle:
                with tempfile.TemporaryDirectory(prefix="clawloop-harbor-solution-") as solution_tmp:
                    solution = Path(solution_tmp) / "solution"
                    shutil.copytree(task_dir / "solution", solution, symlinks=True)
                    with_checkout_modes(solution)
                    _copy_in(name, solution, "/solution")
                timeout, timeout_text = budget.cap(oracle_timeout_s or config["agent_timeout_s"], "the oracle")
                if proxy is not None:
                    oracle_exit, output = _with_registries(name, proxy, ["bash", "/solution/solve.sh"], timeout)
                    refused = proxy.refused
                    proxy.close()
                    proxy = None
                else:
                    oracle_exit, output = _exec(name, ["bash", "/solution/solve.sh"], timeout)
                timed_out = oracle_exit is None
            probe, version = _exec(name, ["python3", "-c", "import platform; print(platform.python_version())"], 30.0)
            python = version.strip().splitlines()[-1] if probe == 0 and version.strip() else None
            script = _adapt_test_sh(test_sh, test_path, toolchain, python, in_image=True)
            if script.reasons:
                raise HarborRunError("; ".join(script.reasons))
            if script.fetch:
                script.adaptations.append(fetch_wheels(script.fetch, python, wheels, budget))
            with tempfile.TemporaryDirectory(prefix="clawloop-harbor-tests-") as tests_tmp:
                tests = Path(tests_tmp) / "tests"
                shutil.copytree(task_dir / "tests", tests, symlinks=True)
                with_checkout_modes(tests)
                (tests / "test.sh").write_text(script.text, encoding="utf-8")
                _copy_in(name, tests, "/tests")
            env = dict(config["verifier_env"])
            if script.uses_toolchain:
                env.update(TOOLCHAIN_ENV, UV_FIND_LINKS=IMAGE_WHEELS, PATH=f"{TOOLCHAIN_MOUNT}/bin:{_image_path(image)}")
            test_timeout, test_timeout_text = budget.cap(config["verifier_timeout_s"], "tests/test.sh")
            test_exit, test_output = _exec(name, ["bash", "/tests/test.sh"], test_timeout, env)
            reward, detail, named = read_reward(logs)
            last = (test_output.strip().splitlines() or ["no output"])[-1][:200]
            if test_exit is None:
                reward, detail = None, f"tests/test.sh did not finish within {test_timeout_text}"
            detail += f"; test.sh exited with {test_exit} (last output: {last})"
            if timed_out:
                detail = f"the oracle did not finish within {timeout_text}; " + detail
            elif oracle and oracle_exit != 0:
                detail = f"the oracle exited with {oracle_exit} (last output: {output.strip()[-200:]}); " + detail
        finally:
            if proxy is not None:
                proxy.close()
            subprocess.run([_docker(), "rm", "-f", name], capture_output=True, timeout=CONTAINER_SECONDS)
    return HarborRun(task_dir, image, oracle, reward, detail, named, oracle_exit, timed_out, test_exit,
                     tuple(adaptations + script.adaptations), time.monotonic() - started,
                     registries=bool(fetch), refused_hosts=tuple(refused))


def point_apt_at_registries(name: str, on: bool) -> None:
    """Write (or remove) the container's apt file that points apt at the
    registry proxy, as root: sudo drops the proxy variables."""
    script = '[ -d /etc/apt/apt.conf.d ] && printf %s "$1" > "$2" || true' if on else 'rm -f "$2"'
    _exec(name, ["sh", "-c", script, "sh", APT_PROXY_TEXT, APT_PROXY_CONF], CONTAINER_SECONDS, user="0")


def _with_registries(name: str, proxy: RegistryProxy, argv: list[str], timeout_s: float) -> tuple[int | None, str]:
    """`argv` run in the container with the registry proxy's relay up and
    curl, pip, uv, npm and apt pointed at it."""
    code, said = _exec(name, proxy.relay_argv, CONTAINER_SECONDS)
    pid = said.strip()
    if code != 0 or not pid.isdigit():
        raise SandboxError(f"the registry relay did not start in the container: {said.strip()[-300:]}")
    point_apt_at_registries(name, True)
    try:
        return _exec(name, argv, timeout_s, PROXY_ENV)
    finally:
        _exec(name, ["sh", "-c", f"kill {pid} 2>/dev/null; true"], CONTAINER_SECONDS, user="0")
        point_apt_at_registries(name, False)


# Wheels a Linux x86-64 image can install: pip's manylinux tags from the
# oldest glibc of our stand-in bases (2.31: Debian bullseye, Ubuntu focal) down.
_WHEEL_PLATFORMS = ("manylinux_2_31_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
                    "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64")
WHEEL_FETCH_SECONDS = 600.0
_FETCHED: dict[tuple, Path] = {}
_FETCH_LOCK = threading.Lock()


def fetch_wheels(requirements: dict[str, str], python: str | None, dest: Path, budget: TaskBudget) -> str:
    """Download, on the host, the wheels (with their dependencies) of the
    test.sh requirements the offline wheelhouse lacks, for the image's
    Python, into `dest` (the tests' wheelhouse): as Harbor's uvx fetches
    them at test time, but before the tests, which stay offline. Wheels
    only (`--only-binary=:all:`): nothing is built or run. Reused within
    this process for the same requirements and Python. Returns the
    adaptation; a requirement with no such wheel raises HarborRunError."""
    where = "; ".join(sorted(set(requirements.values())))
    if not python:
        raise HarborRunError(f"{where}: needs {', '.join(requirements)}, and the task's image has no python3 to "
                             "fetch their wheels for")
    version = ".".join(python.split(".")[:2])
    key = (tuple(sorted(requirements)), version)
    with _FETCH_LOCK:
        cached = _FETCHED.get(key)
    if cached is None:
        cached = Path(tempfile.mkdtemp(prefix="clawloop-harbor-wheels-"))
        atexit.register(shutil.rmtree, cached, True)
        timeout, timeout_text = budget.cap(WHEEL_FETCH_SECONDS, "fetching test.sh's wheels")
        args = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--dest", str(cached),
                "--python-version", version, "--implementation", "cp",
                *[f"--platform={platform}" for platform in _WHEEL_PLATFORMS], *sorted(requirements)]
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise HarborRunError(f"{where}: fetching the wheels of {', '.join(sorted(requirements))} from PyPI did "
                                 f"not finish within {timeout_text}") from None
        if done.returncode != 0:
            said = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("ERROR")]
            raise HarborRunError(f"{where}: PyPI has no wheel of {', '.join(sorted(requirements))} (with its "
                                 f"dependencies) for Python {version} on Linux x86-64: "
                                 f"{' '.join(said)[-400:] or 'pip download failed'}")
        with _FETCH_LOCK:
            _FETCHED[key] = cached
    for wheel in cached.iterdir():
        if not (dest / wheel.name).exists():
            shutil.copyfile(wheel, dest / wheel.name)
    return (f"{where}: {', '.join(sorted(requirements))} (not in the offline wheelhouse) fetched from PyPI for "
            f"Python {version} before the tests, which run offline")


def network_line(script: Path) -> str | None:
    """'<script>:<line>: `<the line>` needs the network' for the first line
    of `script` that fetches (task_format's rule), else None."""
    if not script.is_file():
        return None
    for number, line in enumerate(script.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.lstrip().startswith("#") and _NETWORK_USE.search(line):
            return f"{script}:{number}: `{line.strip()[:120]}` needs the network"
    return None


def prune_task_images(keep: list[Path], repository: str = IMAGE_REPOSITORY) -> tuple[list[str], list[str]]:
    """The prune policy of built task images: an image is kept while an
    import destination in `keep` lists its task as validated in it (the
    manifest's image_only rows); every other `clawloop-harbor/*` image is
    removed (a task that did not validate has none already; this clears
    those of throwaway imports, old runs and `clawloop harbor-run`).
    Returns (removed, kept) tags. `repository` narrows it to one task's
    images (`clawloop-harbor/<task>`)."""
    from clawloop_assets.harbor.task_format import read_import_manifest

    wanted = {row.get("image") for directory in keep for row in read_import_manifest(Path(directory)).get("image_only", [])}
    removed, kept = [], []
    for tag in task_images(repository):
        if tag in wanted:
            kept.append(tag)
        else:
            remove_task_image(tag)
            removed.append(tag)
    return removed, kept


def _copy_in(container: str, source: Path, target: str) -> None:
    """Upload a directory into the container, as Harbor does (`docker cp`)."""
    done = subprocess.run([_docker(), "cp", f"{source}/.", f"{container}:{target}"], capture_output=True, text=True,
                          timeout=CONTAINER_SECONDS)
    if done.returncode != 0:
        # docker cp needs the target's parent; make it and retry once.
        subprocess.run([_docker(), "exec", "-u", "0", container, "mkdir", "-p", target], capture_output=True,
                       timeout=CONTAINER_SECONDS)
        done = subprocess.run([_docker(), "cp", f"{source}/.", f"{container}:{target}"], capture_output=True,
                              text=True, timeout=CONTAINER_SECONDS)
    if done.returncode != 0:
        raise SandboxError(f"copying {source} into the container failed: {done.stderr.strip()[-300:]}")


def validate_the_harbor_way(task_dir: Path, *, cpu_shares: int | None = None, oracle_timeout_s: float | None = None,
                            budget_s: float | None = None) -> tuple[str | None, HarborRun, HarborRun | None]:
    """The oracle must score 1 and the untouched environment 0, each run the
    Harbor way. (None, oracle run, untouched run) when they do, else (the
    reason, ...). `budget_s` caps both runs together (TaskBudget)."""
    budget = TaskBudget(budget_s)
    solved = run_harbor_task(task_dir, cpu_shares=cpu_shares, oracle_timeout_s=oracle_timeout_s, budget=budget)
    if solved.reward != 1.0:
        reason = f"{task_dir / 'tests' / 'test.sh'}: the oracle's run does not pass: {solved.detail}"
        if solved.refused_hosts:
            # The oracle had the registries: what it asked beyond them is the likely cause.
            reason = (f"{task_dir / 'solution' / 'solve.sh'}: fetches from {', '.join(solved.refused_hosts)}, which "
                      f"this machine's registry proxy does not reach (only {registries_text()}); the oracle exited "
                      f"with {solved.oracle_exit}; " + reason)
        return reason, solved, None
    untouched = run_harbor_task(task_dir, oracle=False, cpu_shares=cpu_shares, budget=budget)
    # As the bundle wrapper scores it: no valid reward on the untouched
    # environment is a failure of the tests, which is what they must do.
    if untouched.reward == 1.0:
        return f"{task_dir / 'tests' / 'test.sh'}: the untouched environment already passes", solved, untouched
    return None, solved, untouched


__all__ = ["HarborRun", "HarborRunError", "TaskBudget", "build_task_image", "map_base_image", "network_line",
           "prune_task_images", "read_reward", "remove_task_image", "run_harbor_task", "task_images", "validate_the_harbor_way"]
