"""Batch checksums and the --dump_batches JSONL writer (format: handbook.md, "The command line")."""
import hashlib
import json
import os
from typing import Any, List, Optional

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
