"""Views: several augmented copies of each utterance in one batch.

# NOTE [ Views ]
With ``views: N`` a batch of the ids ``[a, b]`` has N x 2 rows, view-major:
``[a, b, a, b]`` for N = 2, so ``feat[:B]`` is the first view of every
utterance and ``feat[B:2B]`` the second, as contrastive and consistency losses
slice them. ``batch.ids`` repeats the ids the same way and ``batch.meta["view"]``
gives each row's view (0 .. N-1). Each row is built on its own: its own speed
factor, augmentation draws, dither and text draws, in row order, all from the
batch's generator. A file is decoded once per batch, whatever N
(:func:`decoded_once`; the files are kept by the thread building the batch, not in the batch's
shared context). Batching budgets each utterance N times (its N rows),
so ``batch_len`` still bounds the padded batch.
"""
import contextlib
import threading
from typing import Callable, Iterator, List, Sequence

_building = threading.local()  # .decoded: {value: decoded} while a batch with views is built in this thread


def view_rows(ids: Sequence[str], views: int) -> List[str]:
    """The rows of a batch of ``ids``: the ids ``views`` times, view-major (NOTE [ Views ])."""
    return list(ids) * views


@contextlib.contextmanager
def decoding_once(views: int) -> Iterator[None]:
    """While a batch with several views is built, :func:`decoded_once` keeps each decoded file."""
    if views < 2 or getattr(_building, "decoded", None) is not None:
        yield
        return
    _building.decoded = {}
    try:
        yield
    finally:
        _building.decoded = None


def decoded_once(value: str, read: Callable[[], object]) -> object:
    """``read()``, or its result from this batch's first read of ``value`` (see :func:`decoding_once`).
    The result is shared by the views: the code after it must not change it in place."""
    decoded = getattr(_building, "decoded", None)
    if decoded is None:
        return read()
    if value not in decoded:
        decoded[value] = read()
    return decoded[value]
