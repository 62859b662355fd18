"""Encoder runtimes (`retriever.runtime=onnx|openvino`, `retriever.quantize=int8`): the exported
graph gives the torch path's vectors (same tokenisation, pooling, normalisation, prefixes), is
exported once per content key and verified before reuse, and keys the embeddings apart."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.helpers.config import group_config

from densex.retrieval.encoders import build_retriever
from densex.retrieval.spec import RetrieverSpec

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def passages(squad_open: Path) -> list[dict]:
    with (squad_open / "passages.jsonl").open(encoding="utf-8") as f:
        return [json.loads(next(f)) for _ in range(6)]


def minilm(export_dir: Path, *overrides: str) -> RetrieverSpec:
    cfg = group_config(
        "retriever", "minilm", f"retriever.export_dir={export_dir}", "retriever.device=cpu",
        "retriever.query_prefix='query: '", *overrides,
    )  # fmt: skip
    return RetrieverSpec.from_cfg(cfg)


def encode(spec: RetrieverSpec, passages: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    retriever = build_retriever(spec)
    questions = ["Who founded the university?", "When did the war end?"]
    return retriever.encode_units(passages, batch_size=4), retriever.encode_queries(questions)


@pytest.fixture(scope="module")
def torch_vectors(passages, tmp_path_factory, one_thread_module) -> tuple[np.ndarray, np.ndarray]:
    return encode(minilm(tmp_path_factory.mktemp("exports")), passages)


@pytest.fixture(scope="module")
def one_thread_module():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("runtime", ["onnx", "openvino"])
def test_exported_fp32_equals_torch(runtime, passages, torch_vectors, tmp_path) -> None:
    if runtime == "openvino":
        pytest.importorskip("openvino")
    units, queries = encode(minilm(tmp_path, f"retriever.runtime={runtime}"), passages)
    assert units.shape == torch_vectors[0].shape and units.dtype == np.float32
    # padded batches of different lengths, prefixes on queries, normalised: all as torch
    np.testing.assert_allclose(units, torch_vectors[0], atol=2e-6)
    np.testing.assert_allclose(queries, torch_vectors[1], atol=2e-6)
    np.testing.assert_allclose(np.linalg.norm(units, axis=1), 1.0, atol=1e-5)


def test_int8_is_close_to_fp32(passages, torch_vectors, tmp_path) -> None:
    units, queries = encode(
        minilm(tmp_path, "retriever.runtime=onnx", "retriever.quantize=int8"), passages
    )
    cos = (units * torch_vectors[0]).sum(1)
    assert cos.min() > 0.9  # dynamic int8 moves vectors a little, never far
    assert np.abs(units - torch_vectors[0]).max() > 1e-4  # and it is really quantised
    assert (queries * torch_vectors[1]).sum(1).min() > 0.9


def test_openvino_bf16_is_close_to_fp32_and_keyed_apart(passages, torch_vectors, tmp_path) -> None:
    ov = pytest.importorskip("openvino")
    spec = minilm(tmp_path, "retriever.runtime=openvino", "retriever.precision=bf16-mixed")
    units, queries = encode(spec, passages)
    assert (units * torch_vectors[0]).sum(1).min() > 0.995  # bf16 matmuls, fp32 accumulation
    assert (queries * torch_vectors[1]).sum(1).min() > 0.995
    if "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        assert np.abs(units - torch_vectors[0]).max() > 1e-5  # it really ran in bf16
    f32 = minilm(tmp_path, "retriever.runtime=openvino").cache_fields("doc")
    assert spec.cache_fields("doc") != f32  # the precision is in the embeddings' key


def test_export_is_reused_verified_and_rebuilt(passages, tmp_path, caplog) -> None:
    spec = minilm(tmp_path, "retriever.runtime=onnx")
    first, _ = encode(spec, passages[:2])
    (onnx_file,) = tmp_path.glob("*/*/model.onnx")
    stamp = onnx_file.stat().st_mtime_ns
    encode(spec, passages[:2])
    assert onnx_file.stat().st_mtime_ns == stamp  # reused, not exported again
    assert not [p for p in tmp_path.glob("*/.*") if p.suffix != ".lock"]  # no temp dir left
    with onnx_file.open("r+b") as f:  # damage it: same size, other bytes
        f.seek(100)
        f.write(b"\0" * 16)
    again, _ = encode(spec, passages[:2])
    assert "damaged export" in caplog.text
    np.testing.assert_allclose(again, first, atol=1e-6)
    manifest = json.loads((onnx_file.parent / "manifest.json").read_text())
    assert manifest["key"]["quantize"] == "none" and "model.onnx" in manifest["files"]


def test_cache_keys_keep_runtimes_apart(tmp_path) -> None:
    base = minilm(tmp_path)
    keys = {
        json.dumps(minilm(tmp_path, *o).cache_fields("doc"), sort_keys=True)
        for o in [(), ("retriever.runtime=onnx",), ("retriever.runtime=openvino",),
                  ("retriever.runtime=onnx", "retriever.quantize=int8")]
    }  # fmt: skip
    assert len(keys) == 4
    # the torch key is the one from before runtimes existed: cached embeddings stay valid
    assert "runtime" not in base.cache_fields("doc") and "quantize" not in base.cache_fields()
    assert "export_dir" not in minilm(tmp_path, "retriever.runtime=onnx").cache_fields()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (("retriever.quantize=int8",), "quantize int8 needs runtime onnx"),
        (("retriever.runtime=openvino", "retriever.quantize=int8"), "needs runtime onnx"),
        (("retriever.runtime=onnx", "retriever.precision=bf16-mixed"), "in precision 32-true,"),
        (("retriever.runtime=openvino", "retriever.precision=16-mixed"), "32-true or bf16-mixed"),
        (("retriever.runtime=tensorrt",), "runtime"),
    ],
)
def test_bad_runtime_settings_fail_naming_the_key(overrides, message, tmp_path) -> None:
    with pytest.raises(ValueError, match=message):
        minilm(tmp_path, *overrides)


@pytest.mark.parametrize("pooling", ["pooler", "cls", "mean"])
def test_hf_models_export_too(pooling, tmp_path, minilm_path, passages) -> None:
    """The paper retrievers' path (backend hf): DPR-style (title, text) pairs with token type
    ids, pooler / CLS / masked-mean pooling, dot product; a tiny random BERT stands in."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    model_dir = tmp_path / "tiny-bert"
    tok = AutoTokenizer.from_pretrained(minilm_path)
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)  # fmt: skip
    torch.manual_seed(0)
    BertModel(config).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    base = {"name": "tiny", "query_model": str(model_dir), "pooling": pooling, "title": "pair",
            "max_length": 64, "device": "cpu", "export_dir": str(tmp_path / "exports")}  # fmt: skip
    want = encode(RetrieverSpec.from_cfg(base), passages)
    got = encode(RetrieverSpec.from_cfg({**base, "runtime": "onnx"}), passages)
    np.testing.assert_allclose(got[0], want[0], atol=1e-5)
    np.testing.assert_allclose(got[1], want[1], atol=1e-5)
