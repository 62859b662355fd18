"""Seq2seq backbones behind one interface: a MiniLM bert2bert next to T5, and the training loss
weighted by tokens under gradient accumulation."""

from __future__ import annotations

import json

import pytest
import pytorch_lightning as pl
import torch

from densex.propositionizer.backbone import (
    build_bert2bert,
    cached_bert2bert,
    copy_self_to_cross_attention,
    corrupt_decoder_inputs,
    end_token_id,
    lowercases,
    target_ids,
)
from densex.propositionizer.data import PropositionDataModule
from densex.propositionizer.module import PropositionizerModule


@pytest.fixture(scope="module")
def bert2bert_dir(tmp_path_factory, minilm_path):
    return build_bert2bert(tmp_path_factory.mktemp("b2b"), minilm_path, decoder_layers=1)


def test_bert2bert_loads_with_auto_classes_and_generates(bert2bert_dir):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(bert2bert_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(bert2bert_dir).eval()
    assert type(model).__name__ == "EncoderDecoderModel"
    assert (
        model.config.decoder.num_hidden_layers == 1 and model.config.encoder.num_hidden_layers == 6
    )
    assert model.generation_config.decoder_start_token_id == tok.cls_token_id
    assert model.generation_config.eos_token_id == tok.sep_token_id == end_token_id(tok)
    # the decoder's output projection is its input embedding matrix (tied)
    dec = model.decoder
    assert (
        dec.get_output_embeddings().weight.data_ptr()
        == dec.get_input_embeddings().weight.data_ptr()
    )
    # encoder weights are MiniLM's own
    from transformers import AutoModel

    minilm = AutoModel.from_pretrained(model.config.encoder._name_or_path or bert2bert_dir)
    q = model.encoder.encoder.layer[5].attention.self.query.weight
    assert torch.equal(q, minilm.encoder.layer[5].attention.self.query.weight)
    enc = tok(["Title: Rhine. Section: . Content: The Rhine is a river."], return_tensors="pt")
    out = model.generate(**enc, max_new_tokens=6, do_sample=False)
    assert out[0, 0].item() == tok.cls_token_id and 2 <= out.shape[1] <= 7


def test_targets_per_backbone(bert2bert_dir, tiny_t5):
    from transformers import AutoTokenizer

    bert = AutoTokenizer.from_pretrained(bert2bert_dir)
    ids = target_ids(bert, ['["The Rhine is a river."]'])[0]
    assert ids[0] != bert.cls_token_id and ids[-1] == bert.sep_token_id  # [CLS] is the start token
    assert bert.decode(ids, skip_special_tokens=True).replace(" ", "") == '["therhineisariver."]'
    assert lowercases(bert)
    t5 = AutoTokenizer.from_pretrained(tiny_t5, model_max_length=512)
    ids = target_ids(t5, ['["The Rhine is a river."]'])[0]
    assert ids == t5(text_target='["The Rhine is a river."]')["input_ids"]
    assert ids[-1] == t5.eos_token_id == end_token_id(t5) and not lowercases(t5)


def test_bert2bert_is_cached_by_spec(tmp_path, minilm_path, monkeypatch):
    import densex.propositionizer.backbone as backbone

    calls = []
    real = backbone.build_bert2bert
    monkeypatch.setattr(
        backbone, "build_bert2bert", lambda out, **s: calls.append(s) or real(out, **s)
    )
    a = cached_bert2bert(tmp_path, encoder=minilm_path, decoder_layers=1)
    assert cached_bert2bert(tmp_path, encoder=minilm_path, decoder_layers=1) == a
    b = cached_bert2bert(tmp_path, encoder=minilm_path, decoder_layers=2)
    assert a != b and len(calls) == 2
    assert (
        json.loads((tmp_path / "bert2bert" / a.split("/")[-1] / "manifest.json").read_text())[
            "spec"
        ]["decoder_layers"]
        == 1
    )


class _RecordingSGD(torch.optim.SGD):
    """lr 0: records the gradient the optimizer is handed, changes nothing."""

    def __init__(self, params):
        super().__init__(params, lr=0.0)
        self.seen: list[dict[str, torch.Tensor]] = []

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        grads = {}
        for group in self.param_groups:
            for i, p in enumerate(group["params"]):
                if p.grad is not None:
                    grads[i] = p.grad.detach().clone()
        self.seen.append(grads)
        return loss


class _Recording(PropositionizerModule):
    def configure_optimizers(self):
        self.opt = _RecordingSGD([p for p in self.model.parameters() if p.requires_grad])
        return self.opt


class _KeepBatches(pl.Callback):
    def __init__(self):
        self.batches = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batches.append(
            {k: batch[k].clone() for k in ("input_ids", "attention_mask", "labels")}
        )


def test_accumulated_loss_is_weighted_by_tokens(tiny_t5, tmp_path):
    """Two micro-batches with different label-token counts: the gradient the optimizer sees
    equals that of the token mean over the union (not the mean of the two batch means)."""
    pl.seed_everything(0)
    module = _Recording(str(tiny_t5), dropout=0.0)
    rows = [
        {
            "source": f"Title: T{i}. Section: . Content: {'word ' * (3 + 5 * i)}",
            "target": ["A fact." * (1 + 3 * i)],
        }
        for i in range(4)
    ]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dm = PropositionDataModule(
        format="jsonl", path=str(data), validate_on_train=True, per_device_batch_size=2
    )
    dm.set_tokenizer(module.tokenizer)
    keep = _KeepBatches()
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=1,
        accumulate_grad_batches=2,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[keep],
        default_root_dir=tmp_path,
    )
    trainer.fit(module, datamodule=dm)
    assert len(keep.batches) == 2
    counts = [int((b["labels"] != -100).sum()) for b in keep.batches]
    assert counts[0] != counts[1]  # otherwise both rules agree and the test proves nothing
    got = module.opt.seen[0]

    model = module.model
    model.zero_grad()
    total = sum(counts)
    for b in keep.batches:
        loss = model(**b).loss * (b["labels"] != -100).sum() / total
        loss.backward()
    params = [p for p in model.parameters() if p.requires_grad]
    for i, p in enumerate(params):
        if p.grad is not None:
            torch.testing.assert_close(got[i], p.grad, rtol=1e-4, atol=1e-6)
    # the old rule (mean of per-batch means) differs measurably
    model.zero_grad()
    for b in keep.batches:
        (model(**b).loss / 2).backward()
    diff = max(
        (got[i] - p.grad).abs().max().item() for i, p in enumerate(params) if p.grad is not None
    )
    assert diff > 1e-4


class _Strategy:
    def __init__(self, sent=None):
        self.sent = sent
        self.calls = 0

    def broadcast(self, obj, src=0):
        self.calls += 1
        return obj if self.sent is None else self.sent


class _Trainer:
    def __init__(self, rank: int, strategy: _Strategy):
        self.world_size, self.global_rank, self.is_global_zero = 2, rank, rank == 0
        self.sanity_checking = False
        self.strategy = strategy


@pytest.mark.parametrize("rank", [0, 1])
def test_set_f1_is_scored_once_under_ddp(tiny_t5, monkeypatch, rank):
    """Rank 0 scores the gathered predictions and broadcasts the figures; other ranks never
    load the scorer and log what rank 0 sent."""
    module = PropositionizerModule(str(tiny_t5))
    rows = [{"id": "a", "prediction": '["x."]', "target": '["x."]'}]
    sent = ({"val/set_f1": 0.25, "val/parse_rate": 1.0}, [0.25])
    strategy = _Strategy(sent=None if rank == 0 else sent)
    monkeypatch.setattr(PropositionizerModule, "trainer", _Trainer(rank, strategy))
    scored, logged = [], {}

    class _Result:
        per_passage = [{"f1": 0.25}]

        def as_dict(self, prefix):
            return {prefix + "set_f1": 0.25, prefix + "parse_rate": 1.0}

    monkeypatch.setattr(module, "score_predictions", lambda r: scored.append(r) or _Result())
    monkeypatch.setattr(module, "log_dict", lambda d, **kw: logged.update(d))
    monkeypatch.setattr(module, "log", lambda k, v, **kw: logged.update({k: v}))
    module._val_outputs = list(rows)
    module.on_validation_epoch_end()
    assert len(scored) == (1 if rank == 0 else 0) and strategy.calls == 1
    assert logged == {"val/set_f1": 0.25, "val/parse_rate": 1.0}
    assert module.last_val_predictions[0]["set_f1"] == 0.25


def test_cross_attention_from_self_attention(bert2bert_dir):
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(bert2bert_dir)
    layer = model.decoder.bert.encoder.layer[0]
    assert not torch.equal(
        layer.crossattention.self.query.weight, layer.attention.self.query.weight
    )
    assert copy_self_to_cross_attention(model.decoder) == 1
    for name, w in layer.attention.state_dict().items():
        assert torch.equal(layer.crossattention.state_dict()[name], w)
    w.add_(1.0)  # copies, not shared tensors
    assert not torch.equal(layer.crossattention.state_dict()[name], w)


def test_corrupt_decoder_inputs(bert2bert_dir):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(bert2bert_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(bert2bert_dir)
    labels = torch.tensor([target_ids(tok, ["x " * 400])[0][:300]] * 4)
    labels[0, 200:] = -100
    clean = corrupt_decoder_inputs(model, tok, labels, 0.0)
    shifted = labels[:, :-1].masked_fill(labels[:, :-1] == -100, tok.pad_token_id)
    assert (clean[:, 0] == tok.cls_token_id).all() and torch.equal(clean[:, 1:], shifted)
    torch.manual_seed(0)
    noisy = corrupt_decoder_inputs(model, tok, labels, 0.5)
    masked = noisy == tok.mask_token_id
    assert not masked[:, 0].any() and 0.4 < masked[:, 1:].float().mean() < 0.6
    assert (
        torch.equal(noisy[~masked], clean[~masked])
        and (labels[labels >= 0] != tok.mask_token_id).all()
    )
