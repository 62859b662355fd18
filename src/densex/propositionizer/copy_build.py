"""Build the copy-aware student (`copy_lm.CopyPrefixLM`) from a BERT checkpoint, once.

`build_copy_lm` saves a loadable directory: every BERT weight from the checkpoint (the word
embeddings gain one row, the `[PROP]` separator, started as the embedding of "."), the new
head weights at their identity/zero start (`CopyPrefixLM.init_heads`), and the tokenizer with
`[PROP]` registered as a special token. `cached_copy_lm` builds it into
`<cache_dir>/copy_lm/<key>` atomically, keyed by the spec and the checkpoint's weight files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from densex.propositionizer.pairs import CONTENT_MARKER
from densex.propositionizer.surface import PROP_TOKEN
from densex.utils.cache import artifact_dir, content_key, ensure_built_dir, hash_file
from densex.utils.models import resolve_model

__all__ = ["build_copy_lm", "cached_copy_lm"]

BUILD_VERSION = 4  # 4: the config names the content marker's ids (coverage counts the content only)
_NOT_COPIED = {"model_type", "architectures", "transformers_version", "_name_or_path", "vocab_size"}


def build_copy_lm(
    out_dir: str | os.PathLike,
    encoder: str = "packaged:minilm",
    use_copy: bool = True,
    copy_scale: float = 10.0,
    max_length: int = 512,
    seed: int = 0,
) -> Path:
    """Save the student built from `encoder` (module docstring) with its tokenizer to
    `out_dir`; `use_copy=False` builds the plain prefix LM (the ablation)."""
    import torch
    from transformers import AutoTokenizer, BertModel

    from densex.propositionizer.copy_lm import CopyLMConfig, CopyPrefixLM

    path = resolve_model(encoder)
    tok = AutoTokenizer.from_pretrained(path, model_max_length=max_length)
    tok.add_special_tokens({"additional_special_tokens": [PROP_TOKEN]})
    base = BertModel.from_pretrained(path, add_pooling_layer=False)
    if base.config.max_position_embeddings < max_length:
        raise ValueError(
            f"{encoder}: {base.config.max_position_embeddings} positions < {max_length}"
        )
    settings = {k: v for k, v in base.config.to_dict().items() if k not in _NOT_COPIED}
    settings |= {
        # attention dropout off: with it, CPU attention falls back from the flash kernel to the
        # one that keeps every (length x length) attention map for the backward pass
        "attention_probs_dropout_prob": 0.0,
        "vocab_size": len(tok),
        "use_copy": use_copy,
        "copy_scale": copy_scale,
        "prop_token_id": tok.convert_tokens_to_ids(PROP_TOKEN),
        "content_marker_ids": tok(CONTENT_MARKER, add_special_tokens=False)["input_ids"],
        "bos_token_id": tok.cls_token_id,
        "decoder_start_token_id": tok.cls_token_id,
        "eos_token_id": tok.sep_token_id,
        "pad_token_id": tok.pad_token_id,
    }
    config = CopyLMConfig(**settings)
    torch.manual_seed(seed)
    model = CopyPrefixLM(config)
    state = base.state_dict()
    words = state["embeddings.word_embeddings.weight"]
    period = words[tok.convert_tokens_to_ids(".")]
    state["embeddings.word_embeddings.weight"] = torch.cat([words, period[None]], 0)
    missing, unexpected = model.bert.load_state_dict(state, strict=False)
    if [k for k in missing if not k.endswith("_ids")] or unexpected:
        raise RuntimeError(f"{encoder}: weights missing {missing}, unexpected {unexpected}")
    model.init_heads()
    out = Path(out_dir)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def cached_copy_lm(cache_dir: str | os.PathLike, **spec: Any) -> str:
    """`build_copy_lm(**spec)` in `<cache_dir>/copy_lm/<key>`, built once, atomically; the key
    covers the spec and the checkpoint's weight files, so changed weights rebuild."""
    path = Path(resolve_model(spec.get("encoder", "packaged:minilm")))
    files = sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin"))
    weights = [hash_file(f)[:16] for f in files] if path.is_dir() else str(path)
    key = content_key(spec=spec, weights=weights, build=BUILD_VERSION)
    out = artifact_dir(cache_dir, "copy_lm", key=key)
    manifest = {"kind": "copy_lm", "build": BUILD_VERSION, "spec": spec, "weights_sha256": weights}
    return str(ensure_built_dir(out, lambda tmp: build_copy_lm(tmp, **spec), manifest))
