"""A sentence embedding computed locally and offline, for the semantic response cache.

The model is WordLlama's ``l2_supercat`` (256 dimensions, a static token-embedding
table distilled from LLaMA 2's, with its tokenizer): the ``wordllama`` wheel ships both
files, so nothing is downloaded (``pip install -e ".[semantic]"``). They are read here
from the installed package's data, without importing the package (its import sets up
the root logger) and without any hub: it works with ``HF_HUB_OFFLINE=1`` and no network.

An embedding is the mean of the text's token vectors, quantised to int8 (scaled so the
largest component is ±127: cosine similarity survives within about 0.005) and carried as
base64 on the request (:class:`app.contract.CacheKey`), never the text. It is computed
once, at ingest: the fold compares the recorded integers (:mod:`app.routing.cache`), so
a replay never embeds anything again and gets the same similarities bit for bit.
"""

from __future__ import annotations

import base64
import importlib.util
import logging
from functools import lru_cache
from pathlib import Path
from typing import Any

#: Named on the request with each vector: vectors of another embedder are not compared.
EMBEDDER = "wordllama-l2-supercat-256/int8"
DIMENSIONS = 256
#: Tokens of a text embedded, at most (its head: the question, not a pasted document).
MAX_TOKENS = 512
_WEIGHTS = ("weights", "l2_supercat_256.safetensors")
_TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")


class EmbedderMissing(RuntimeError):
    """The ``semantic`` extra (the ``wordllama`` wheel, with its model) is not installed."""


def _package_dir() -> Path | None:
    spec = importlib.util.find_spec("wordllama")  # found, not imported
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def missing_reason() -> str | None:
    """Why this machine cannot embed (None: it can)."""
    root = _package_dir()
    if root is None:
        return 'the semantic cache needs the "semantic" extra: pip install -e ".[semantic]"'
    for parts in (_WEIGHTS, _TOKENIZER):
        if not root.joinpath(*parts).is_file():
            return f"the wordllama package has no {'/'.join(parts)}"
    try:
        import numpy  # noqa: F401
        import safetensors  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError as exc:
        return f"the semantic cache needs {exc.name}"
    return None


@lru_cache(maxsize=1)
def _model() -> tuple[Any, Any]:
    reason = missing_reason()
    if reason is not None:
        raise EmbedderMissing(reason)
    from safetensors import safe_open
    from tokenizers import Tokenizer

    root = _package_dir()
    assert root is not None
    tokenizer = Tokenizer.from_file(str(root.joinpath(*_TOKENIZER)))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    with safe_open(str(root.joinpath(*_WEIGHTS)), framework="np", device="cpu") as weights:
        table = weights.get_tensor("embedding.weight")
    return tokenizer, table


def quantised(text: str) -> bytes | None:
    """The text's embedding as ``DIMENSIONS`` signed bytes; None for a text without a token.
    Raises :class:`EmbedderMissing` when the model is not installed."""
    import numpy as np

    tokenizer, table = _model()
    ids = tokenizer.encode(text, add_special_tokens=False).ids[:MAX_TOKENS]
    if not ids:
        return None
    rows = np.asarray(ids, dtype=np.int64).clip(0, table.shape[0] - 1)
    mean = table[rows].astype(np.float32).mean(axis=0, dtype=np.float64)
    largest = float(np.abs(mean).max())
    if largest == 0.0:
        return None
    scaled = np.rint(mean * (127.0 / largest)).clip(-127, 127).astype(np.int8)
    return bytes(scaled.tobytes())


def quantised_or_none(text: str) -> bytes | None:
    """:func:`quantised`, or None (logged once) when the model is not installed: a
    semantic route then caches exact matches only."""
    try:
        return quantised(text)
    except EmbedderMissing as exc:
        _warn_missing(str(exc))
        return None


@lru_cache(maxsize=1)
def _warn_missing(reason: str) -> None:
    logging.getLogger(__name__).warning("semantic cache off, exact matches only: %s", reason)


def encode(vector: bytes) -> str:
    return base64.b64encode(vector).decode("ascii")


def decode(text: str) -> bytes:
    return base64.b64decode(text)
