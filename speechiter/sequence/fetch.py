"""The one function that builds a batch.

In-process mode (``start_test()``, ``num_workers=0``), the process and thread
workers, and the torch DataLoader engine all call :func:`fetch`, so the modes
cannot drift apart.

NOTE [ A batch that imports torch ]
Each batch runs under its seed, torch's global generator included, but
seeding does not import torch: a worker that never uses it would pay a second
for nothing. So when building a batch imported torch (a dataset that imports it
lazily), that batch's torch draws were not seeded: it is built once more, now
seeded. That happens at most once per worker.
"""
from typing import Any, NamedTuple, Optional, Sequence

from speechiter.seeding import imported_torch, seeded


#: tasks promised to each worker after the buffer, whose reads it starts early (NOTE [ Promised tasks ]
#: in promises.py); a worker tells its indexer about READ_AHEAD + 1 next batches at most
READ_AHEAD = 2


class Task(NamedTuple):
    """One batch to build.

    ``position`` is the batch's index in the epoch's full plan, ``ids`` what
    the indexer's ``__getitem__`` receives, ``seed`` the per-batch seed (see
    :func:`speechiter.seeding.batch_seed`) or None for no reseeding.
    """

    position: int
    ids: Sequence[Any]
    seed: Optional[int] = None


def fetch(indexer, task: Task, upcoming: Sequence[Task] = ()):
    """Build the batch of ``task`` with ``indexer``, under the batch's seed.

    ``upcoming``: the tasks this thread builds next. An indexer with a ``prepare(ids)`` method is told the ids of
    ``task`` and of those first, so that their reads are under way while this
    batch is built (NOTE [ Reading ahead ] in speechiter/dataset/prefetch.py).
    """
    if upcoming:
        prepare(indexer, (task, *upcoming))  # this batch's reads first, unless already started
    if task.seed is None:
        return indexer[task.ids]
    torch_before = imported_torch() is not None
    with seeded(task.seed):
        batch = indexer[task.ids]
    if not torch_before and imported_torch() is not None:  # NOTE [ A batch that imports torch ]
        with seeded(task.seed):
            batch = indexer[task.ids]
    return batch


def prepare(indexer, tasks: Sequence[Task]) -> bool:
    """Tell ``indexer`` (when it has a ``prepare(ids)`` method) the batches it builds soon, first first.

    Returns whether it reads ahead: its ``prepare`` returned anything but False for one of them (False: that
    batch has nothing to read ahead, such as local files). See NOTE [ Promised tasks ] in promises.py.
    """
    method = getattr(indexer, "prepare", None)
    if method is None:
        return False
    ahead = False
    for task in tasks:
        ahead = method(task.ids) is not False or ahead
    return ahead


def same_task(a: Task, b: Task) -> bool:
    """Whether two tasks build the same batch (ids may be lists or arrays)."""
    return (
        a.position == b.position
        and a.seed == b.seed
        and len(a.ids) == len(b.ids)
        and all(x == y for x, y in zip(a.ids, b.ids))
    )


def describe_ids(ids, limit: int = 8) -> str:
    """``['a', 'b', ... (120 more)]``: utterance ids for error messages."""
    ids = list(ids)
    text = ", ".join(repr(x) for x in ids[:limit])
    if len(ids) > limit:
        text += f", ... ({len(ids) - limit} more)"
    return f"[{text}]"
