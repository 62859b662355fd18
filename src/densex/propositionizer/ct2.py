"""The CTranslate2 runtime of T5/Flan-T5 propositionizers (`propositionizer.runtime=ctranslate2`).

A checkpoint is converted once into the cache (`converted_model`: keyed by the model's
fingerprint, the quantisation and the CTranslate2 version; built in a temporary directory and
renamed under the build lock, `utils.cache.ensure_built_dir`; its files' sizes and hashes in a
manifest, verified on reuse and rebuilt when damaged, like the encoders' ONNX exports).
`CT2Seq2Seq` wraps a `ctranslate2.Translator` in the slice of transformers' `generate`
interface that `utils.generation.generate_sorted` calls, so the prompt, the length-sorted
batches, the output decoding, the cut-off flags, the parse and the repair are the pipeline's
own; within a call CTranslate2 batches by tokens (`max_batch_tokens`).

Quantisation (`compute_type`): `auto` is int8 on CPU (int8 weights and activations, the fast
path of CTranslate2 on x86) and bfloat16 on a CUDA GPU; float32 gives transformers' greedy
tokens exactly (tests/test_ctranslate2.py). Known trap: Flan-T5 (and T5 v1.1) overflows in
float16 (its feed-forward activations exceed 65,504; outputs turn to NaN or garbage), so
float16 and int8_float16 are refused for T5: use bfloat16 or int8 (int8_bfloat16 on a GPU).
Only T5-family checkpoints are accepted: the copy student runs in torch (`copy_decode.py`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from densex.propositionizer.fingerprint import model_fingerprint
from densex.utils.cache import artifact_dir, content_key, ensure_built_dir
from densex.utils.integrity import file_record, verify_files
from densex.utils.io import read_json, write_manifest
from densex.utils.logging import get_logger

log = get_logger(__name__)

__all__ = ["QUANTIZATIONS", "CT2Seq2Seq", "compute_type", "converted_model"]

QUANTIZATIONS = ("auto", "int8", "int8_float32", "int8_bfloat16", "bfloat16", "float32")
_FP16 = ("float16", "int8_float16")  # T5's fp16 overflow: refused
FORMAT = 1  # the conversion's layout in the cache (bump to convert again)


def compute_type(quantization: str, device: str = "cpu") -> str:
    """The CTranslate2 compute type of `quantization` on `device`: `auto` = int8 on CPU,
    bfloat16 on CUDA; float16 kinds are refused (module docstring: Flan-T5 overflows)."""
    q = str(quantization).lower()
    if q in _FP16:
        raise ValueError(
            f"quantization {q!r}: T5/Flan-T5 overflows in float16; use bfloat16 or int8"
        )
    if q not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {', '.join(QUANTIZATIONS)}, got {q!r}")
    if q == "auto":
        return "bfloat16" if device == "cuda" else "int8"
    return q


def converted_model(model: str, cache_dir: str | os.PathLike, quantization: str) -> Path:
    """The CTranslate2 directory of the transformers checkpoint `model` (a local directory or
    a cached hub id) with weights stored as `quantization` (a `compute_type`), converted once
    into `cache_dir/ctranslate2/<key>` (module docstring)."""
    import ctranslate2

    fingerprint = model_fingerprint(model)
    parts = {
        "model": fingerprint,
        "quantization": quantization,
        "ctranslate2": ctranslate2.__version__,
        "format": FORMAT,
    }
    out = artifact_dir(cache_dir, "ctranslate2", key=content_key(**parts))
    if (out / "manifest.json").exists():
        records = read_json(out / "manifest.json").get("files", {})
        problems = verify_files(out, records) if records else [(out, "no records")]
        if not problems:
            return out
        log.warning("damaged CTranslate2 model %s (%s): converting again", out, problems[0][1])
        shutil.rmtree(out, ignore_errors=True)

    def build(tmp: Path) -> None:
        from ctranslate2.converters import TransformersConverter

        TransformersConverter(model).convert(str(tmp), quantization=quantization, force=True)
        files = {f.name: file_record(f) for f in sorted(tmp.iterdir()) if f.is_file()}
        # last: the manifest marks a complete conversion (sizes + hashes, verified on reuse)
        write_manifest(tmp / "manifest.json", kind="ctranslate2", key=parts, files=files)

    log.info("converting %s to CTranslate2 (%s) in %s", model, quantization, out)
    ensure_built_dir(out, build, marker="manifest.json")
    return out


class CT2Seq2Seq:
    """A converted T5 behind transformers' `generate` (greedy or beam; `min_new_tokens` and
    `no_repeat_ngram_size` honoured): ids in, ids out shaped like a seq2seq `generate` (column
    0 the decoder start token, the end token after each finished row, then padding; a row cut
    at `max_new_tokens` has no end token). `threads`: CTranslate2's intra-op threads (default
    torch's)."""

    def __init__(
        self,
        path: str | os.PathLike,
        tokenizer: Any,
        generation_config: Any,
        compute: str = "int8",
        device: str = "cpu",
        max_batch_tokens: int = 8192,
        threads: int | None = None,
    ) -> None:
        import ctranslate2

        self.translator = ctranslate2.Translator(
            str(path),
            device=device,
            compute_type=compute,
            inter_threads=1,
            intra_threads=int(threads or torch.get_num_threads()),
        )
        self.tokenizer = tokenizer
        self.generation_config = generation_config
        self.max_batch_tokens = max_batch_tokens
        self.device = torch.device("cpu")  # where generate_sorted puts the inputs

    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        max_new_tokens: int = 512,
        num_beams: int = 1,
        min_new_tokens: int | None = None,
        no_repeat_ngram_size: int | None = None,
        **unused: Any,
    ) -> torch.Tensor:
        """Generated ids (B, 1 + n) for the rows of `input_ids` (class docstring)."""
        rules = {k for k, v in unused.items() if v not in (None, False) and k != "do_sample"}
        if rules:
            raise ValueError(f"the ctranslate2 runtime does not apply {sorted(rules)}")
        convert = self.tokenizer.convert_ids_to_tokens
        sources = [convert(row[m.bool()].tolist()) for row, m in zip(input_ids, attention_mask)]
        results = self.translator.translate_batch(
            sources,
            beam_size=num_beams,
            max_decoding_length=max_new_tokens,
            min_decoding_length=int(min_new_tokens or 0),
            no_repeat_ngram_size=int(no_repeat_ngram_size or 0),
            max_batch_size=self.max_batch_tokens,
            batch_type="tokens",
            return_scores=False,
        )
        hypotheses = [self.tokenizer.convert_tokens_to_ids(r.hypotheses[0]) for r in results]
        return self._as_generate_output(hypotheses, max_new_tokens)

    def _as_generate_output(self, rows: Sequence[list[int]], max_new_tokens: int) -> torch.Tensor:
        """`generate`'s layout of the generated ids `rows` (without start and end tokens)."""
        cfg = self.generation_config
        eos = cfg.eos_token_id if isinstance(cfg.eos_token_id, int) else cfg.eos_token_id[0]
        start = cfg.decoder_start_token_id
        full = [[start, *r] + ([eos] if len(r) < max_new_tokens else []) for r in rows]
        out = torch.full((len(full), max(map(len, full))), cfg.pad_token_id, dtype=torch.long)
        for i, r in enumerate(full):
            out[i, : len(r)] = torch.tensor(r)
        return out
