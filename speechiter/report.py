"""Per-iterator statistics, the summary table and the --report JSON.

Each iterator's rates (batches/s, audio s/s) divide by its own time: the wall
time of the epochs of its group (``active_s``), not the whole run's, so a valid
set is not charged for training and adding a group does not move the others.
Audio seconds come from waveform lengths, or, for a dataset that computes
features (``feat_conf``), from frames times the frame shift.
"""
import json
import os
from typing import Any, Dict, List, Optional

from speechiter.dump import to_numpy
from speechiter.user_files import open_output


class IteratorStats:
    """What one iterator loaded during a run."""

    def __init__(self, name: str, iterator):
        self.name = name
        self.total_batches = len(iterator.batches)
        self.batches_per_epoch = len(iterator)
        corpora = corpora_of(iterator)
        self.data_roots = sorted({root for corpus in corpora.values() if corpus is not None
                                  for root in data_roots(corpus.dataset.main_data_files)})
        # {batch.source: (sample rate, seconds of audio per feature frame)}: a mix's corpora may differ
        self.units = {source: _units(corpus.dataset) for source, corpus in corpora.items() if corpus is not None}
        self.steps = 0
        self.utterances = 0
        self.real_frames = 0
        self.padded_frames = 0
        self.audio_s = 0.0  # from waveform lengths or feature frames
        self.wait_s = 0.0
        self.active_s = 0.0  # wall time of its group's epochs
        self.first_batch_s: Optional[float] = None
        self.bad_audio = {"skipped": 0, "empty_steps": 0, "ids": {}}  # on_bad_audio: skip

    def add(self, ids, batch):
        self.steps += 1
        self.utterances += len(ids)
        skipped = getattr(batch, "skipped", None)
        if skipped:
            self.bad_audio["skipped"] += len(skipped)
            self.bad_audio["empty_steps"] += not ids
            self.bad_audio["ids"].update(skipped)
        feat, feat_len = _get(batch, "feat"), _get(batch, "feat_len")
        if feat is not None and feat_len is not None:
            lengths = to_numpy(feat_len)
            real = int(lengths.sum())
            self.real_frames += real
            self.padded_frames += int(feat.shape[0] * feat.shape[1])
            sample_rate, frame_s = self.units.get(getattr(batch, "source", None), (None, None))
            if sample_rate and feat.ndim == 3 and feat.shape[2] == 1:
                self.audio_s += real / sample_rate
            elif frame_s is not None:
                self.audio_s += real * frame_s

    def add_loader(self, loader):
        self.wait_s += loader.wait_s
        if self.first_batch_s is None and loader.first_batch_s is not None:
            self.first_batch_s = loader.first_batch_s

    def as_dict(self) -> Dict[str, Any]:
        audio_s = self.audio_s or None
        own_s = self.active_s
        return {
            "total_batches": self.total_batches,
            "batches_per_epoch": self.batches_per_epoch,
            "steps": self.steps,
            "utterances": self.utterances,
            "real_frames": self.real_frames,
            "padded_frames": self.padded_frames,
            "padding_efficiency": self.real_frames / self.padded_frames if self.padded_frames else None,
            "active_s": own_s,
            "batches_per_s": self.steps / own_s if own_s > 0 else None,
            "audio_seconds": audio_s,
            "audio_seconds_per_s": audio_s / own_s if audio_s and own_s > 0 else None,
            "time_to_first_batch_s": self.first_batch_s,
            "wait_s": self.wait_s,
            "data_roots": self.data_roots,
            "bad_audio": self.bad_audio,
        }


class RunReport:
    """Collects the stats of every iterator of a run."""

    def __init__(self, settings: Dict[str, Any]):
        self.settings = settings
        self.iterators: Dict[str, IteratorStats] = {}
        self.first_batch_s: Optional[float] = None
        self.rank, self.world_size = 0, 1  # the process whose figures these are
        self.skipped: Dict[str, Dict[str, int]] = {}  # label -> batches and utterances a group's steps left out

    def stats(self, name: str, iterator) -> IteratorStats:
        if name not in self.iterators:
            self.iterators[name] = IteratorStats(name, iterator)
        return self.iterators[name]

    def add_skipped(self, label: str, batches: int, utterances: int):
        """Count what ``steps: shortest`` left out of iterator ``label`` in one epoch."""
        counts = self.skipped.setdefault(label, {"batches": 0, "utterances": 0})
        counts["batches"] += batches
        counts["utterances"] += utterances

    def notes(self) -> List[str]:
        """Lines printed under the table: which rank it shows, what a group's steps skipped."""
        lines = [f"{name} data: {', '.join(stats.data_roots)}" for name, stats in self.iterators.items()
                 if stats.data_roots]
        if self.world_size > 1:
            lines.append(f"rank {self.rank} of {self.world_size} shown (each rank loads its own share; "
                         f"--report writes one file per rank)")
        for name, stats in self.iterators.items():
            bad = stats.bad_audio
            if bad["skipped"]:
                empty = f", {bad['empty_steps']} steps left with no rows" if bad["empty_steps"] else ""
                lines.append(f"{name}: skipped {bad['skipped']} utterances that could not be read ({len(bad['ids'])} "
                             f"different){empty}; --report lists them with the reasons")
        for label, counts in self.skipped.items():
            lines.append(f"{label}: skipped {counts['batches']} batches ({counts['utterances']} utterances) "
                         f"beyond the shortest iterator of its group (steps: longest keeps them)")
        return lines

    def as_dict(self, wall_s: float) -> Dict[str, Any]:
        return {"engine": self.settings, "wall_time_s": wall_s, "time_to_first_batch_s": self.first_batch_s,
                "rank": self.rank, "world_size": self.world_size, "skipped": self.skipped,
                "iterators": {name: s.as_dict() for name, s in self.iterators.items()}}

    def write(self, path: str, wall_s: float):
        """The --report JSON into ``path``."""
        with open_output(path, "--report") as f:
            json.dump(self.as_dict(wall_s), f, indent=2)
            f.write("\n")

    def table(self, wall_s: float) -> str:
        header = ("iterator", "batches", "utterances", "pad eff", "batches/s", "audio s/s", "wait s")
        rows = [header]
        for name, stats in self.iterators.items():
            d = stats.as_dict()
            rows.append((name, str(d["steps"]), str(d["utterances"]), _pct(d["padding_efficiency"]),
                         _num(d["batches_per_s"]), _num(d["audio_seconds_per_s"]), _num(d["wait_s"])))
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                 for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)


def corpora_of(iterator) -> Dict[Optional[str], Any]:
    """``{batch.source: iterator}``: a mix's corpora by name (None for a weight-0 corpus, whose batches never
    come), else ``{None: iterator}``."""
    from speechiter.iterator.mix import MixIterator
    if isinstance(iterator, MixIterator):
        return {name: corpus if iterator.weights[name] > 0 else None for name, corpus in iterator.iterators.items()}
    return {None: iterator}


def _units(dataset):
    """``(sample rate, seconds per feature frame)`` of a dataset's batches (None where unknown)."""
    extractor = getattr(dataset, "feat_extractor", None)
    frame_s = (extractor.window_shift / extractor.sample_rate
               if extractor is not None and getattr(extractor, "sample_rate", None) else None)
    return getattr(dataset, "sample_rate", None), frame_s


def data_roots(main_data_files: Dict[str, List[str]]) -> List[str]:
    """The folders of an iterator's main_data files (absolute; URLs as given): where its data came from."""
    folders = {os.path.dirname(f if "://" in f else os.path.abspath(f))
               for files in main_data_files.values() for f in files if isinstance(f, str)}
    return sorted(folders)


def _get(batch, key):
    return batch.get(key) if isinstance(batch, dict) else None


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _num(value) -> str:
    return "-" if value is None else f"{value:.2f}"
