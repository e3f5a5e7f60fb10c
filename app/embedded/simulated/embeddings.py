"""OpenAI's embeddings as the simulator reads and answers them (pure).

A text's vector is drawn from a hash of the model's name and the text (SHAKE-256), so
the same text gets the same vector from every simulated deployment of that model, in
every run, and two texts get unrelated ones: no model is run, nothing is similar to
anything. ``NATIVE_DIMENSIONS`` numbers, unit length; ``dimensions`` asks for fewer (the
first ones, made unit length again, as OpenAI shortens its v3 embeddings). Usage counts a
token per four characters of each text (at least one).
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from dataclasses import dataclass
from typing import Any

from app.embedded.simulated.openai_format import RequestError

#: The length of a simulated vector (text-embedding-3-small's).
NATIVE_DIMENSIONS = 1536
_UINT32 = 2**32


@dataclass(frozen=True, slots=True)
class EmbeddingsAsked:
    texts: list[str]
    dimensions: int
    base64: bool


def parse_embeddings(body: dict[str, Any]) -> EmbeddingsAsked:
    """The texts, the length and the format an embeddings body asks for (RequestError:
    what is wrong with it, as OpenAI's API would refuse it)."""
    texts = body.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise RequestError("'input' must be a string or a non-empty array of strings")
    if not all(texts):
        raise RequestError("'input' cannot contain an empty string")
    dimensions = body.get("dimensions", NATIVE_DIMENSIONS)
    if isinstance(dimensions, bool) or not isinstance(dimensions, int):
        raise RequestError("'dimensions' must be an integer")
    if not 1 <= dimensions <= NATIVE_DIMENSIONS:
        raise RequestError(f"'dimensions' must be between 1 and {NATIVE_DIMENSIONS}")
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise RequestError("'encoding_format' must be 'float' or 'base64'")
    return EmbeddingsAsked(texts, dimensions, encoding == "base64")


def vector_of(model: str, text: str, dimensions: int = NATIVE_DIMENSIONS) -> list[float]:
    """The text's vector: unit length, from a hash of the model and the text."""
    seed = hashlib.shake_256(f"{model}\x1f{text}".encode()).digest(4 * NATIVE_DIMENSIONS)
    raw = struct.unpack(f"<{NATIVE_DIMENSIONS}I", seed)[:dimensions]
    centred = [2.0 * x / _UINT32 - 1.0 for x in raw]
    norm = math.sqrt(sum(x * x for x in centred)) or 1.0
    return [round(x / norm, 8) for x in centred]


def text_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def embeddings_answer(model: str, asked: EmbeddingsAsked) -> dict[str, Any]:
    """OpenAI's answer: one embedding per text, in order, and the tokens counted."""
    data = []
    for index, text in enumerate(asked.texts):
        vector = vector_of(model, text, asked.dimensions)
        embedding: list[float] | str = vector
        if asked.base64:
            embedding = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    tokens = sum(text_tokens(text) for text in asked.texts)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return {"object": "list", "data": data, "model": model, "usage": usage}
