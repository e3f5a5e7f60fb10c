"""The local model's F16 copy (app/embedded/model_weights.py), on a small GGUF made here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

from app.embedded.model_weights import default_weights_dir, served_weights  # noqa: E402

Q4_1 = gguf.GGMLQuantizationType.Q4_1


def quantised_model(path: Path, seed: int = 0) -> dict[str, object]:
    """A GGUF with a Q4_1 matrix, an F32 norm and some metadata; what it should widen to."""
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((8, 64)).astype(np.float32)
    packed = gguf.quants.quantize(matrix, Q4_1)
    norm = rng.standard_normal(64).astype(np.float32)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("tiny")
    writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q4_1))
    writer.add_context_length(128)
    writer.add_token_list(["<s>", "a", "b"])
    writer.add_tensor("blk.0.attn_q.weight", packed, raw_shape=packed.shape, raw_dtype=Q4_1)
    writer.add_tensor("blk.0.attn_norm.weight", norm)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {
        "blk.0.attn_q.weight": gguf.quants.dequantize(packed, Q4_1).astype(np.float16),
        "blk.0.attn_norm.weight": norm,
    }


def test_quantised_matrices_are_served_as_f16_and_everything_else_is_kept(
    tmp_path: Path,
) -> None:
    source = tmp_path / "tiny.Q4_1.gguf"
    expected = quantised_model(source)
    served = served_weights(source, tmp_path / "cache")
    reader = gguf.GGUFReader(served)
    tensors = {t.name: t for t in reader.tensors}
    matrix = tensors["blk.0.attn_q.weight"]
    assert matrix.tensor_type == gguf.GGMLQuantizationType.F16
    assert np.array_equal(np.asarray(matrix.data), expected["blk.0.attn_q.weight"])
    norm = tensors["blk.0.attn_norm.weight"]
    assert norm.tensor_type == gguf.GGMLQuantizationType.F32
    assert np.array_equal(np.asarray(norm.data), expected["blk.0.attn_norm.weight"])
    fields = reader.fields
    assert fields["general.architecture"].contents() == "llama"
    assert fields["general.name"].contents() == "tiny"
    assert fields["llama.context_length"].contents() == 128
    assert fields["tokenizer.ggml.tokens"].contents() == ["<s>", "a", "b"]
    assert fields["general.file_type"].contents() == int(gguf.LlamaFileType.MOSTLY_F16)


def test_the_copy_is_made_once_and_a_new_model_gets_a_new_one(tmp_path: Path) -> None:
    source = tmp_path / "tiny.Q4_1.gguf"
    quantised_model(source, seed=1)
    cache = tmp_path / "cache"
    first = served_weights(source, cache)
    os.utime(first, (1, 1))  # a rewrite would change it
    assert served_weights(source, cache) == first and first.stat().st_mtime == 1
    quantised_model(source, seed=2)  # the package ships a new release of the model
    second = served_weights(source, cache)
    assert second != first and second.is_file()
    assert sorted(p.name for p in cache.iterdir()) == sorted([first.name, second.name])


def test_a_failed_copy_leaves_nothing_behind(tmp_path: Path) -> None:
    source = tmp_path / "broken.gguf"
    source.write_bytes(b"not a gguf file")
    cache = tmp_path / "cache"
    with pytest.raises(ValueError):
        served_weights(source, cache)
    assert list(cache.iterdir()) == []


def test_the_cache_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_weights_dir() == tmp_path / "switchyard" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_weights_dir() == Path.home() / ".cache" / "switchyard" / "models"
