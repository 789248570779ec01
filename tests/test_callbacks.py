"""`AverageWeights`: the weights it validates, checkpoints and leaves are the plain mean of the
weights after each step of the schedule's tail, recorded independently step by step."""

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from seqenc.callbacks import AverageWeights


class Line(pl.LightningModule):
    """y = w·x + b fitted by SGD on a fixed random set; validation records the weights it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.validated: list[torch.Tensor] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        self.validated.append(self.layer.weight.detach().clone())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Record(pl.Callback):
    """The live weights after every optimizer step (runs before the averaging callback)."""

    def __init__(self) -> None:
        self.steps: list[torch.Tensor] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.steps.append(pl_module.layer.weight.detach().clone())


def loader() -> torch.utils.data.DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.1 * torch.randn(40, 1, generator=generator)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=10)


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_average_of_the_tail_is_validated_saved_and_kept(tmp_path, share):
    torch.manual_seed(0)
    model, record = Line(), Record()
    checkpoint = ModelCheckpoint(dirpath=tmp_path, filename="last")
    trainer = pl.Trainer(
        max_epochs=4,
        callbacks=[record, AverageWeights(share=share), checkpoint],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, loader(), loader())
    steps = torch.stack(record.steps)  # 4 epochs x 4 batches
    start = int((1 - share) * len(steps))
    expected = steps[start:].mean(0) if share > 0 else steps[-1]
    torch.testing.assert_close(model.layer.weight.detach(), expected)
    saved = torch.load(checkpoint.best_model_path, weights_only=True)["state_dict"]
    torch.testing.assert_close(saved["layer.weight"], expected)
    # each epoch's validation sees the mean so far, or the live weights before the tail starts
    for epoch, seen in enumerate(model.validated[::4]):
        end = 4 * (epoch + 1)
        live = steps[end - 1]
        torch.testing.assert_close(
            seen, steps[start:end].mean(0) if end > start and share else live
        )
