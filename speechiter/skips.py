"""Skipped utterances as a loader sees them: counted per epoch, warned about once, a flood made an error.

The worker side (what is skipped, and why) is NOTE [ Skipped utterances ] in
speechiter/dataset/bad_audio.py.

# NOTE [ Empty steps ]
A batch whose every utterance was skipped is a step with no rows. It keeps its
place: ``loader.step`` counts it, a state saved after the next batch is past
it, and a resume from any step gives the same batches. A loader does not yield
it (``model(**batch)`` would get no keys): a training loop sees one batch
fewer, and ``loader.step`` tells the plan's step. A group's step leaves that
iterator out of its ``{name: batch}``, and is not yielded when every iterator's
batch is empty. With ``keep_empty`` (the command line sets it) the loader and
the group yield it as it is, a :class:`speechiter.batch.Batch` with no keys, no
ids and the skipped ones in ``batch.skipped``, so that ``--dump_batches`` and
``--report`` record the step; a training loop under torchrun needs it too (each
rank loads its own share, and a rank that yielded one step fewer would leave
the others' collective calls waiting).

# NOTE [ Too many skipped ]
``max_bad_fraction`` bounds the utterances an epoch may skip: more than that
fraction of the epoch's utterances (rounded up, so at least one when it is
above 0) is a DataError naming the count and the first ids with their reasons.
The count is kept by the loader, over the steps it ran: a run resumed within an
epoch counts from its resume point. Each loader that skipped anything warns
once, at its end (or when it is left), with the count and the first ids.
"""
import warnings
from typing import Any, List, Tuple

from speechiter.batch import Batch
from speechiter.dataset.bad_audio import MAX_BAD_FRACTION, allowed_skips
from speechiter.errors import DataError

#: skipped ids named in the warning and the error (all of them are in batch.skipped)
NAMED = 3


class SkippedAudioWarning(UserWarning):
    """A loader skipped utterances that could not be read (NOTE [ Too many skipped ]); the command line shows
    it as one line, as every warning (NOTE [ One line per problem ] in speechiter/messages.py)."""


def is_empty(batch: Any) -> bool:
    """Whether ``batch`` is a step whose every utterance was skipped (NOTE [ Empty steps ])."""
    return isinstance(batch, Batch) and not batch.ids and bool(batch.skipped)


def max_bad_fraction(iterator) -> float:
    """The iterator's ``max_bad_fraction``; a mix's is the smallest of its corpora that skip."""
    corpora = getattr(iterator, "iterators", None)
    if corpora:
        skipping = [corpus for corpus in corpora.values() if getattr(corpus.dataset, "on_bad_audio", "") == "skip"]
        return min((max_bad_fraction(corpus) for corpus in skipping), default=MAX_BAD_FRACTION)
    return getattr(iterator.dataset, "max_bad_fraction", MAX_BAD_FRACTION)


class SkipLog:
    """The utterances one loader skipped (NOTE [ Too many skipped ])."""

    def __init__(self, loader):
        self.loader = loader
        self.count = 0
        self.empty_steps = 0
        self.first: List[Tuple[str, str]] = []
        self._allowed = None

    def add(self, batch: Any) -> None:
        """Count ``batch``'s skipped utterances; a DataError when the epoch has skipped too many."""
        skipped = getattr(batch, "skipped", None)
        if not skipped:
            return
        self.count += len(skipped)
        self.empty_steps += not batch.ids
        self.first.extend(skipped[:NAMED - len(self.first)])
        if self._allowed is None:
            self._allowed = allowed_skips(max_bad_fraction(self.loader.iterator), self.loader.epoch_utterances())
        if self.count > self._allowed:
            fraction = max_bad_fraction(self.loader.iterator)
            raise DataError(f"{self._where()}: {self.count} utterances could not be read, more than "
                            f"max_bad_fraction {fraction:g} of the epoch's {self.loader.epoch_utterances()} allows "
                            f"({self._allowed}); first: {self._named()}. Fix or remove them, or raise "
                            f"max_bad_fraction in the dataset_conf")

    def warn(self) -> None:
        """One warning line with the count, if anything was skipped."""
        if not self.count:
            return
        empty = f", {self.empty_steps} step(s) left with no rows (not yielded)" if self.empty_steps else ""
        warnings.warn(f"{self._where()}: skipped {self.count} utterance(s) that could not be read "
                      f"(on_bad_audio: skip){empty}; first: {self._named()}", SkippedAudioWarning, stacklevel=3)

    def _where(self) -> str:
        return f"{self.loader.iterator.name} epoch {self.loader.epoch}"

    def _named(self) -> str:
        more = f" and {self.count - len(self.first)} more" if self.count > len(self.first) else ""
        return "; ".join(reason if uid in reason else f"{uid}: {reason}" for uid, reason in self.first) + more
