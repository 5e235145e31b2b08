"""Batch: the dict a Dataset's collate makes, with the utterance ids attached as attributes.

# NOTE [ Batch attributes ]
``batch.ids`` (the utterance ids in batch order), ``batch.meta``
(``{group_info name: [values]}``, ``{}`` without group_info) and
``batch.is_padding`` (one bool per row; True only for rows that pad a batch
to the world size under distributed evaluation) and ``batch.source`` (the
corpus of a mixed iterator's batch, None elsewhere; see speechiter/iterator/mix.py)
and ``batch.skipped`` (the utterances left out under ``on_bad_audio: skip``, with
why; NOTE [ Per-row attributes ]) are attributes, never keys,
so ``model(**batch)`` and code that walks the keys see only the collate's
keys. The Loader attaches them in the main process from the plan (it knows
every task's ids), after the engine: no data travels through the workers for
them, so every engine, worker kind and out_type gets them alike. Attaching
costs one shallow dict copy per batch (a few keys; see the micro-benchmark in
tests/iterator/test_loop.py). A collate that returns something other than a dict (a
tuple, a tensor) gets its batch back unchanged: attributes need a dict; read
the ids from ``loader.plan`` then.

# NOTE [ Per-row attributes ]
A batch the workers made may carry, under :data:`ROWS_KEY`, attributes only
they know: ``{"views": n, "meta": {name: [value per row]}}`` (the
augmentation's applied record and view index, see
speechiter/dataset/augment/record.py). :func:`attach` takes the key out,
repeats the ids, group_info values and padding rows once per view
(view-major, as the rows are) and adds the record's names to ``meta``.
Under :data:`SKIPPED_KEY` a batch lists the utterances it left out,
``[[id, reason], ...]`` (NOTE [ Skipped utterances ] in
speechiter/dataset/bad_audio.py): :func:`attach` takes the key out, drops those
ids (with their views, group_info values and padding rows) and keeps the list
as ``batch.skipped``, so ids, meta and padding stay in step with the rows.
"""
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

#: the key of a worker-made batch that holds its per-row attributes (NOTE [ Per-row attributes ])
ROWS_KEY = "__rows__"
#: the key of a worker-made batch that lists the utterances it skipped (NOTE [ Per-row attributes ])
SKIPPED_KEY = "__skipped__"


class Batch(dict):
    """A batch dict with ``ids``, ``meta``, ``is_padding``, ``source`` and ``skipped`` attributes (see
    NOTE [ Batch attributes ]); ``skipped``: ``[(id, reason)]`` of the utterances left out under
    ``on_bad_audio: skip``, ``[]`` otherwise."""

    __slots__ = ("ids", "meta", "_padding", "source", "skipped")

    def __init__(self, data: Mapping = (), ids: Sequence[str] = (), meta: Optional[Dict[str, List[str]]] = None,
                 is_padding: Optional[List[bool]] = None, source: Optional[str] = None,
                 skipped: Sequence[Tuple[str, str]] = ()):
        super().__init__(data)
        self.ids: List[str] = list(ids)
        self.meta: Dict[str, List[str]] = {} if meta is None else meta
        self._padding = is_padding
        self.source: Optional[str] = source
        self.skipped: List[Tuple[str, str]] = [tuple(pair) for pair in skipped]

    @property
    def is_padding(self) -> List[bool]:
        """One bool per row: True for a row that only pads the batch to the world size."""
        return [False] * len(self.ids) if self._padding is None else self._padding

    def real_rows(self) -> List[int]:
        """The rows that are not padding (all of them outside distributed evaluation)."""
        return [row for row, pad in enumerate(self.is_padding) if not pad]

    def __reduce__(self):
        return (_rebuild, (dict(self), self.ids, self.meta, self._padding, self.source, self.skipped))

    def __repr__(self):
        return f"Batch({dict.__repr__(self)}, ids={self.ids!r})"


def _rebuild(data, ids, meta, padding, source=None, skipped=()) -> Batch:
    return Batch(data, ids, meta, padding, source, skipped)


def attach(batch: Any, ids: List[str], group_info: Optional[Mapping[str, Mapping[str, str]]],
           padding: Optional[List[bool]]) -> Any:
    """``batch`` as a :class:`Batch` carrying ``ids``, their group_info values and the padding rows;
    a non-dict batch comes back unchanged."""
    if not isinstance(batch, dict):
        return batch
    rows, skipped = None, ()
    if SKIPPED_KEY in batch or ROWS_KEY in batch:
        batch = dict(batch)
        rows, skipped = batch.pop(ROWS_KEY, None), batch.pop(SKIPPED_KEY, ())
    if skipped:
        ids, padding = _without(skipped, ids, padding)
    if rows is not None:
        views = rows["views"]
        ids = list(ids) * views
        padding = None if padding is None else list(padding) * views
    meta = group_meta(group_info, ids)
    if rows is not None and rows["meta"]:
        meta = {**(meta or {}), **rows["meta"]}
    return Batch(batch, ids, meta, padding, skipped=skipped)


def _without(skipped: Sequence, ids: Sequence[str], padding: Optional[List[bool]]):
    """``ids`` and ``padding`` without the rows of the skipped ids (a padding row repeats a real one)."""
    gone = {uid for uid, _ in skipped}
    keep = [row for row, uid in enumerate(ids) if uid not in gone]
    return [ids[row] for row in keep], None if padding is None else [padding[row] for row in keep]


def group_meta(group_info: Optional[Mapping[str, Mapping[str, str]]], ids: Sequence[str]) -> Optional[Dict]:
    """``{group_info name: [value of each id]}``, or None without group_info."""
    return {name: [column[uid] for uid in ids] for name, column in group_info.items()} if group_info else None
