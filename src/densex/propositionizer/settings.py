"""What the `propositionizer` config group says, as typed dataclasses (its schemas).

Hydra composes `conf/propositionizer/{file,model,teacher}.yaml` onto these
(`pipelines/schemas.py`), so each default is stated here once and a file names only what
differs. Every backend shares `PropositionizerSettings` (which includes the caps on untrusted
output, `parse.ParseLimits`); the seq2seq model and the LLM teacher add their own options.
The teacher's defaults are `Teacher`'s own (`tests/test_teacher.py` checks they agree).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from densex.propositionizer.parse import ParseLimits

__all__ = [
    "DECODER_VERSION",
    "decoder_key",
    "ModelSettings",
    "PropositionizerSettings",
    "TeacherSettings",
]


@dataclass
class PropositionizerSettings(ParseLimits):
    """What every backend shares: the backend (`type`: file | model | teacher), what replaces
    an output that cannot be parsed, the policy for bad passage rows, the sentencizer of the
    `sentences` fallback, and the `ParseLimits` caps (inherited fields)."""

    name: str = "model"
    type: str = "model"  # file (propositions given) | model | teacher
    fallback: str = "sentences"  # sentences | passage | empty
    on_error: str = "raise"  # bad passage rows: raise | skip (counted in the manifest)
    spacy_model: str | None = "en_core_web_lg"  # rule-based sentencizer when not installed


# ModelSettings' decoding rules that exist for the copy-aware student only (`copy_decode.py`)
COPY_STUDENT_RULES = (
    "coverage_penalty",
    "no_repeat_proposition",
    "end_penalty",
    "context_penalty",
)
# ModelSettings' decoding rules, passed to `generate` and keyed only when set (they came after
# published keys)
DECODING_RULES = ("no_repeat_ngram_size", *COPY_STUDENT_RULES)
# ModelSettings' proposition filters, applied when the outputs are parsed (`resolve.supported`)
PARSE_FILTERS = ("min_shared_words",)
# The model backend's behaviour version: bump it when a change to the code makes it write other
# tokens or propositions under the same settings (a decoding rule's arithmetic, a filter's test).
# The propositions and shard keys hold it (from 1 on: the keys of version 0, all code up to its
# introduction, stay where they were), so what older code cached is regenerated, not reused.
DECODER_VERSION = 0


def decoder_key() -> dict[str, int]:
    """What the propositions and shard keys add for `DECODER_VERSION`: nothing at 0."""
    return {"decoder": DECODER_VERSION} if DECODER_VERSION else {}


@dataclass
class ModelSettings(PropositionizerSettings):
    """The seq2seq backend (`conf/propositionizer/model.yaml`): greedy decoding, as the released
    model's card; `dtype: auto` is bfloat16 on a bf16 GPU, float32 otherwise."""

    model: str | None = None  # a hub id, a save_pretrained directory or a train.py export
    dtype: str = "auto"
    batch_size: int = 8
    max_source_length: int = 512
    max_new_tokens: int = 512
    num_beams: int = 1
    # never repeat an n-gram of this many tokens (transformers' rule of the same name); null:
    # the model's generation_config (no constraint unless the export sets one)
    no_repeat_ngram_size: int | None = None
    # the copy student only (model=minilm-copy): subtract this times each source position's
    # copy attention so far from its copy score (See et al. 2017's coverage, at decoding)
    coverage_penalty: float | None = None
    # the copy student only: never close a proposition equal to one already written
    no_repeat_proposition: bool | None = None
    # the copy student only: subtract this times the share of the sentence's content word
    # pieces not yet written from the end token's log-probability (copy_decode.end_words):
    # a sentence is not ended while much of it is unsaid
    end_penalty: float | None = None
    # the copy student only: subtract this from the copy score of every title and context
    # position (its own sentence's keep theirs): a sentence's propositions copy from it first
    context_penalty: float | None = None
    # the copy student only: a shortlist file (shortlist.py; scripts/copy_shortlist.py builds
    # it from the training pairs): the vocabulary path writes only its tokens and the batch's
    # source tokens, a cheaper step whose outputs may differ; keyed by the file's content
    shortlist: str | None = None
    # one model input per sentence (title and section as context), a passage's propositions
    # its sentences' in order (sentence_inputs.py); false: one input per passage, as the paper
    per_sentence: bool = False
    # with per_sentence: each sentence's input also carries this many earlier sentences of its
    # passage as marked, read-only context (-1: all of them; 0: none); a model trained with
    # data.context_sentences=k reads its inputs so
    context_sentences: int = 0
    # drop a proposition that shares fewer than this many content words (title words left out)
    # with the text it was written for (its sentence, per sentence): degenerate outputs that
    # copy the title over and over; 0: keep every parsed proposition
    min_shared_words: int = 0
    # the copy student's greedy: source tokens drafted and verified per step (exact: the same
    # tokens as one a step); null: copy_decode's default (0: one token a step, the fastest
    # measured; docs/propositionizer.md)
    lookahead: int | None = None
    # torch | ctranslate2 (T5/Flan-T5 only: converted once into the cache, ct2.py)
    runtime: str = "torch"
    quantization: str = "auto"  # ctranslate2 compute type: auto = int8 on CPU, bf16 on GPU
    max_batch_tokens: int = 8192  # ctranslate2 batches, in tokens
    shard_size: int = 256  # model inputs (passages, or sentences) per resumable shard


@dataclass
class TeacherSettings(PropositionizerSettings):
    """The LLM teacher (`conf/propositionizer/teacher.yaml`): `Teacher`'s arguments (`prompt` is
    its `prompt_path`; null `cache_dir`: beside the output) plus the prices per 1M tokens."""

    name: str = "teacher"
    type: str = "teacher"
    model: str | None = None  # the served model's name
    base_url: str | None = None  # null: OpenAI's; any OpenAI-compatible server
    api_key_env: str | None = "OPENAI_API_KEY"  # null: no key (a local server)
    prompt: str | None = None  # null: the paper's Figure 8 prompt
    max_concurrency: int = 8
    # our retry policy (the client's own is off): exponential back-off with jitter on
    # 429/5xx/timeouts
    max_retries: int = 6
    backoff_base: float = 1.0
    backoff_max: float = 60.0
    timeout: float = 120.0
    temperature: float = 0.0
    max_tokens: int = 1024
    # replies are cached by sha256(endpoint, model, prompt template hash, temperature +
    # max_tokens, passage source): reruns cost nothing
    cache_dir: str | None = None
    cache_namespace: str | None = None  # null: derived from base_url
    # a reply is cached only with one of these finish reasons and non-empty content; others are
    # retried like a 5xx, then fall back uncached (counted); add null for a server that never
    # reports a finish reason
    ok_finish_reasons: list[str | None] = field(
        default_factory=lambda: ["stop", "length", "eos_token", "stop_sequence"]
    )
    prices: dict[str, float] = field(default_factory=dict)  # prompt_per_1m, completion_per_1m
    seed: int | None = None  # seeds the back-off jitter (null: random)
