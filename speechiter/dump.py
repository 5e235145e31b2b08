"""Batch checksums and the --dump_batches JSONL writer (format: handbook.md, "The command line")."""
import glob
import hashlib
import json
import os
import re
from typing import Any, List, Optional, Tuple

import numpy as np

from speechiter.batch import Batch
from speechiter.structure import is_tensor
from speechiter.user_files import open_output


def checksum(batch: Any) -> str:
    """A digest of everything in a batch: keys sorted; dtype, shape and bytes
    of each array or tensor; strings and numbers. numpy arrays and torch
    tensors with the same content give the same digest."""
    digest = hashlib.blake2b(digest_size=16)
    _feed(digest, batch)
    return digest.hexdigest()


def _feed(digest, value):
    """Fold ``value`` into ``digest`` (a fold, not a map_structure: every
    container adds its own bytes). These bytes are the checksum contract."""
    if isinstance(value, dict):
        digest.update(b"{")
        for key in sorted(value, key=str):
            _feed(digest, str(key))
            _feed(digest, value[key])
        digest.update(b"}")
    elif isinstance(value, (list, tuple)):
        digest.update(b"[" if isinstance(value, list) else b"(")
        for item in value:
            _feed(digest, item)
        digest.update(b"]")
    elif isinstance(value, str):
        data = value.encode("utf-8")
        digest.update(b"s%d:" % len(data) + data)
    elif isinstance(value, (np.ndarray, np.generic)) or is_tensor(value):
        array = to_numpy(value)
        header = f"a{array.dtype.str}{array.shape}:".encode()
        digest.update(header)
        digest.update(np.ascontiguousarray(array).tobytes())
    else:
        digest.update(f"v{type(value).__name__}:{value!r};".encode())


def to_numpy(value) -> np.ndarray:
    """A numpy array, numpy scalar or torch tensor as a numpy array (tensors copied to the CPU)."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value.detach().cpu().numpy()


def rank_path(path: str, rank: int) -> str:
    """``dump.jsonl`` -> ``dump.rank1.jsonl`` (distributed runs)."""
    root, ext = os.path.splitext(path)
    return f"{root}.rank{rank}{ext}"


def split_rank(path: str) -> Optional[Tuple[str, int]]:
    """``state.rank2.json`` -> ``("state.json", 2)``: the name given to --save_state and the rank (None: no
    ``.rank<r>`` before the extension)."""
    root, ext = os.path.splitext(path)
    match = re.fullmatch(r"(.+)\.rank(\d+)", root, re.S)
    return (match.group(1) + ext, int(match.group(2))) if match else None


def rank_files(path: str) -> List[str]:
    """The existing files ``path.rank<r>`` (rank_path's names), by rank."""
    root, ext = os.path.splitext(path)
    found = [(split_rank(name), name) for name in glob.glob(f"{glob.escape(root)}.rank*{glob.escape(ext)}")]
    return [name for key, name in sorted((key[1], name) for key, name in found if key and key[0] == path)]


def earlier_dumps(path: str, distributed: bool) -> List[str]:
    """The non-empty regular files a run's ``--dump_batches path`` would write over (its rank files under
    ``distributed``).

    # NOTE [ Dumps of a resumed run ]
    A run resumed after a kill must not write its dump over the dump of the run it
    continues: that holds the steps up to the kill (and some past the resume point,
    which the resumed run loads again); truncating it would lose them, and on
    another number of ranks the old files of the other ranks would stay beside
    the new ones as if of one run. Appending would mix the two runs in one file,
    after a record the kill cut in half. So the command line refuses a --resume
    whose --dump_batches already holds records (any of its rank files under
    --distributed), before it loads anything, and says to name a new file.
    """
    names = rank_files(path) if distributed else [path]
    return [name for name in names if os.path.isfile(name) and os.path.getsize(name) > 0]


class DumpWriter:
    """Writes one JSON object per loaded batch, in the order consumed (``--dump_batches``); a mixed
    iterator's batch also records its corpus as ``source``, a batch with padding rows (distributed
    evaluation, ``batch.is_padding``) gets ``"padding": [one bool per id]``, and one that left utterances
    out (``on_bad_audio: skip``, ``batch.skipped``) ``"skipped": [{"id": ..., "reason": ...}]`` (a step
    that lost every row too, with ``"ids": []``)."""

    def __init__(self, path: str, rank: int = 0, distributed: bool = False, append: bool = False):
        self.path = rank_path(path, rank) if distributed else path
        self.rank = rank
        self.file = open_output(self.path, "--dump_batches", append)

    def write(self, group: str, set_name: Optional[str], iterator: Optional[str], epoch: int, step: int,
              ids: List[str], batch: Any):
        record = {"group": group, "set": set_name, "iterator": iterator, "epoch": epoch, "step": step,
                  "rank": self.rank, "ids": list(ids), "checksum": checksum(batch)}
        source = getattr(batch, "source", None)
        if source is not None:  # a mixed iterator's batch: its corpus (speechiter/iterator/mix.py)
            record["source"] = source
        padding = batch.is_padding if isinstance(batch, Batch) else None
        if padding and any(padding):  # only under distributed evaluation, so other records keep their form
            record["padding"] = list(padding)
        skipped = getattr(batch, "skipped", None)
        if skipped:  # only under on_bad_audio: skip (NOTE [ Skipped utterances ] in dataset/bad_audio.py)
            record["skipped"] = [{"id": uid, "reason": reason} for uid, reason in skipped]
        self.file.write(json.dumps(record) + "\n")

    def close(self):
        self.file.close()
