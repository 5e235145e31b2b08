"""Lightning: a LightningDataModule over a data_cfg, whose train loader resumes exactly from Lightning's checkpoints.

    from speechiter.lightning import SpeechDataModule
    datamodule = SpeechDataModule("recipes/demo/asr.yaml", num_workers=2)
    trainer.fit(model, datamodule=datamodule)               # trainer.fit(..., ckpt_path=...) resumes mid-epoch

SpeechDataModule needs the ``lightning`` extra (``pip install 'speechiter[lightning]'``): the ``lightning``
package, or ``pytorch_lightning`` alone; it is imported when SpeechDataModule is first named, so the loaders
here import without it. See handbook.md, "Lightning".

# NOTE [ Lightning's loops ]
What Lightning 2.x does with a loader that is not a torch DataLoader (lightning/pytorch/loops/fit_loop.py,
training_epoch_loop.py, fetchers.py, utilities/combined_loader.py), and what follows here:
- It asks ``train_dataloader()`` once per fit (again only with ``reload_dataloaders_every_n_epochs``, which
  gets the same EpochLoader back) and calls ``iter()`` on it once per epoch. It leaves an object that is not
  a DataLoader as it is: no DistributedSampler (``use_distributed_sampler`` does not apply), no
  worker_init_fn. So the ranks come from the trainer: :meth:`setup` gives ``trainer.global_rank`` and
  ``trainer.world_size`` to build_iterators, and ngpu defaults to the world size (SpeeChain's runner).
- With ``len()`` known its fetcher reads no batch ahead, so whenever a checkpoint is saved (ModelCheckpoint
  every n steps, at validation, at an epoch's end) the loader has given exactly the batches trained on.
- A loader with ``state_dict()`` / ``load_state_dict()`` is "stateful": the fit loop saves its state in every
  checkpoint (``loops.fit_loop.state_dict.combined_loader``) and on ``fit(ckpt_path=...)`` loads it before
  its first ``iter()``. So EpochLoader behaves as torchdata's StatefulDataLoader: each pass is the next
  epoch, except the first after a state is loaded (or the very first), which continues from that state; a
  state at an epoch's end continues with the next epoch. A pass begins at its first ``next()``: Lightning
  calls ``iter()`` once more, to check that the loader is iterable (``_check_dataloader_iterable``).
- ``len()`` is the whole epoch's steps, also when it resumes inside one: Lightning counts the steps done in its
  own progress and ends the epoch at ``len()``.
- ``batch_to_device`` rebuilds dicts, which would drop a Batch's attributes (ids, meta, ...):
  ``transfer_batch_to_device`` here keeps them.
"""
import copy
import functools
import os
from typing import Any, Callable, Dict, List, Optional

from speechiter.batch import Batch
from speechiter.build import build_iterators, close_all
from speechiter.config import GROUPS, load_config
from speechiter.errors import ConfigError
from speechiter.group import GroupLoader
from speechiter.state import check_changes

INSTALL_HINT = "pip install 'speechiter[lightning]'"
#: the data_cfg groups each stage of a Trainer uses
STAGE_GROUPS = {"fit": ("train", "valid"), "validate": ("valid",), "test": ("test",)}
GROUP_STAGE = {"train": "fit", "valid": "validate", "test": "test"}
#: build_iterators settings the trainer decides
FROM_TRAINER = ("rank", "world_size", "distributed")


def import_lightning():
    """``lightning.pytorch``, else ``pytorch_lightning``; an ImportError of one line that says what to install."""
    try:
        import lightning.pytorch as pl
    except ImportError as first:
        try:
            import pytorch_lightning as pl
        except ImportError:
            raise ImportError(f"speechiter.lightning needs Lightning, which cannot be imported ({first}): "
                              f"{INSTALL_HINT}", name="lightning") from None
    return pl


class _Steps:
    """Passes over a group's steps through GroupLoaders; a lone iterator's step is its batch.

    A pass starts at its first ``next()``, not at ``iter()`` (Lightning calls ``iter()`` once more to check
    that a loader is iterable). Starting a pass closes the one before (Lightning may leave a pass unfinished:
    the sanity check, ``limit_*_batches``), so an Iterator's engine never runs two epochs at once."""

    def __init__(self, group):
        self.group = group
        self._running = None

    def _run(self, start: Callable[[], GroupLoader]):
        self.close()
        self._running = self._pass(start)
        return self._running

    @staticmethod
    def _pass(start: Callable[[], GroupLoader]):
        for step in start():
            yield step[None] if None in step else step

    def close(self):
        if self._running is not None:
            self._running.close()
            self._running = None


class EpochLoader(_Steps):
    """A train group's batches, epoch after epoch; each pass is one epoch (see NOTE [ Lightning's loops ]).

    ``state_dict()`` / ``load_state_dict()``: the group's state (speechiter.state.GroupState as a dict);
    ``allow_changes``: what a loaded state may find changed (GroupLoader.load_state)."""

    def __init__(self, group, epoch: int = 1, allow_changes=()):
        super().__init__(group)
        self.allow_changes = allow_changes
        self._loader = GroupLoader(group, epoch)
        self._continues = True  # the next pass continues from _loader's position

    @property
    def epoch(self) -> int:
        return self._loader.epoch

    @property
    def step(self) -> int:
        """Steps of the current epoch given so far."""
        return self._loader.step

    def __len__(self) -> int:
        return self._loader.steps

    def __iter__(self):
        return self._run(self._next_epoch)

    def _next_epoch(self) -> GroupLoader:
        if not self._continues or self._loader.step >= self._loader.steps:
            self._loader = GroupLoader(self.group, self._loader.epoch + 1)
        self._continues = False
        return self._loader

    def state_dict(self) -> Dict[str, Any]:
        return self._loader.state_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from ``state`` in the next pass; a ConfigError if it belongs to another setup."""
        loader = GroupLoader(self.group)
        loader.load_state_dict(state, self.allow_changes)
        self.close()
        self._loader, self._continues = loader, True


class EvalLoader(_Steps):
    """A valid group or a test set: each pass is the whole of it, at the epoch ``epoch_of()`` gives."""

    def __init__(self, group, epoch_of: Callable[[], int] = lambda: 1):
        super().__init__(group)
        self.epoch_of = epoch_of

    def __len__(self) -> int:
        return GroupLoader(self.group, self.epoch_of()).steps

    def __iter__(self):
        return self._run(lambda: GroupLoader(self.group, self.epoch_of(), prefetch_next=False))


class _SpeechData:
    """A LightningDataModule over a data_cfg (the body of SpeechDataModule; see :func:`datamodule_class`).

    ``train_dataloader()`` is an :class:`EpochLoader` whose state Lightning keeps in its checkpoints, so
    ``Trainer.fit(ckpt_path=...)`` continues with the batches an uninterrupted run would have had;
    ``val_dataloader()`` an :class:`EvalLoader`, ``test_dataloader()`` one per test set (``test_sets``).
    """

    def __init__(self, data_cfg, seed: Optional[int] = None, num_workers: Optional[int] = None, root=None,
                 overrides=(), resume_changes=(), **settings):
        """``data_cfg``: a recipe's path (loaded with ``overrides``, ``--set`` strings) or a data_cfg dict
        (relative paths against ``root``; see speechiter.build_iterators). ``seed``, ``num_workers`` and
        ``settings`` (engine, thread_type, out_type, ngpu, ...) go to build_iterators; the rank and the world
        size come from the trainer. ``resume_changes=["mix"]``: a checkpoint's loader state resumes under a
        changed mix (NOTE [ Changed mix ] in speechiter/iterator/mix_changes.py)."""
        super().__init__()
        self.resume_changes = check_changes(resume_changes, "resume_changes")
        taken = sorted(set(settings) & set(FROM_TRAINER))
        if taken:
            raise TypeError(f"{', '.join(taken)}: set by the trainer (its global_rank and world_size), not here")
        if isinstance(data_cfg, (str, os.PathLike)):
            data_cfg = load_config(data_cfg, overrides)
        elif overrides:
            raise TypeError("overrides apply to a recipe file; edit the dict instead")
        self.data_cfg = data_cfg
        self.seed, self.num_workers, self.root, self.settings = seed, num_workers, root, settings
        self.iterators: Dict[str, Any] = {}  # build_iterators' result, the groups set up so far
        self._loaders: Dict[str, Any] = {}  # the loaders handed to the trainer, by group

    # --- building ------------------------------------------------------------------
    def _rank(self):
        trainer = getattr(self, "trainer", None)
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def setup(self, stage: Optional[str] = None) -> None:
        """Build the iterators of ``stage``'s groups (every group for None) on this rank."""
        wanted = [group for group in STAGE_GROUPS.get(stage, GROUPS)
                  if group in self.data_cfg and group not in self.iterators]
        if not wanted:
            return
        rank, world_size = self._rank()
        settings = dict(self.settings)
        if "ngpu" not in getattr(self.data_cfg, "settings", {}):
            settings.setdefault("ngpu", world_size)
        self.iterators.update(build_iterators(self.data_cfg, seed=self.seed, num_workers=self.num_workers,
                                              groups=wanted, root=self.root, rank=rank, world_size=world_size,
                                              **settings))

    def teardown(self, stage: Optional[str] = None) -> None:
        """Stop the workers of ``stage``'s groups (every group for None); setup() builds them again."""
        for group in STAGE_GROUPS.get(stage, GROUPS):
            for loader in self._loaders.pop(group, []):
                loader.close()
            if group in self.iterators:
                close_all({group: self.iterators.pop(group)})

    def _group(self, group: str):
        if group not in self.iterators:
            self.setup(GROUP_STAGE[group])
        if group not in self.iterators:
            raise ConfigError("data_cfg", f"has no {group} group (it has {', '.join(self.data_cfg)})")
        return self.iterators[group]

    def _epoch(self) -> int:
        trainer = getattr(self, "trainer", None)
        return trainer.current_epoch + 1 if trainer is not None else 1

    # --- the loaders -----------------------------------------------------------------
    def train_dataloader(self) -> EpochLoader:
        """The train group's EpochLoader; the same one on every call of a fit."""
        if "train" not in self._loaders:
            self._loaders["train"] = [EpochLoader(self._group("train"), allow_changes=self.resume_changes)]
        return self._loaders["train"][0]

    def val_dataloader(self) -> EvalLoader:
        """The valid group, at the trainer's epoch."""
        if "valid" not in self._loaders:
            self._loaders["valid"] = [EvalLoader(self._group("valid"), self._epoch)]
        return self._loaders["valid"][0]

    def test_dataloader(self) -> List[EvalLoader]:
        """One loader per test set, in the data_cfg's order (``dataloader_idx`` i is ``test_sets[i]``)."""
        if "test" not in self._loaders:
            self._loaders["test"] = [EvalLoader(value) for value in self._group("test").values()]
        return list(self._loaders["test"])

    @property
    def test_sets(self) -> List[str]:
        """The test sets' names, in the order of :meth:`test_dataloader`."""
        return list(self._group("test"))

    def transfer_batch_to_device(self, batch: Any, device, dataloader_idx: int) -> Any:
        """Lightning's transfer, keeping a Batch's attributes (``ids``, ``meta``, ``is_padding``, ``source``)."""
        if isinstance(batch, Batch):
            moved = copy.copy(batch)
            for key, value in batch.items():
                moved[key] = super().transfer_batch_to_device(value, device, dataloader_idx)
            return moved
        if type(batch) is dict and any(isinstance(value, Batch) for value in batch.values()):  # a group's step
            return {name: self.transfer_batch_to_device(value, device, dataloader_idx)
                    for name, value in batch.items()}
        return super().transfer_batch_to_device(batch, device, dataloader_idx)


def datamodule_class(pl=None) -> type:
    """SpeechDataModule on ``pl``'s LightningDataModule (``lightning.pytorch`` or ``pytorch_lightning``: a
    Trainer takes the datamodules of its own package); by default the package :func:`import_lightning` finds."""
    return _datamodule_class(import_lightning() if pl is None else pl)


@functools.lru_cache(maxsize=None)
def _datamodule_class(pl) -> type:
    return type("SpeechDataModule", (_SpeechData, pl.LightningDataModule),
                {"__module__": __name__, "__doc__": _SpeechData.__doc__})


def __getattr__(name):
    if name == "SpeechDataModule":  # Lightning is imported here, on first use (see the module's docstring)
        return datamodule_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
