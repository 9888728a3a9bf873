"""A toy LightningModule whose validation metric ``v`` follows a script: the callbacks that watch a metric
(early stopping and its report) are tested on real Lightning loops in a second, without a captioner."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

BATCHES = 6  # training batches per epoch


class ScoredModule(pl.LightningModule):
    """Logs ``v`` = the next of ``values`` at each validation's end; ``validations`` lists (epoch, step)."""

    def __init__(self, values: list[float]) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.values, self.validations = values, []

    def training_step(self, batch, batch_idx):
        return ((self.w - batch[0].mean()) ** 2).sum()

    def validation_step(self, batch, batch_idx):
        return None

    def on_validation_epoch_end(self):
        if self.trainer.sanity_checking:
            return
        self.validations.append((self.trainer.current_epoch, self.trainer.global_step))
        self.log("v", self.values[len(self.validations) - 1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(BATCHES, 1)), batch_size=1)

    def val_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(2, 1)), batch_size=1)
