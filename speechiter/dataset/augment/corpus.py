"""Noise and RIR lists: idx2 files of audio values, read through the reading layer, checked, cached.

# NOTE [ Noise and RIR files ]
A list is one idx2 file or several (``<id> <value>`` per line, values as in
``main_data``: local files, URLs, pack entries, time ranges), read when the
dataset is built; a missing, unreadable or empty list is a ConfigError naming
its YAML path. Its local files must exist then (all missing ones are one
DataError, with their count and the first few as ``file:line``). Its files are
read in the workers when a draw first picks them, with
:func:`speechiter.io.read.read_feat` at the dataset's sample rate (a file
stored at another rate is resampled with soxr, as speech is), and checked
then: a file with more than one channel, shorter than one frame, all zeros (a
silent noise has no SNR; a zero RIR erases the speech), or holding a NaN or
infinite sample (it would make every batch it touches NaN) is a DataError
naming the YAML path, the list and the file.

Each process keeps the files it has read in a least-recently-used cache of at
most ``cache_mb`` MB (float32, 4 bytes a sample: 256 MB holds 4.2 hours at
16 kHz), per list; thread workers share their process's cache. So a worker
process holds at most the sum of its lists' ``cache_mb``. Which file a draw
picks does not depend on the cache, only on the batch's generator: the cache
changes the speed, never the batches.
"""
import os
from typing import List, Sequence, Tuple, Union

import numpy as np

from speechiter.dataset.augment.cache import ArrayCache
from speechiter.errors import ConfigError, DataError
from speechiter.idx2 import read_idx2
from speechiter.idx2_lines import numbered_entries
from speechiter.io.read import read_feat
from speechiter.io.source import parse_source
from speechiter.io.storage import redact
from speechiter.paths import resolve_data_path

#: default cache per list and process, MB
CACHE_MB = 256
_SHOWN = 3


class AudioList:
    """The files of one noise or RIR list (``kind``: "noise" or "RIR"), loaded mono float32 ``(T,)``.

    ``where`` is the YAML path of the option (``dataset_conf.augment[0].noise``); ``min_samples`` the
    shortest file accepted (one frame).
    """

    def __init__(self, files: Union[str, Sequence[str]], where: str, kind: str, sample_rate: int,
                 min_samples: int, cache_mb: float = CACHE_MB):
        files = [files] if isinstance(files, (str, os.PathLike)) else files
        if not isinstance(files, (list, tuple)) or not files:
            raise ConfigError(where, f"expected an idx2 file of {kind} files or a list of them, got {files!r}")
        self.where, self.kind = where, kind
        self.sample_rate, self.min_samples = int(sample_rate), int(min_samples)
        self.ids: List[str] = []
        self.values: List[str] = []
        for i, file in enumerate(files):
            at = where if len(files) == 1 else f"{where}[{i}]"
            if not isinstance(file, (str, os.PathLike)):
                raise ConfigError(at, f"expected an idx2 file, got {file!r}")
            try:
                ids, values = read_idx2(file)
            except DataError as e:
                raise ConfigError(at, str(e)) from None
            if not ids:
                raise ConfigError(at, f"{file}: lists no {kind} file")
            self.ids += ids
            self.values += [resolve_data_path(v, file) for v in values]
            _check_files(file, ids, self.values[-len(ids):], at, kind)
        self.files = [os.fspath(f) for f in files]
        self.cache = ArrayCache(int(cache_mb * 1e6))

    def __len__(self):
        return len(self.ids)

    def draw(self, generator: np.random.Generator) -> Tuple[str, np.ndarray]:
        """``(id, wave)`` of a file drawn uniformly with ``generator`` (one draw)."""
        index = int(generator.integers(len(self.ids)))
        return self.ids[index], self.load(index)

    def load(self, index: int) -> np.ndarray:
        """File ``index`` as float32 ``(T,)`` at the dataset's rate, checked (see NOTE [ Noise and RIR files ])."""
        return self.cache.get(index, lambda: self._read(index))

    def _read(self, index: int) -> np.ndarray:
        value = self.values[index]
        try:
            wave = read_feat(value, self.sample_rate)
        except DataError as e:
            raise self.error(index, redact(e)) from None
        if wave.shape[1] != 1:
            raise self.error(index, f"{redact(value)}: has {wave.shape[1]} channels; {self.kind} files must be "
                                    f"mono")
        if wave.shape[0] < self.min_samples:
            raise self.error(index, f"{redact(value)}: {wave.shape[0]} samples is shorter than one frame "
                                    f"({self.min_samples} samples at {self.sample_rate} Hz)")
        wave = np.ascontiguousarray(wave[:, 0], dtype=np.float32)
        if not np.any(wave):
            problem = "is all silent (the SNR is undefined)" if self.kind == "noise" else "is all zeros"
            raise self.error(index, f"{redact(value)}: {problem}")
        finite = np.isfinite(wave)
        if not finite.all():
            raise self.error(index, f"{redact(value)}: sample {int(np.argmin(finite))} is {wave[~finite][0]} "
                                    f"({int((~finite).sum())} samples are NaN or infinite)")
        wave.flags.writeable = False  # shared by every draw that picks it
        return wave

    def error(self, index: int, problem) -> DataError:
        """A DataError naming the YAML path under dataset_conf, the list and the file's id."""
        listed = ", ".join(self.files)
        return DataError(f"dataset_conf.{self.where} ({self.kind} {self.ids[index]} from {listed}): {problem}")


def _check_files(listed: str, ids: List[str], values: List[str], where: str, kind: str) -> None:
    """Raise one DataError naming the local files of a list that do not exist (count, first few as file:line)."""
    missing = [(uid, value) for uid, value in zip(ids, values) if not _exists(value)]
    if not missing:
        return
    with open(listed, encoding="utf-8-sig", errors="replace") as f:
        lines = {uid: n for n, uid, _ in numbered_entries(f.read())}
    shown = ", ".join(f"{listed}:{lines.get(uid, '?')} ({value})" for uid, value in missing[:_SHOWN])
    more = f" and {len(missing) - _SHOWN} more" if len(missing) > _SHOWN else ""
    raise DataError(f"dataset_conf.{where}: {len(missing)} of the {len(values)} {kind} files {listed} lists do not "
                    f"exist: {shown}{more}")


def _exists(value: str) -> bool:
    """Whether a list value's file is there (URLs are checked when read)."""
    source = parse_source(value)
    return source.is_url or source.pipe is not None or os.path.isfile(source.file)
