"""Checkpoints that are safe to trust: safetensors only, written atomically,
with a hash manifest and a completion marker. Only verified checkpoints load.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

MANIFEST = "clawloop_manifest.json"
COMPLETE_MARKER = "CHECKPOINT_COMPLETE"
# Files a policy checkpoint may hold; anything else (a pickle above all) is refused.
ALLOWED_SUFFIXES = {".safetensors", ".json", ".jinja", ".txt", ".model"}


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete, or does not match its manifest."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checkpoint(save_fn, final_dir: Path, metadata: dict[str, Any]) -> Path:
    """Call `save_fn(tmp_dir)` to write the weights, then hash, mark complete and
    rename into place. A crash at any point leaves `final_dir` untouched."""
    final_dir = Path(final_dir)
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final_dir.name}.tmp-", dir=final_dir.parent))
    try:
        save_fn(tmp)
        files = {}
        for path in sorted(p for p in tmp.rglob("*") if p.is_file()):
            rel = path.relative_to(tmp).as_posix()
            if path.suffix not in ALLOWED_SUFFIXES:
                raise CheckpointError(f"{final_dir}: refusing to store {rel!r} (only safetensors weights and text configs)")
            files[rel] = _sha256(path)
        if not any(name.endswith(".safetensors") for name in files):
            raise CheckpointError(f"{final_dir}: save wrote no .safetensors weights")
        manifest = {"files": files, "metadata": metadata, "created_at": time.time()}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
        (tmp / COMPLETE_MARKER).write_text("")
        if final_dir.exists():
            # Replace an older checkpoint of the same name: move it aside first so
            # there is never a moment without a complete checkpoint on disk.
            old = final_dir.with_name(f".{final_dir.name}.old-{os.getpid()}")
            os.replace(final_dir, old)
            os.replace(tmp, final_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final_dir


def verify_checkpoint(directory: Path) -> dict[str, Any]:
    """Return the manifest of a complete checkpoint whose files match their hashes."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint {directory} does not exist")
    if not (directory / COMPLETE_MARKER).exists():
        raise CheckpointError(f"checkpoint {directory} is incomplete (no {COMPLETE_MARKER}); it was not fully written")
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint {directory}: unreadable {MANIFEST}: {exc}") from exc
    present = {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()}
    extra = present - set(manifest["files"]) - {MANIFEST, COMPLETE_MARKER}
    if extra:
        raise CheckpointError(f"checkpoint {directory}: files not in the manifest: {sorted(extra)}")
    for rel, digest in manifest["files"].items():
        path = directory / rel
        if not path.is_file():
            raise CheckpointError(f"checkpoint {directory}: {rel} is missing")
        if _sha256(path) != digest:
            raise CheckpointError(f"checkpoint {directory}: {rel} does not match its hash in the manifest")
    return manifest


def checkpoint_id(directory: Path) -> str:
    """A stable id: the hash of the manifest's file hashes."""
    manifest = verify_checkpoint(directory)
    blob = json.dumps(manifest["files"], sort_keys=True).encode()
    return "ckpt-" + hashlib.sha256(blob).hexdigest()[:12]
