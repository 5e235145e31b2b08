"""A real Lightning fit over a speechiter recipe that records every batch it trains on.

Imported by the tests (``fit(...)`` in process) and run as a script for the runs that need processes of
their own (a SIGKILL, Lightning's DDP strategy, whose launcher runs this file again for rank 1):

    python tests/lightning/fit.py RECIPE OUT [--epochs 2] [--every 3] [--devices 1] [--kill_at S]
        [--resume CKPT] [--name run] [--num_workers 0]

Each training step appends ``{"rank", "epoch", "step", "ids", "checksum"}`` to ``OUT/<name>.rank<r>.jsonl``
(``step``: the trainer's global step before it), flushed at once; ModelCheckpoint writes
``OUT/ckpt/step=<s>.ckpt`` every ``--every`` steps. ``--kill_at S`` SIGKILLs the process in the training step
that follows global step S (steps 1..S are recorded and trained).
"""
import argparse
import json
import os
import signal
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as a script
    sys.path.insert(0, str(REPO))

import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402

from speechiter.batch import Batch  # noqa: E402
from speechiter.dump import checksum  # noqa: E402
from speechiter.lightning import SpeechDataModule  # noqa: E402


class Recorder(pl.LightningModule):
    """A one-weight model: what it learns does not matter, which batches it sees does."""

    def __init__(self, records: Path, kill_at: int = -1):
        super().__init__()
        self.weight = torch.nn.Linear(1, 1)
        self.records, self.kill_at = records, kill_at
        self.evaluated = []  # (stage, dataloader_idx, ids, is_padding) of validation and test batches

    def training_step(self, batch, batch_idx):
        if self.global_step == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        steps = [batch] if isinstance(batch, Batch) else list(batch.values())  # a group's step: {name: batch}
        record = {"rank": self.global_rank, "epoch": self.current_epoch, "step": self.global_step,
                  "ids": [b.ids for b in steps], "checksum": [checksum(b) for b in steps],
                  "source": [b.source for b in steps]}
        with open(self.records, "a") as out:
            out.write(json.dumps(record) + "\n")
        return self.weight(steps[0]["feat"].mean(dim=(1, 2))[:, None]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.evaluated.append(("valid", 0, batch.ids, batch.is_padding))

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        self.evaluated.append(("test", dataloader_idx, batch.ids, batch.is_padding))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def trainer(out: Path, epochs: int = 2, every: int = 3, devices: int = 1, **options) -> pl.Trainer:
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=out / "ckpt", filename="{step}", every_n_train_steps=every,
                                               save_top_k=-1)
    strategy = "ddp" if devices > 1 else "auto"
    return pl.Trainer(max_epochs=epochs, accelerator="cpu", devices=devices, strategy=strategy, logger=False,
                      callbacks=[checkpoints], enable_progress_bar=False, enable_model_summary=False,
                      num_sanity_val_steps=0, **options)


def fit(recipe, out: Path, name: str = "run", epochs: int = 2, every: int = 3, devices: int = 1, kill_at: int = -1,
        resume=None, num_workers: int = 0, **settings):
    """One fit; returns (model, datamodule) after it."""
    out.mkdir(parents=True, exist_ok=True)
    datamodule = SpeechDataModule(recipe, num_workers=num_workers, **settings)
    model = Recorder(out / f"{name}.rank{int(os.environ.get('LOCAL_RANK', 0))}.jsonl", kill_at)
    trainer(out, epochs, every, devices).fit(model, datamodule=datamodule, ckpt_path=resume)
    return model, datamodule


def read_records(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe")
    parser.add_argument("out", type=Path)
    parser.add_argument("--name", default="run")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--every", type=int, default=3)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--kill_at", type=int, default=-1)
    parser.add_argument("--resume")
    parser.add_argument("--num_workers", type=int, default=0)
    args = parser.parse_args(argv)
    fit(args.recipe, args.out, args.name, args.epochs, args.every, args.devices, args.kill_at, args.resume,
        args.num_workers)


if __name__ == "__main__":
    main()
