"""A tiny T5 (random weights + a sentencepiece vocabulary trained on the fly).

Tests, CI and `model=tiny` need a real seq2seq model that trains in seconds on a CPU and
never touches the hub. Building it takes under a second.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterable
from pathlib import Path

from densex.utils.cache import artifact_dir, content_key, ensure_built_dir

_DEFAULT_TEXT = (
    "Title: Eostre. Section: Theories and interpretations. Content: Eostre is a goddess. "
    '["Eostre is a goddess.", "The word Easter comes from Eostre."] '
    "The 1973 oil crisis began in October 1973 when OAPEC proclaimed an oil embargo. "
    "Propositions are atomic, self-contained facts expressed in natural language. "
    '{}[],.:;!?"0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ'
)


def build_tiny_t5(
    out_dir: str | os.PathLike,
    texts: Iterable[str] = (),
    vocab_size: int = 400,
    d_model: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    d_ff: int = 128,
    model_max_length: int = 512,
    seed: int = 0,
) -> Path:
    """Write a tiny T5ForConditionalGeneration and its tokenizer to `out_dir` and return it.

    The tokenizer is loaded back with `from_pretrained(dir)` (transformers 5 ignores
    `T5Tokenizer(vocab_file=...)`), with `model_max_length` set explicitly.
    """
    import torch  # lazy, like transformers: only a build needs it
    from transformers import T5Config, T5ForConditionalGeneration  # lazy: seconds to import

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = _train_tokenizer(out, texts, vocab_size, model_max_length)
    config = T5Config(
        vocab_size=len(tok),
        d_model=d_model,
        d_kv=d_model // num_heads,
        d_ff=d_ff,
        num_layers=num_layers,
        num_decoder_layers=num_layers,
        num_heads=num_heads,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.pad_token_id,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
    )
    # the weights come from `seed` alone, and building leaves the caller's generator as it was:
    # a run that builds the model and one that finds it cached draw the same random numbers
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = T5ForConditionalGeneration(config)
    model.save_pretrained(str(out))
    return out


def _train_tokenizer(out: Path, texts: Iterable[str], vocab_size: int, model_max_length: int):
    """A unigram sentencepiece vocabulary trained on `texts` (plus a fixed sample), written to
    `out` as a T5 tokenizer; the tokenizer loaded back from there."""
    import sentencepiece as spm  # lazy: only a build needs it
    from transformers import T5Tokenizer  # lazy: seconds to import

    corpus = [t for t in texts if t and t.strip()] or []
    corpus = corpus + [_DEFAULT_TEXT] * 3
    model_buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
        model_writer=model_buf,
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        byte_fallback=True,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        hard_vocab_limit=False,
        minloglevel=2,
        num_threads=1,
    )
    (out / "spiece.model").write_bytes(model_buf.getvalue())
    tok = T5Tokenizer.from_pretrained(
        str(out), model_max_length=model_max_length, extra_ids=0, legacy=False
    )
    tok.save_pretrained(str(out))
    return tok


def ensure_tiny_t5(
    out_dir: str | os.PathLike,
    texts: Iterable[str] = (),
    manifest: dict | None = None,
    **spec,
) -> Path:
    """`out_dir` holding a tiny T5 (`build_tiny_t5(texts, **spec)`), built once, atomically
    (`densex.utils.cache.ensure_built_dir`); `manifest` (if given) is written beside it."""

    texts = list(texts)
    return ensure_built_dir(out_dir, lambda tmp: build_tiny_t5(tmp, texts=texts, **spec), manifest)


def cached_tiny_t5(cache_dir: str | os.PathLike, texts: Iterable[str] = (), **spec) -> Path:
    """A tiny T5 in `<cache_dir>/tiny_t5/<key>`, keyed by the texts' hash and the build spec
    (`ensure_tiny_t5`: built once, atomically, with a manifest)."""
    texts = list(texts)
    h = hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()
    out = artifact_dir(cache_dir, "tiny_t5", key=content_key(texts=h, **spec))
    manifest = {"kind": "tiny_t5", "texts_sha256": h, "n_texts": len(texts), **spec}
    return ensure_tiny_t5(out, texts, manifest=manifest, **spec)
