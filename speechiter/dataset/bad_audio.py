"""``on_bad_audio``: what a Dataset does with an utterance it cannot read.

# NOTE [ Skipped utterances ]
``on_bad_audio: error`` (the default) stops the run at the first utterance
whose data cannot be read, as before. ``on_bad_audio: skip`` leaves that
utterance out of its batch instead: any input error (a DataError) raised while
its row is read — a missing, unreadable, truncated, corrupt or empty audio or
feature file, a piped command that fails, a length file it disagrees with, a
store that still fails after its retries — drops the row, and the batch is
collated from the rows that remain (so its padding and ``*_len`` arrays are
those of the remaining rows). Errors that are not about one utterance's data
(a bug in a hook, a batch whose rows cannot be collated together) still stop
the run.

The decision is made in the worker that builds the batch, from the batch's
data alone, so the same utterances are skipped for any number of workers,
engine, thread or process workers, and resume point (a store failure is the
exception: whether a store fails is not a function of the plan). The batch
tells the main process which ids it left out, and why, under
:data:`speechiter.batch.SKIPPED_KEY`; the loader takes them out of
``batch.ids`` (and of ``batch.meta`` and ``batch.is_padding``) and puts them in
``batch.skipped`` (NOTE [ Per-row attributes ] in speechiter/batch.py).

A batch never takes rows from another batch to make up for the lost ones, so
every step keeps its number and its utterances. A batch that loses every row
still counts as a step (``loader.step``, states and resumes see it) but is not
yielded (see NOTE [ Empty steps ] in speechiter/skips.py). ``max_bad_fraction``
turns a flood (a wrong path, a store that is down) into an error:
speechiter/skips.py counts the skipped utterances of each epoch.

These options change what is read, never the plan, so they are left out of
the plan's fingerprint: a run stopped by a bad file resumes with
``on_bad_audio: skip``.
"""
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from speechiter.checks import check_choice, check_number
from speechiter.errors import ConfigError, DataError

#: the values of ``on_bad_audio``
ON_BAD_AUDIO = ("error", "skip")
#: the default ``max_bad_fraction``: one utterance in a thousand per epoch
MAX_BAD_FRACTION = 0.001
#: the dataset_conf options of this module: how data is read, not which batches there are
READING_OPTIONS = ("on_bad_audio", "max_bad_fraction")


def check_options(on_bad_audio: Any, max_bad_fraction: Any) -> Tuple[str, float]:
    """The checked ``(on_bad_audio, max_bad_fraction)``; ConfigError naming the option otherwise."""
    on_bad_audio = check_choice(on_bad_audio, "on_bad_audio", ON_BAD_AUDIO)
    fraction = check_number(max_bad_fraction, "max_bad_fraction", minimum=0)
    if fraction > 1:
        raise ConfigError("max_bad_fraction", f"expected a fraction of an epoch's utterances in [0, 1], "
                                              f"got {max_bad_fraction!r}")
    return on_bad_audio, float(fraction)


def plan_conf(dataset_conf: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """``dataset_conf`` without the reading options (what the plan's fingerprint counts; NOTE [ Skipped
    utterances ])."""
    if not dataset_conf or not any(key in dataset_conf for key in READING_OPTIONS):
        return dataset_conf
    return {key: value for key, value in dataset_conf.items() if key not in READING_OPTIONS}


def allowed_skips(max_bad_fraction: float, utterances: int) -> int:
    """The most utterances an epoch of ``utterances`` may skip: ``max_bad_fraction`` of them, rounded up."""
    return math.ceil(round(max_bad_fraction * utterances, 9))


def read_rows(dataset, rows: Sequence[str]) -> Tuple[List[str], List[Dict[str, Any]], List[List[str]]]:
    """``(rows kept, their items, [[id, reason], ...] skipped)`` of one batch: ``dataset[uid]`` of each row.

    Under ``on_bad_audio: skip`` a row whose read raises a DataError is left out, with every other row of
    the same id (its other views); each skipped id is listed once, in batch order. See NOTE [ Skipped
    utterances ].
    """
    if getattr(dataset, "on_bad_audio", "error") != "skip":
        return list(rows), [dataset[uid] for uid in rows], []
    bad: Dict[str, str] = {}
    built = []
    for uid in rows:
        if uid in bad:
            continue
        try:
            built.append((uid, dataset[uid]))
        except DataError as error:
            bad[uid] = str(error)
    if bad:
        built = [(uid, item) for uid, item in built if uid not in bad]
    return [uid for uid, _ in built], [item for _, item in built], [[uid, reason] for uid, reason in bad.items()]
