"""A Lightning module that logs a fixed `val/set_f1` per epoch (best in the middle), like the
propositionizer: for the best-checkpoint tests. A module of its own (torch and Lightning
only), so the processes `ddp_spawn` starts import this, not the test file and what it imports."""

from __future__ import annotations

import pytorch_lightning as pl
import torch


class ScoreByEpoch(pl.LightningModule):
    """Logs `scores[epoch]` as val/set_f1: 0.7, 0.9, 0.5."""

    scores = (0.7, 0.9, 0.5)

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        pass

    def on_validation_epoch_end(self):
        self.log("val/set_f1", self.scores[self.current_epoch])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
