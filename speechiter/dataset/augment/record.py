"""The applied record: what the chain did to each row, from the worker to ``batch.meta``.

# NOTE [ The applied record ]
Each step that applies writes its draws into the row's record (a dict):
``{"noise": {"file": <id>, "snr": 12.3, "offset": 4410}, "reverb": {"file":
<id>}, "gain": -2.1, "spec_augment": {"freq": [[start, width], ...], "time":
[...], "warp": [centre, shift]}}``; a step that did not apply (its ``prob``)
is absent. The dataset puts the row's record in its item under
:data:`RECORD_KEY`; :meth:`Dataset.get_batch` takes it out before the collate
and hands the batch's records, with the number of views, to the main process
under :data:`speechiter.batch.ROWS_KEY`, where the loader makes them
``batch.meta["augment"]`` (and, with views, ``batch.meta["view"]``; see NOTE
[ Per-row attributes ] in speechiter/batch.py). So the collate and
``model(**batch)`` never see them, and they travel as a few small dicts per batch.
"""
from typing import Any, Dict, List, Optional

from speechiter.batch import ROWS_KEY

__all__ = ["RECORD_KEY", "ROWS_KEY", "take_records", "rows_record"]

#: the item key under which a row's applied record travels to get_batch
RECORD_KEY = "__augment__"


def take_records(items: List[Dict[str, Any]]) -> Optional[List[Dict[str, Any]]]:
    """The rows' applied records, removed from the items; None when the items carry none."""
    if not items or RECORD_KEY not in items[0]:
        return None
    return [item.pop(RECORD_KEY, {}) for item in items]


def rows_record(records: Optional[List[Dict[str, Any]]], views: int, utterances: int) -> Dict[str, Any]:
    """The batch's per-row attributes: ``{"views": n, "meta": {"augment": [...], "view": [...]}}``."""
    meta: Dict[str, Any] = {}
    if records is not None:
        meta["augment"] = records
    if views > 1:
        meta["view"] = [view for view in range(views) for _ in range(utterances)]
    return {"views": views, "meta": meta}
