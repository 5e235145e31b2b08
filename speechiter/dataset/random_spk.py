"""RandomSpkFeatDataset: text (and speech) with a reference speaker drawn per
utterance, for open-set multi-speaker TTS evaluation. Its YAML name is
SpeeChain's ``speech_text.RandomSpkFeatDataset`` (an alias in
speechiter/registry.py's table of built-in types) or ``random_spk.RandomSpkFeatDataset``.

Options (``dataset_conf``, besides SpeechTextDataset's):
    spk_feat: the ``idx2<model>_spk_feat`` file(s) of the reference speakers
        (required; not in main_data). ``idx2spk`` must lie beside each file.
    use_aver_feat: use the speaker's average embedding,
        ``spk2aver_<model>_spk_feat`` beside each file (default True).
    mixup_number: reference speakers per utterance; their embeddings are
        averaged (default 1).

Batch keys added: ``spk_feat`` (as stored, e.g. ``(B, 1, D)``),
``spk_ids`` and ``spk_feat_ids`` (lists of strings; ``+``-joined sorted ids
with mixup, ``aver_spk_feat`` as the feature id with use_aver_feat).

NOTE [ Reference speaker balance ]
SpeeChain picks, per utterance, a least-used speaker (random among ties) and
adds the utterance's ``len(text)`` to that speaker's count; the counts live in
each DataLoader worker, so the balance is per worker and depends on which
worker built which batch. Here the same least-count rule runs once, when the
dataset is built: over all utterances in a random order drawn from ``seed``,
weighted by the text's token count. That assignment is a pure function of
(seed, dataset), so every worker count, thread or process, and resume point
gives the same speakers, and the balance is global (the totals of any two
speakers differ by at most one utterance's weight). Which of the speaker's
embeddings is used (``spk_feat_ids``) is drawn from the batch's random state
(:func:`speechiter.seeding.rng`): it follows (seed, epoch, batch position).
"""
import heapq
import inspect
import os
import warnings
from typing import Any, Dict, List, Sequence

import numpy as np

from speechiter.io.arrays import read_array
from speechiter.checks import check_bool, check_int
from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.errors import ConfigError, DataError
from speechiter.ids import IdIndex
from speechiter.idx2 import read_idx2
from speechiter.io.source import split_chunk_key
from speechiter.paths import FILES, check_data_file, resolve_data_path
from speechiter.seeding import rng, stream_id
from speechiter.text import SPACE, is_token_list, parse_token_list

AVER_FEAT_ID = "aver_spk_feat"


def embedding_model(spk_feat_file: str) -> str:
    """SpeeChain's model name of a spk_feat file: ``idx2ecapa_spk_feat`` -> ``ecapa``."""
    return os.path.basename(spk_feat_file).split("2")[-1].split("_")[0]


def read_merged(files: Sequence[str], resolve: bool = False) -> Dict[str, str]:
    """idx2 files merged (a later file wins), in id order; values resolved
    against their file's folder with ``resolve``."""
    merged: Dict[str, str] = {}
    for file in files:
        ids, values = read_idx2(file)
        merged.update(zip(ids, (resolve_data_path(v, file) for v in values) if resolve else values))
    return dict(sorted(merged.items()))


def text_weight(value: Any) -> int:
    """SpeeChain's balance weight ``len(text)``: tokens of ``[tok, ...]`` text
    (without leading/trailing ``<space>``), characters of raw text."""
    if not is_token_list(value):
        return len(value)
    tokens = parse_token_list(value)
    while tokens and tokens[0] == SPACE:
        tokens.pop(0)
    while tokens and tokens[-1] == SPACE:
        tokens.pop()
    return len(tokens)


def balanced_assignment(weights: np.ndarray, num_speakers: int, picks: int, seed: int) -> np.ndarray:
    """``(N, picks)`` speaker indices: walk the utterances in a random order;
    each pick takes a speaker with the least total weight (random among ties)
    and adds the utterance's weight to it. See NOTE [ Reference speaker balance ]."""
    generator = np.random.default_rng([int(seed) & 0xFFFFFFFF, stream_id("RandomSpkFeatDataset")])
    order = generator.permutation(len(weights))
    ties = generator.random(num_speakers + len(weights) * picks).tolist()
    heap = [(0.0, ties[s], s) for s in range(num_speakers)]
    heapq.heapify(heap)
    chosen = np.empty((len(weights), picks), dtype=np.int64)
    draw = num_speakers
    for row in order.tolist():
        for pick in range(picks):
            load, _, speaker = heapq.heappop(heap)
            chosen[row, pick] = speaker
            heapq.heappush(heap, (load + float(weights[row]), ties[draw], speaker))
            draw += 1
    return chosen


class RandomSpkFeatDataset(SpeechTextDataset):
    """SpeechTextDataset plus a balanced reference speaker per utterance (see the module docstring)."""

    file_options = {"spk_feat": FILES}

    def dataset_init_fn(self, spk_feat=None, use_aver_feat: bool = True, mixup_number: int = 1, **conf):
        super().dataset_init_fn(**conf)
        for key in ("spk_ids", "spk_feat"):
            if key in self.main_data:
                raise ConfigError(f"main_data.{key}", "RandomSpkFeatDataset draws the reference speaker itself; "
                                                      "give spk_feat in dataset_conf, outside main_data")
        if spk_feat is None:
            raise ConfigError("spk_feat", "missing required option: the idx2<model>_spk_feat file(s) of the "
                                          "reference speakers, with idx2spk beside them")
        files = [spk_feat] if isinstance(spk_feat, str) else spk_feat
        if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
            raise ConfigError("spk_feat", f"expected an idx2 file or a list of them, got {spk_feat!r}")
        self.mixup_number = check_int(mixup_number, "mixup_number")
        use_aver_feat = check_bool(use_aver_feat, "use_aver_feat")
        folders = [os.path.dirname(f) for f in files]
        idx2spk = read_merged([os.path.join(d, "idx2spk") for d in folders])
        idx2feat = read_merged(files, resolve=True)
        unknown = [uid for uid in idx2feat if uid not in idx2spk]
        if unknown:
            raise DataError(f"{', '.join(files)}: spk_feat id {unknown[0]} has no speaker in "
                            f"{', '.join(os.path.join(d, 'idx2spk') for d in folders)}")
        spk2ids: Dict[str, List[str]] = {spk: [] for spk in sorted(set(idx2spk.values()))}
        for uid in idx2feat:  # id order
            spk2ids[idx2spk[uid]].append(uid)
        empty = [spk for spk, ids in spk2ids.items() if not ids]
        if empty:
            warnings.warn(f"{len(empty)} speakers of idx2spk have no spk_feat and are never drawn "
                          f"(e.g. {empty[0]})", stacklevel=2)
        self.speakers = [spk for spk, ids in spk2ids.items() if ids]
        if not self.speakers:
            raise DataError(f"{', '.join(files)}: no speaker embedding to draw from")
        self.spk_feat_ids = [spk2ids[spk] for spk in self.speakers]
        self.idx2spk_feat = idx2feat
        self.spk2aver = None
        if use_aver_feat:
            aver_files = [os.path.join(d, f"spk2aver_{embedding_model(f)}_spk_feat") for d, f in zip(folders, files)]
            self.spk2aver = read_merged(aver_files, resolve=True)
            missing = [spk for spk in self.speakers if spk not in self.spk2aver]
            if missing:
                raise DataError(f"{', '.join(aver_files)}: no average embedding for speaker {missing[0]}")
        text = self.main_data.get("text")
        weights = np.array([text_weight(text.value(row)) if text is not None else 1 for row in range(len(self))],
                           dtype=np.float64)
        self._assigned_index = IdIndex(self.id_array())
        self._assigned = balanced_assignment(weights, len(self.speakers), self.mixup_number, self.seed)

    def reference_speakers(self, uid: str) -> List[str]:
        """The speakers assigned to ``uid`` (see NOTE [ Reference speaker balance ])."""
        return [self.speakers[s] for s in self._assigned[self._assigned_index.find_one(uid)]]

    def extract_main_data_fn(self, main_data: Dict[str, str]) -> Dict[str, Any]:
        uid = main_data["id"]
        item = super().extract_main_data_fn(main_data)
        if item is None:
            return item
        feature, feat_ids, spk_ids = None, [], []
        for speaker in self._assigned[self._assigned_index.find_one(uid)].tolist():
            candidates = self.spk_feat_ids[speaker]
            feat_id = candidates[int(rng().integers(len(candidates)))]  # drawn with use_aver_feat too
            path = self.idx2spk_feat[feat_id] if self.spk2aver is None else self.spk2aver[self.speakers[speaker]]
            vector = self._read_vector(uid, path)
            feature = vector if feature is None else feature + vector
            feat_ids.append(feat_id if self.spk2aver is None else AVER_FEAT_ID)
            spk_ids.append(self.speakers[speaker])
        if self.mixup_number > 1:
            item["spk_feat"] = feature / self.mixup_number
            item["spk_feat_ids"], item["spk_ids"] = "+".join(sorted(feat_ids)), "+".join(sorted(spk_ids))
        else:
            item["spk_feat"], item["spk_feat_ids"], item["spk_ids"] = feature, feat_ids[0], spk_ids[0]
        return item

    def _read_vector(self, uid: str, value: str) -> np.ndarray:
        """A stored embedding, float32, in its stored shape (SpeeChain's (1, D) files batch to (B, 1, D))."""
        file, key = split_chunk_key(value)
        try:
            check_data_file(file)
            array, _ = read_array(file, key)
        except DataError as e:
            raise DataError(f"utterance {uid} (reference spk_feat): {e}") from None
        return np.asarray(array, dtype=np.float32)


def _merged_signature(own, parent) -> inspect.Signature:
    """``own``'s named options followed by ``parent``'s, so data_cfg keys are
    checked against both (``own`` passes the rest on with ``**conf``)."""
    params = [p for p in inspect.signature(own).parameters.values() if p.kind is not p.VAR_KEYWORD]
    names = {p.name for p in params}
    for p in list(inspect.signature(parent).parameters.values())[1:]:
        if p.name not in names and p.kind is not p.VAR_POSITIONAL:
            params.append(p if p.kind is p.VAR_KEYWORD else p.replace(kind=p.KEYWORD_ONLY))
    return inspect.Signature(params)


RandomSpkFeatDataset.dataset_init_fn.__signature__ = _merged_signature(
    RandomSpkFeatDataset.dataset_init_fn, SpeechTextDataset.dataset_init_fn)
