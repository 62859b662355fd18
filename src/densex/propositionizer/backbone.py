"""What differs between seq2seq backbones, behind one interface.

A propositionizer is any checkpoint `AutoModelForSeq2SeqLM` loads: a (Flan-)T5, or a BERT-style
`EncoderDecoderModel` warm-started from an encoder checkpoint (`build_bert2bert`). The training
data (`data.py`), the Lightning module (`module.py`) and generation (`generator.py`) call only
the functions here for what the two families do differently: how targets are tokenised (T5
adds `</s>`; BERT adds `[CLS] ... [SEP]`, and the `[CLS]` must not be a label because it is the
decoder start token), which token ends a sequence (`eos` or `[SEP]`), and whether the tokenizer
lower-cases (an uncased BERT writes lower-cased propositions).

The copy-aware student (`copy_lm.py`, built by `copy_build.py`) is the third family. Its
tokenizer carries the `[PROP]` token (`proposition_separator`), and that is what marks it: its
targets are the propositions joined by `[PROP]` instead of a JSON string (`target_ids`), and its
generated ids become the JSON list through the source's surface forms (`output_decoder`).
`load_seq2seq` loads any of the three.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from densex.propositionizer.surface import PROP_TOKEN, decode_propositions
from densex.utils.cache import artifact_dir, content_key, ensure_built_dir, hash_file
from densex.utils.logging import get_logger
from densex.utils.models import MODEL_LOAD_LOCK, resolve_model

log = get_logger(__name__)


def end_token_id(tokenizer: Any) -> int | None:
    """The token that closes a sequence: `eos` (T5, BART), else `[SEP]` (BERT)."""
    eos = getattr(tokenizer, "eos_token_id", None)
    return eos if eos is not None else getattr(tokenizer, "sep_token_id", None)


def start_token_id(tokenizer: Any) -> int | None:
    """The token a BERT-style tokenizer puts first (`[CLS]`), None for T5-style ones."""
    probe = tokenizer("a", add_special_tokens=True)["input_ids"]
    first = probe[0] if probe else None
    specials = {getattr(tokenizer, "bos_token_id", None), getattr(tokenizer, "cls_token_id", None)}
    return first if first is not None and first in specials - {None} else None


def proposition_separator(tokenizer: Any) -> int | None:
    """The id of the `[PROP]` separator of a copy-aware student's tokenizer, else None."""
    vocab = tokenizer.get_vocab()
    return vocab.get(PROP_TOKEN)


def load_seq2seq(path: str | os.PathLike, **kwargs: Any) -> Any:
    """`AutoModelForSeq2SeqLM.from_pretrained(path, **kwargs)`, the copy-aware student's
    classes registered first (a T5, a bert2bert or a `copy_lm` export)."""
    from transformers import AutoModelForSeq2SeqLM

    import densex.propositionizer.copy_lm  # noqa: F401  (registers the Auto classes)

    with MODEL_LOAD_LOCK:  # transformers' loading patches process-wide state (utils.models)
        return AutoModelForSeq2SeqLM.from_pretrained(path, **kwargs)


def token_nll(out: Any) -> Any:
    """The token-mean NLL of a model output: `out.nll` where the model adds another term to
    its loss (the copy student's coverage loss), else `out.loss`."""
    nll = getattr(out, "nll", None)
    return out.loss if nll is None else nll


def checked_config_overrides(path: str, overrides: dict[str, Any] | None) -> dict[str, Any]:
    """`overrides` for `from_pretrained(path, **overrides)`, each an existing attribute of the
    model's config (transformers hands any other key to the model's constructor, which fails
    far from the config key); a ValueError names the key otherwise."""
    if not overrides:
        return {}
    from transformers import AutoConfig

    import densex.propositionizer.copy_lm  # noqa: F401  (registers the copy student's config)

    config = AutoConfig.from_pretrained(path)
    unknown = sorted(k for k in overrides if not hasattr(config, k))
    if unknown:
        raise ValueError(
            f"model.config_overrides: {unknown} are not attributes of {type(config).__name__} "
            f"({path}); e.g. coverage_loss exists for model=minilm-copy only"
        )
    return dict(overrides)


def output_decoder(tokenizer: Any) -> Callable[[Any, Sequence[str]], list[str]] | None:
    """How generated ids become text for this tokenizer's family: for the copy-aware student,
    `(ids, sources) -> JSON lists` in the sources' surface forms (`surface.py`); None (the
    tokenizer's own `batch_decode`) for the others."""
    separator = proposition_separator(tokenizer)
    if separator is None:
        return None
    return lambda ids, sources: decode_propositions(tokenizer, ids, sources, separator)


def target_ids(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Label token ids of `texts` (JSON lists of propositions): the tokenizer's own special
    tokens, minus a leading start token (`[CLS]`), which the model prepends itself as
    `decoder_start_token_id`. For the copy-aware student: the propositions' tokens joined by
    `[PROP]`, then `[SEP]`."""
    separator = proposition_separator(tokenizer)
    if separator is not None:
        return _separated_ids(tokenizer, texts, separator)
    ids = tokenizer(text_target=list(texts), add_special_tokens=True)["input_ids"]
    start = start_token_id(tokenizer)
    if start is None:
        return ids
    return [x[1:] if x and x[0] == start else x for x in ids]


def _separated_ids(tokenizer: Any, texts: Sequence[str], separator: int) -> list[list[int]]:
    lists = [json.loads(t) for t in texts]
    flat = [p for props in lists for p in props]
    pieces = iter(tokenizer(flat, add_special_tokens=False)["input_ids"]) if flat else iter(())
    out = []
    for props in lists:
        ids: list[int] = []
        for k in range(len(props)):
            ids += ([separator] if k else []) + next(pieces)
        out.append(ids + [tokenizer.sep_token_id])
    return out


def truncate_ids(ids: list[int], max_len: int, end: int | None) -> list[int]:
    """Cut to `max_len` tokens keeping the closing end token, as tokenizers' truncation does."""
    if len(ids) <= max_len:
        return ids
    return ids[: max_len - 1] + [end] if end is not None else ids[:max_len]


def corrupt_decoder_inputs(model: Any, tokenizer: Any, labels: Any, rate: float) -> Any:
    """Teacher-forcing inputs for `labels` (the model's own right shift) with a share `rate` of
    them replaced by the mask token (`[MASK]`, else `unk`): "word dropout", which keeps a
    decoder from learning to ignore its encoder (Bowman et al. 2016). The start token stays."""
    import torch

    inputs = model.prepare_decoder_input_ids_from_labels(labels=labels)
    if rate <= 0:
        return inputs
    mask_id = (
        tokenizer.mask_token_id if tokenizer.mask_token_id is not None else tokenizer.unk_token_id
    )
    drop = torch.rand(inputs.shape, device=inputs.device) < rate
    drop[:, 0] = False
    return inputs.masked_fill(drop, mask_id)


def lowercases(tokenizer: Any) -> bool:
    """Whether the tokenizer lower-cases its input (so generated text comes out lower-cased)."""
    probe = "Ab"
    return tokenizer.decode(tokenizer(probe, add_special_tokens=False)["input_ids"]) == "ab"


def build_bert2bert(
    out_dir: str | os.PathLike,
    encoder: str = "packaged:minilm",
    decoder: str | None = None,
    decoder_layers: int | None = None,
    max_length: int = 512,
    seed: int = 0,
    cross_attention_init: str = "random",
) -> Path:
    """Save a transformers `EncoderDecoderModel` warm-started from `encoder` (and `decoder`,
    default the same checkpoint; its first `decoder_layers` layers) with its tokenizer to
    `out_dir`. Cross-attention and the LM-head transform are new; the decoder's input and
    output embeddings are tied. `cross_attention_init`: `random` (transformers' default) or
    `self` (each layer's cross-attention starts as a copy of its pretrained self-attention).
    Start/end/pad ids are set in the config and the generation config, so
    `AutoModelForSeq2SeqLM.from_pretrained(out_dir).generate(...)` works as is."""
    import torch
    from transformers import AutoTokenizer, EncoderDecoderModel

    out = Path(out_dir)
    enc, dec = resolve_model(encoder), resolve_model(decoder or encoder)
    tok = AutoTokenizer.from_pretrained(enc, model_max_length=max_length)
    torch.manual_seed(seed)
    extra = {} if decoder_layers is None else {"decoder_num_hidden_layers": int(decoder_layers)}
    model = EncoderDecoderModel.from_encoder_decoder_pretrained(enc, dec, **extra)
    if cross_attention_init == "self":
        copy_self_to_cross_attention(model.decoder)
    elif cross_attention_init != "random":
        raise ValueError(f"cross_attention_init must be random|self, got {cross_attention_init!r}")
    ids = {
        "decoder_start_token_id": tok.cls_token_id,
        "bos_token_id": tok.cls_token_id,
        "eos_token_id": tok.sep_token_id,
        "pad_token_id": tok.pad_token_id,
    }
    for key, value in ids.items():
        setattr(model.config, key, value)
        setattr(model.generation_config, key, value)
    model.config.vocab_size = model.config.decoder.vocab_size
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def copy_self_to_cross_attention(decoder: Any) -> int:
    """Initialise every BERT decoder layer's cross-attention (query/key/value, output projection
    and LayerNorm) from the same layer's pretrained self-attention; returns the layers done."""
    import torch

    layers = decoder.bert.encoder.layer
    with torch.no_grad():
        for layer in layers:
            src, dst = layer.attention.state_dict(), layer.crossattention.state_dict()
            layer.crossattention.load_state_dict({k: src[k].clone() for k in dst})
    return len(layers)


def cached_bert2bert(cache_dir: str | os.PathLike, **spec: Any) -> str:
    """`build_bert2bert(**spec)` in `<cache_dir>/bert2bert/<key>`, built once, atomically; the
    key covers the spec and the encoder/decoder weight files, so changed weights rebuild."""

    weights = {}
    for role in ("encoder", "decoder"):
        name = spec.get(role) or spec.get("encoder", "packaged:minilm")
        path = Path(resolve_model(name))
        files = sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin"))
        weights[role] = [hash_file(f)[:16] for f in files] if path.is_dir() else name
    key = content_key(spec=spec, weights=weights)
    out = artifact_dir(cache_dir, "bert2bert", key=key)
    manifest = {"kind": "bert2bert", "spec": spec, "weights_sha256": weights}
    built = ensure_built_dir(out, lambda tmp: build_bert2bert(tmp, **spec), manifest)
    return str(built)
