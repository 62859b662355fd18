"""Encoder runtimes besides torch: the whole encoder exported once to ONNX, run by onnxruntime
(fp32 or dynamic int8, weights per channel) or OpenVINO (fp32, or bf16 with
`retriever.precision=bf16-mixed`: AMX / AVX512-BF16 CPUs run it ~3x faster than fp32).

`retriever.runtime=onnx|openvino` (`retriever.quantize=none|int8`) runs the document and query
encoders through an exported graph of the *same* torch forward (`TextEncoder.torch_forward`:
the model, its pooling, Dense layers and normalisation), fed by the same tokenizer call, so
prefixes, truncation, max length, pooling and normalisation are those of the torch path by
construction. The export lives in `<export_dir>/<model name>/<key>` (`retriever.export_dir`,
default `<paths.cache_dir>/exports`, as `retrieval.build` sets it), keyed by the model
files' hashes, the graph's settings, torch/onnx versions and the quantisation; it is built in
a temporary directory and renamed (`utils.cache.ensure_built_dir`), its manifest holds each
file's size and hash, verified before reuse (a damaged export is rebuilt).

Sessions are created on first use in the process that runs them (a ddp_spawn worker pickles
the encoder without one), with as many intra-op threads as torch has.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from densex.utils.cache import artifact_dir, content_key, ensure_built_dir, hash_file
from densex.utils.integrity import file_record, verify_files
from densex.utils.io import read_json, write_manifest
from densex.utils.logging import get_logger

log = get_logger(__name__)

__all__ = ["ExportedEncoder", "export_encoder", "exported_encoder", "model_fingerprint"]

# graph inputs a tokenizer may give, in the order of the exported signature
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OPSET = 17
EXPORT_FORMAT = 1  # bump when the export itself changes (new keys for every exported model)
MODEL_FILE_SUFFIXES = (".json", ".safetensors", ".bin", ".txt", ".model", ".pt")


def exported_encoder(
    encoder: Any, path: str, token_states: Callable[..., torch.Tensor] | None = None
) -> ExportedEncoder:
    """`encoder`'s (a `TextEncoder`: `spec`, `tokenize`, `torch_forward`) forward exported once
    per content key for its `spec.runtime`; `path` is its resolved model path. With
    `token_states` (features -> final token states: `retrieval.late`, late chunking pools
    them) that function instead, keyed apart."""
    spec = encoder.spec
    texts = ["A short text.", "A longer text, with a few more words, so the batch pads."]
    sample = encoder.tokenize([("Title", t) for t in texts] if spec.title == "pair" else texts)
    key = {
        "model": model_fingerprint(path),
        **{k: getattr(spec, k) for k in ("backend", "pooling", "similarity")},
    }
    forward = encoder.torch_forward
    if token_states is not None:  # keys of the pooled graphs stay as they were
        key["output"], forward = "token_states", token_states
    export_dir = spec.export_dir or str(
        Path(os.environ.get("DENSEX_CACHE_DIR") or ".cache") / "exports"
    )
    onnx_file = export_encoder(
        encoder, forward, sample, export_dir, f"{spec.name}-{Path(path).name}", key,
        spec.quantize, per_token=token_states is not None,
    )  # fmt: skip
    names = [k for k in INPUT_NAMES if isinstance(sample.get(k), torch.Tensor)]
    precision = "bf16" if spec.precision == "bf16-mixed" else "f32"
    return ExportedEncoder(onnx_file, spec.runtime, names, precision)


def model_fingerprint(path: str) -> dict[str, Any]:
    """What identifies a model's weights: `{relative file: sha256}` of a local directory's
    weight, config and vocabulary files (memoised per process), else the hub id and the cached
    snapshot's files when the hub cache has it."""
    root = Path(path)
    if not root.is_dir():
        try:
            from huggingface_hub import snapshot_download

            root = Path(snapshot_download(path, local_files_only=True))
        except Exception:  # noqa: BLE001 - no local snapshot: the id is all we know
            return {"id": path}
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in MODEL_FILE_SUFFIXES)
    return {str(p.relative_to(root)): hash_file(p) for p in files}


def export_encoder(
    module: torch.nn.Module,
    forward: Callable[[Mapping[str, torch.Tensor]], torch.Tensor],
    sample: Mapping[str, torch.Tensor],
    export_dir: str | Path,
    name: str,
    key_parts: dict[str, Any],
    quantize: str,
    per_token: bool = False,
) -> Path:
    """The ONNX file of `forward` (features -> pooled embeddings; `module` holds its weights) for `quantize` ("none" |
    "int8"), exported once per content key (`key_parts` + versions) and reused after its
    files are verified; `sample` is a tokenised batch with padding (the traced shapes are
    dynamic in batch and sequence; with `per_token` the output's sequence axis too)."""
    import onnx

    names = [k for k in INPUT_NAMES if isinstance(sample.get(k), torch.Tensor)]
    parts = {
        **key_parts,
        "inputs": names,
        "quantize": quantize,
        "opset": OPSET,
        "format": EXPORT_FORMAT,
        "torch": torch.__version__,
        "onnx": onnx.__version__,
    }
    if quantize == "int8":
        import onnxruntime

        parts["onnxruntime"] = onnxruntime.__version__
        parts["int8"] = "dynamic, QInt8 weights per channel"
    out = artifact_dir(export_dir, name, key=content_key(**parts))
    file = "model.onnx"
    if (out / "manifest.json").exists():
        records = read_json(out / "manifest.json").get("files", {})
        problems = verify_files(out, records) if records else [(out / file, "no records")]
        if not problems:
            return out / file
        log.warning("damaged export %s (%s): exporting again", out, problems[0][1])
        shutil.rmtree(out, ignore_errors=True)

    def build(tmp: Path) -> None:
        _export(module, forward, sample, names, tmp / "fp32.onnx", per_token)
        if quantize == "int8":
            _quantize_int8(tmp / "fp32.onnx", tmp / file)
            (tmp / "fp32.onnx").unlink()
        else:
            (tmp / "fp32.onnx").rename(tmp / file)
        # last: the manifest is the mark of a complete export (size + hash, verified on reuse)
        write_manifest(
            tmp / "manifest.json", kind="onnx_export", key=dict(parts),
            files={file: file_record(tmp / file)},
        )  # fmt: skip

    log.info("exporting %s to ONNX (quantize %s) in %s", name, quantize, out)
    ensure_built_dir(out, build, marker="manifest.json")
    return out / file


def _quantize_int8(src: Path, dst: Path) -> None:
    """onnxruntime's dynamic int8: weights int8 per output channel (per-tensor scales lost 1.3
    pt of squad-open R@5, min cosine 0.83 to fp32, vs 0.987 per channel), uint8 activations."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(src, dst, weight_type=QuantType.QInt8, per_channel=True)


def _export(
    module: torch.nn.Module,
    forward: Callable[[Mapping[str, torch.Tensor]], torch.Tensor],
    sample: Mapping[str, torch.Tensor],
    names: Sequence[str],
    path: Path,
    per_token: bool = False,
) -> None:
    """torch.onnx.export (TorchScript tracer) of `forward` with batch and sequence dynamic
    (`per_token`: the output is per token, its sequence axis dynamic too)."""

    class Graph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = module  # its weights are parameters of the traced graph

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            return forward(dict(zip(names, tensors)))

    args = tuple(sample[k].cpu() for k in names)
    axes = {k: {0: "batch", 1: "sequence"} for k in names}
    out_axes = {0: "batch", 1: "sequence"} if per_token else {0: "batch"}
    # the tracer's notes on Python conditions it records as constants (shape checks that hold
    # for every batch) and on opset details are not the user's business
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", UserWarning)
        torch.onnx.export(
            Graph().eval(), args, str(path), input_names=list(names), output_names=["embedding"],
            dynamic_axes={**axes, "embedding": out_axes}, opset_version=OPSET, dynamo=False,
        )  # fmt: skip


class ExportedEncoder:
    """Runs an exported encoder: tokenised features (torch tensors) -> float32 embeddings.

    `runtime` "onnx" (onnxruntime's CPU provider) or "openvino" (CPU) at inference
    `precision` "f32" (the default, so it matches the torch path rather than running bf16 on
    AMX CPUs, which is OpenVINO's own default there) or "bf16" (`precision=bf16-mixed`)."""

    def __init__(
        self, path: Path, runtime: str, input_names: Sequence[str], precision: str = "f32"
    ) -> None:
        self.path, self.runtime, self.input_names = Path(path), runtime, list(input_names)
        self.precision = precision
        self._run: Callable[[dict[str, np.ndarray]], np.ndarray] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_run": None}  # sessions are per process

    def __call__(self, features: Mapping[str, torch.Tensor]) -> torch.Tensor:
        if self._run is None:
            self._run = self._session()
        feeds = {k: _int64(features[k]) for k in self.input_names}
        return torch.from_numpy(np.ascontiguousarray(self._run(feeds), dtype=np.float32))

    def _session(self) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
        threads = max(1, torch.get_num_threads())
        if self.runtime == "openvino":
            import openvino as ov

            compiled = ov.Core().compile_model(
                str(self.path), "CPU",
                {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": self.precision},
            )  # fmt: skip
            request = compiled.create_infer_request()
            return lambda feeds: request.infer(feeds)[compiled.output(0)]
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        return lambda feeds: session.run(None, feeds)[0]


def _int64(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    return np.ascontiguousarray(value, dtype=np.int64)
