"""`WeightEMA`: the propositionizer's validation and export weights are a warmed-up moving
average of the trained weights (Lightning's WeightAveraging with `EMADecay`)."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch

from densex.propositionizer.callbacks import EMADecay, WeightEMA


class _Line(pl.LightningModule):
    """y = w x on fixed data; plain SGD, so each update is known."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[float] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return ((self.w * x - y) ** 2).mean()

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        self.seen.append(float(self.w.detach()))  # the live weight after this step's update

    def validation_step(self, batch, batch_idx):
        self.log("val_w", float(self.w))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_decay_warms_up_then_holds() -> None:
    ema = EMADecay(decay=0.99, warmup=10)
    assert ema.rate(0) == pytest.approx(0.1) and ema.rate(80) == pytest.approx(81 / 90)
    assert ema.rate(10_000) == 0.99
    with pytest.raises(ValueError, match="decay"):
        EMADecay(decay=1.0)


def test_validation_and_checkpoint_hold_the_average(tmp_path) -> None:
    x = torch.ones(8, 1)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, 2 * x), batch_size=1)
    model, ema = _Line(), WeightEMA(decay=0.9, warmup=2)
    trainer = pl.Trainer(
        accelerator="cpu", max_epochs=1, callbacks=[ema], logger=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
        enable_checkpointing=False, num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(model, data, data)
    rule, avg = EMADecay(0.9, 2), model.seen[0]  # the first update copies the weights
    for n, w in enumerate(model.seen[1:], start=1):
        avg += (w - avg) * (1 - rule.rate(n))
    assert float(trainer.callback_metrics["val_w"]) == pytest.approx(avg, abs=1e-6)
    assert abs(avg - model.seen[-1]) > 1e-3  # the average is not the last weight
    trainer.save_checkpoint(tmp_path / "c.ckpt")
    ckpt = torch.load(tmp_path / "c.ckpt", weights_only=True)
    assert float(ckpt["state_dict"]["w"]) == pytest.approx(avg, abs=1e-6)
    assert float(model.w) == pytest.approx(avg, abs=1e-6)  # after fit: the average
