"""The Harbor verifiers' offline toolchain: uv, uvx and a wheelhouse.

A Harbor task's tests/test.sh typically installs uv with curl, then runs
`uvx -p 3.13 -w pytest==8.4.1 ... pytest /tests/test_outputs.py`. Our
sandbox has no network, so `make setup` (`clawloop setup`) downloads, once,
the wheels listed in toolchain.txt (each line resolved on its own, with its
dependencies) into `<toolchain>/wheels`, and unpacks the uv and uvx
binaries of the uv wheel into `<toolchain>/bin`. The directory is mounted
read-only at TOOLCHAIN_MOUNT in the verifier's sandbox, its bin first on
PATH, with uv told to stay offline and to find packages only in the
wheelhouse (TOOLCHAIN_ENV). What test.sh asks for beyond it (a wheel not in
the wheelhouse, another interpreter) is found at import time: task_format.py
adapts what can be adapted, records each adaptation, and refuses the rest.

The toolchain is built by the harness, never inside a sandbox, and nothing
a sandboxed command does can change it (read-only mount, root-owned files).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from resources.environment import read_environment
from resources.paths import staged_directory

REQUIREMENTS = Path(__file__).with_name("toolchain.txt")
TOOLCHAIN_MOUNT = "/harbor-toolchain"
MANIFEST = "toolchain.json"
# uv inside the sandbox: offline, packages only from the wheelhouse, no
# interpreter downloads, no user or project configuration, its cache in the
# sandbox's private /tmp.
TOOLCHAIN_ENV = {
    "UV_OFFLINE": "1",
    "UV_NO_INDEX": "1",
    "UV_FIND_LINKS": f"{TOOLCHAIN_MOUNT}/wheels",
    "UV_PYTHON_DOWNLOADS": "never",
    "UV_NO_CONFIG": "1",
    "UV_CACHE_DIR": "/tmp/uv-cache",
    "UV_LINK_MODE": "copy",
}
TOOLCHAIN_PATH = f"{TOOLCHAIN_MOUNT}/bin:/usr/local/bin:/usr/bin:/bin"


class ToolchainError(RuntimeError):
    """The toolchain could not be built; the message says what to do."""


@dataclass(frozen=True)
class Toolchain:
    root: Path
    uv_version: str
    wheels: dict[str, tuple[str, ...]]  # normalized distribution name -> versions in the wheelhouse

    def has(self, name: str, version: str | None) -> bool:
        versions = self.wheels.get(normalize(name), ())
        return bool(versions) and (version is None or version in versions)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def toolchain_dir() -> Path:
    """Shared by every $CLAWLOOP_HOME on the machine, like the vLLM venv
    (resources.environment: CLAWLOOP_HARBOR_TOOLCHAIN)."""
    return read_environment().harbor_toolchain


def _requirements() -> list[str]:
    lines = [line.split("#")[0].strip() for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line]


def _digest() -> str:
    return hashlib.sha256("\n".join(_requirements()).encode()).hexdigest()[:16]


def load_toolchain(directory: Path | None = None) -> Toolchain | None:
    """The built toolchain, or None when it is missing or was built from
    another toolchain.txt (run `make setup`)."""
    root = Path(directory) if directory else toolchain_dir()
    try:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if manifest.get("requirements") != _digest():
        return None
    wheels: dict[str, set[str]] = {}
    for wheel in (root / "wheels").glob("*.whl"):
        name, version = wheel.name.split("-")[:2]
        wheels.setdefault(normalize(name), set()).add(version)
    return Toolchain(root, manifest["uv_version"], {k: tuple(sorted(v)) for k, v in wheels.items()})


def ensure_toolchain(directory: Path | None = None, log=print) -> Toolchain:
    """Build the toolchain from PyPI unless it is there already (built from
    this toolchain.txt). Written beside its place and renamed: complete or absent."""
    root = Path(directory) if directory else toolchain_dir()
    found = load_toolchain(root)
    if found is not None:
        return found
    log(f"harbor toolchain: downloading {len(_requirements())} requirements into {root}")
    root.parent.mkdir(parents=True, exist_ok=True)
    with staged_directory(root, replace=True) as staging:
        wheels = staging / "wheels"
        wheels.mkdir()
        for requirement in _requirements():
            # One resolution per line: the wheelhouse holds several pins of pytest.
            done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
                                   "--dest", str(wheels), requirement], capture_output=True, text=True)
            if done.returncode != 0:
                tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise ToolchainError(f"pip download {requirement} (from {REQUIREMENTS}) failed: {tail}; "
                                     "the Harbor toolchain needs PyPI once, at setup")
        uv_wheels = sorted(wheels.glob("uv-*.whl"))
        if len(uv_wheels) != 1:
            raise ToolchainError(f"{REQUIREMENTS} must pin exactly one uv wheel, found {[w.name for w in uv_wheels]}")
        uv_version = uv_wheels[0].name.split("-")[1]
        (staging / "bin").mkdir()
        with zipfile.ZipFile(uv_wheels[0]) as wheel:
            for binary in ("uv", "uvx"):
                member = f"uv-{uv_version}.data/scripts/{binary}"
                with wheel.open(member) as source, open(staging / "bin" / binary, "wb") as target:
                    shutil.copyfileobj(source, target)
                os.chmod(staging / "bin" / binary, 0o755)
        uv_wheels[0].unlink()  # the binary is in bin/; the wheel would only make uv installable as a package
        for path in [staging, wheels]:
            os.chmod(path, 0o755)
        for wheel_file in wheels.iterdir():
            os.chmod(wheel_file, 0o644)
        (staging / MANIFEST).write_text(json.dumps({"requirements": _digest(), "uv_version": uv_version,
                                                    "python": sys.version.split()[0]}, indent=2) + "\n")
    toolchain = load_toolchain(root)
    assert toolchain is not None
    return toolchain


__all__ = ["TOOLCHAIN_ENV", "TOOLCHAIN_MOUNT", "TOOLCHAIN_PATH", "Toolchain", "ToolchainError", "ensure_toolchain",
           "load_toolchain", "toolchain_dir"]
