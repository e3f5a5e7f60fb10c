"""An embeddings call (OpenAI's ``POST {base_url}/embeddings``): its body, and what its
answer must be to count as one (pure).

The provider is sent the request's texts and asked for the format the request asks
(``encoding_format``: ``float`` by default; ``base64``, little-endian float32s, is what
the OpenAI SDKs ask unless told otherwise). Its answer is recorded in OpenAI's shape
(``{"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model",
"usage": {"prompt_tokens", "total_tokens"}}``) and in that format, whatever the provider
sent: numbers from a server that ignores ``encoding_format`` are encoded as OpenAI
encodes them, base64 sent to a ``float`` request is decoded. A 2xx whose data is not one
vector per text (indices 0 to n-1, finite numbers, every vector as long, ``dimensions``
long when asked) is a ``bad_response``, as an unusable chat completion is. Problems are
named in fixed words and numbers, never with the provider's text.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from collections.abc import Sequence
from typing import Any

from app.contract import ChatRequest

#: The format of the vectors when the request names none (OpenAI's default).
DEFAULT_ENCODING = "float"
_FLOAT32 = 4


def embeddings_url(base_url: str) -> str:
    return base_url.rstrip("/") + "/embeddings"


def embeddings_body(model: str, request: ChatRequest) -> dict[str, Any]:
    """The OpenAI embeddings body: the deployment's model, the texts, the format asked and
    ``dimensions`` when the request sets it."""
    body: dict[str, Any] = {
        "model": model,
        "input": list(request.input or ()),
        "encoding_format": request.encoding_format or DEFAULT_ENCODING,
    }
    if request.dimensions is not None:
        body["dimensions"] = request.dimensions
    return body


def encode_base64(vector: Sequence[float]) -> str:
    """OpenAI's base64 form of a vector: its numbers as little-endian float32s.
    OverflowError for a number beyond float32's range."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def decode_base64(text: str) -> list[float] | None:
    """The numbers of a base64 vector (None: not base64 of whole float32s)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    if not raw or len(raw) % _FLOAT32:
        return None
    return list(struct.unpack(f"<{len(raw) // _FLOAT32}f", raw))


def _numbers(value: object) -> list[float] | None:
    """A vector sent as numbers or as base64 (None: neither, or a number not finite)."""
    if isinstance(value, str):
        numbers = decode_base64(value)
    elif isinstance(value, list) and all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in value
    ):
        numbers = [float(x) for x in value]
    else:
        return None
    if numbers is None or not all(math.isfinite(x) for x in numbers):
        return None
    return numbers


def read_embeddings(
    body: dict[str, Any], request: ChatRequest, model: str, prompt_tokens: int
) -> tuple[dict[str, Any] | None, str | None]:
    """(the answer in OpenAI's shape and the request's format, None) for a usable 2xx body,
    (None, what is wrong) otherwise. ``model``: the deployment's, when the body names none;
    ``prompt_tokens``: the usage the provider reported."""
    data = body.get("data")
    wanted = len(request.input or ())
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        return None, "missing data"
    if len(data) != wanted:
        return None, f"{len(data)} embeddings for {wanted} inputs"
    vectors: dict[int, list[float]] = {}
    for position, item in enumerate(data):
        index = item.get("index", position)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < wanted:
            return None, "invalid embedding index"
        numbers = _numbers(item.get("embedding"))
        if not numbers:
            return None, f"invalid embedding at index {index}"
        vectors[index] = numbers
    if len(vectors) != wanted:
        return None, "repeated embedding index"
    sizes = {len(v) for v in vectors.values()}
    if len(sizes) > 1:
        return None, "embeddings of different lengths"
    size = sizes.pop()
    if request.dimensions is not None and size != request.dimensions:
        return None, f"embeddings of {size} dimensions, {request.dimensions} asked"
    encoding = request.encoding_format or DEFAULT_ENCODING
    try:
        items = [_item(i, vectors[i], encoding) for i in range(wanted)]
    except OverflowError:
        return None, "embedding beyond float32"
    named = body.get("model")
    usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
    answer = {
        "object": "list",
        "data": items,
        "model": named if isinstance(named, str) and named else model,
        "usage": usage,
    }
    return answer, None


def _item(index: int, vector: list[float], encoding: str) -> dict[str, Any]:
    embedding: list[float] | str = encode_base64(vector) if encoding == "base64" else vector
    return {"object": "embedding", "index": index, "embedding": embedding}
