"""Reference implementation of SpeeChain's batching rules (issue 12).

Written for speechiter's parity suite from the rules in
tests/parity/RULES.md; no SpeeChain code is copied. numpy and the
standard library only, and no speechiter import, so the implementation under
test cannot leak into its own oracle.

The pipeline of one SpeeChain iterator, rule by rule (R-numbers refer to
speechain_rules.md):

    read_main_data (R3: id-sorted, intersected)        -> ids
    select (R5: data_selection, applied in order)       -> ids
    lengths: data_len file, else len(text) (R4)         -> {id: int}
    sort_ids (stable; ties keep id order)               -> ids
    abs_batches / block_batches (R1: close at >=)       -> view
    make_divisible (R10: ngpu)                          -> view (may hold [])
    rank_split (R10: distributed; [] shares removed)    -> view
    epoch_batches: clip (cursor rule) + shuffle (R2)    -> the epoch's batches
"""
from __future__ import annotations

import os
from typing import Dict, Iterable, List, Optional, Sequence, Union

import numpy as np

Batches = List[List[str]]


# --------------------------------------------------------------------------- R3: reading idx2 files

def read_idx2(paths: Union[str, Sequence[str]], cast=str) -> Dict[str, object]:
    """``{id: value}`` of one or more idx2 files, in Python ``str`` order of
    the ids. Each line splits at its first space; a later file's value wins
    for an id listed twice. ``cast`` converts values (SpeeChain reads
    data_len with ``int``, so ``"1.5"`` is an error there)."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    merged: Dict[str, object] = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f.read().split("\n"):
                if line == "":
                    continue
                uid, value = line.split(" ", 1)
                merged[uid] = cast(value)
    return dict(sorted(merged.items()))


def read_main_data(main_data: Dict[str, Union[str, Sequence[str]]]):
    """``(data, ids)``: every name's ``{id: value}`` restricted to the ids
    present under every name, and those ids in ``str`` order."""
    data = {name: read_idx2(paths) for name, paths in main_data.items()}
    common = set.intersection(*(set(d) for d in data.values()))
    data = {name: {uid: v for uid, v in d.items() if uid in common} for name, d in data.items()}
    return data, sorted(common)


# --------------------------------------------------------------------------- R4: lengths

def text_lengths(text: Dict[str, str]) -> Dict[str, int]:
    """SpeechTextDataset's registered lengths: ``len`` of the raw idx2 value
    (characters of the line after the id, also for token-list text, where
    brackets, quotes and ", " count too)."""
    return {uid: len(value) for uid, value in text.items()}


# --------------------------------------------------------------------------- R5: data_selection

def select(ids: List[str], mode: str, number, meta: Optional[Dict[str, str]] = None) -> List[str]:
    """One SpeeChain data_selection rule over ``ids`` (the current data index).

    ``number``: a float in (0, 1) (a fraction), a negative int (a count), or
    for min/max with ``meta`` a numeric string (a threshold).
    Without ``meta``: order / rev_order keep the first / last ``k`` ids in the
    current order (``k = int(len * f)`` or ``-number``); ``random`` is not
    modelled (SpeeChain draws with replacement from numpy's global state).
    With ``meta`` (``{id: value}``): only ids found in ``meta`` can be
    removed (ids missing from the file are always kept); ``k`` is counted on
    the found ids; values sorted ascending; the result is the kept ids in
    ``str`` order (numpy setdiff1d).
    """
    if meta is None:
        k = int(-number if number < 0 else len(ids) * number)
        if mode == "order":
            return list(ids[:k])
        if mode == "rev_order":
            return list(ids[-k:])
        raise ValueError(f"mode {mode!r} is not modelled without meta")
    found = [uid for uid in sorted(meta) if uid in set(ids)]
    values = np.array([float(meta[uid]) for uid in found])
    # stable argsort: equal to numpy's default for these small arrays; SpeeChain uses the default kind
    by_value = [found[i] for i in np.argsort(values, kind="stable")]
    if isinstance(number, str):
        threshold = float(number)
        value_of = dict(zip(found, values.tolist()))
        if mode == "min":
            removed = {uid for uid in found if value_of[uid] > threshold}
        elif mode == "max":
            removed = {uid for uid in found if value_of[uid] < threshold}
        else:
            raise ValueError(f"mode {mode!r} takes no threshold")
    else:
        k = int(-number if number < 0 else len(found) * number)
        if mode == "min":
            removed = set(by_value[k:])
        elif mode == "max":
            removed = set(by_value[:-k])           # k == 0 removes nothing (SpeeChain's [: -0])
        elif mode == "middle":
            cut = int((len(found) - k) / 2)
            removed = set(by_value[:cut]) | set(by_value[-cut:])   # cut == 0 removes everything ([-0:])
        else:
            raise ValueError(f"mode {mode!r} needs a count")
    return sorted(uid for uid in set(ids) if uid not in removed)


def apply_selection(ids: List[str], rules, meta_tables: Dict[str, Dict[str, str]]) -> List[str]:
    """Apply ``rules`` (one rule or a list, as in data_cfg) in order; meta
    files are looked up in ``meta_tables`` by path."""
    if rules is None:
        return ids
    if not all(isinstance(r, (list, tuple)) for r in rules):
        rules = [rules]
    for rule in rules:
        meta = meta_tables[rule[2]] if len(rule) == 3 else None
        ids = select(ids, rule[0], rule[1], meta)
    return ids


# --------------------------------------------------------------------------- sorting

def sort_ids(ids: List[str], lengths: Optional[Dict[str, float]], is_descending: Optional[bool]) -> List[str]:
    """By length (stable, so ties keep the incoming id order), or unchanged
    when there are no lengths or ``is_descending`` is None."""
    if lengths is None or is_descending is None:
        return list(ids)
    return sorted(ids, key=lambda uid: lengths[uid], reverse=bool(is_descending))


# --------------------------------------------------------------------------- batching (R1)

def abs_batches(ids: List[str], batch_size: Optional[int] = None, ngpu: int = 1) -> Batches:
    """Fixed-size batches; ``batch_size`` defaults to ngpu (SpeeChain's valid iterators)."""
    size = int(ngpu if batch_size is None else batch_size)
    return [list(ids[i:i + size]) for i in range(0, len(ids), size)]


def block_batches(ids: List[str], lengths: Dict[str, float], batch_len, speed_factor: float = 1.0) -> Batches:
    """SpeeChain's block rule: add utterances until the batch's total
    *reaches* ``int(batch_len)`` (``>=``), then close it; the rest is a last
    batch. So a batch overshoots by at most one utterance.

    ``speed_factor`` only exists to show what SpeeChain does NOT do: it
    budgets the unperturbed length even with use_speed_perturb (leave 1.0).

    Vectorised: one cumulative sum, then a searchsorted jump per batch.
    """
    budget = int(batch_len)
    values = np.array([lengths[uid] for uid in ids], dtype=np.int64) / speed_factor
    cum = np.concatenate([[0], np.cumsum(values)])
    batches, start = [], 0
    while start < len(ids):
        # first end e > start with cum[e] - cum[start] >= budget
        end = int(np.searchsorted(cum, cum[start] + budget, side="left"))
        end = min(max(end, start + 1), len(ids))
        batches.append(list(ids[start:end]))
        start = end
    return batches


# --------------------------------------------------------------------------- R10: ngpu and ranks

def make_divisible(batches: Batches, ngpu: int, keep_empty: bool = True) -> Batches:
    """SpeeChain's ngpu rule: each batch's last ``len % ngpu`` ids move to the
    front of the next batch; leftovers after the last batch form one more
    batch. A batch that gives away all its ids stays as ``[]`` in SpeeChain
    (``keep_empty=False``: speechiter's documented fix drops it)."""
    if ngpu <= 1:
        return [list(b) for b in batches]
    result, carry = [], []
    for batch in batches:
        batch = carry + list(batch)
        remain = len(batch) % ngpu
        carry = batch[len(batch) - remain:] if remain else []
        if keep_empty or len(batch) > remain:
            result.append(batch[:len(batch) - remain])
    if carry:
        result.append(carry)
    return result


def rank_split(batches: Batches, rank: int, world_size: int, is_descending: Optional[bool],
               pad_empty: bool = False) -> Batches:
    """Rank ``rank``'s share of every batch, ``batch[start::world_size]`` with
    ``start = world_size - rank - 1`` unless is_descending is False (then
    ``rank``); empty shares are removed in SpeeChain (so ranks may differ in
    steps). ``pad_empty=True`` is speechiter's documented fix: an empty share
    becomes ``[batch[-1]]`` so every rank keeps one share per batch."""
    start = rank if is_descending is False else world_size - rank - 1
    if pad_empty:
        return [list(b[start::world_size]) or [b[-1]] for b in batches if b]
    shares = [list(b[start::world_size]) for b in batches]
    return [s for s in shares if s]


# --------------------------------------------------------------------------- R2: the epoch's batches

def clip(batches: Batches, batches_per_epoch: Optional[int], epoch: int) -> Batches:
    """The cursor rule: epoch e takes ``batches_per_epoch`` batches from
    ``(bpe * (e - 1)) % n`` on, wrapping around."""
    n = len(batches)
    if batches_per_epoch is None or batches_per_epoch == n:
        return list(batches)
    cursor = (batches_per_epoch * (epoch - 1)) % n
    return [batches[(cursor + i) % n] for i in range(batches_per_epoch)]


def shuffle_order(n: int, seed: int, epoch: int, cumulative: bool) -> np.ndarray:
    """Positions of the view (or clip) that epoch ``epoch`` plays, in order.

    ``RandomState(s).shuffle(lst)`` reorders a list exactly as
    ``lst[RandomState(s).permutation(len(lst))]``. Cumulative (SpeeChain's
    in-place shuffle of its own list, epochs 1..e): ``order_e =
    order_{e-1}[perm(seed + e)]``, ``order_0 = arange(n)``. Otherwise one
    permutation with seed ``seed + epoch``.
    """
    if not cumulative:
        return np.random.RandomState(seed + epoch).permutation(n)
    order = np.arange(n)
    for e in range(1, epoch + 1):
        order = order[np.random.RandomState(seed + e).permutation(n)]
    return order


def epoch_batches(view: Batches, epoch: int, seed: int = 0, shuffle: bool = True,
                  batches_per_epoch: Optional[int] = None, start_step: int = 0) -> Batches:
    """The batches of ``epoch`` as an uninterrupted SpeeChain run (epochs
    1..epoch built in turn) loads them: clip, then shuffle (cumulative when
    batches_per_epoch is None or equals the view's length), then skip
    ``start_step``."""
    batches = clip(view, batches_per_epoch, epoch)
    if shuffle:
        cumulative = batches_per_epoch is None or batches_per_epoch == len(view)
        order = shuffle_order(len(batches), seed, epoch, cumulative)
        batches = [batches[i] for i in order]
    return batches[start_step:]


# --------------------------------------------------------------------------- one iterator end to end

def iterator_view(main_data: Dict[str, Union[str, Sequence[str]]], kind: str = "abs", *,
                  data_len: Union[str, Sequence[str], None] = None, is_descending: Optional[bool] = True,
                  batch_len=None, batch_size: Optional[int] = None, ngpu: int = 1,
                  data_selection=None, rank: int = 0, world_size: int = 1,
                  speechiter_fixes: bool = False) -> Batches:
    """The batching view of a SpeeChain ``abs.Iterator`` / ``block.BlockIterator``
    over a SpeechTextDataset with ``main_data`` (paths are used as given).

    ``speechiter_fixes``: apply speechiter's documented fixes 2 and 3 (no
    ``[]`` batches after the ngpu rule; every rank keeps a share of every
    batch) instead of SpeeChain's behaviour."""
    data, ids = read_main_data(main_data)
    metas = {}
    if data_selection is not None:
        rules = data_selection if all(isinstance(r, (list, tuple)) for r in data_selection) else [data_selection]
        metas = {r[2]: read_idx2(r[2]) for r in rules if len(r) == 3}
    ids = apply_selection(ids, data_selection, metas)
    if data_len is not None:
        lengths = read_idx2(data_len, int)
    elif "text" in data:
        lengths = text_lengths(data["text"])
    else:
        lengths = None
    if lengths is not None:
        ids = [uid for uid in ids if uid in lengths]      # ids without a length are dropped
    ordered = sort_ids(ids, lengths, is_descending)
    if kind == "block":
        view = block_batches(ordered, lengths, batch_len)
    else:
        view = abs_batches(ordered, batch_size, ngpu)
    view = make_divisible(view, ngpu, keep_empty=not speechiter_fixes)
    if world_size > 1:
        view = rank_split(view, rank, world_size, is_descending, pad_empty=speechiter_fixes)
    return view


# --------------------------------------------------------------------------- R11: paths

def parse_path(path: str, speechain_root: Optional[str], cwd: str) -> str:
    """SpeeChain's path rule: ``/...`` as is; ``.``-prefixed relative to the
    current folder (``./x``, ``../x``, also ``.hidden/x``); anything else
    joined to ``$SPEECHAIN_ROOT`` (an error when it is unset)."""
    if path.startswith("/"):
        return path
    if path.startswith("."):
        return os.path.abspath(os.path.join(cwd, path))
    if speechain_root is None:
        raise KeyError("SPEECHAIN_ROOT")
    return os.path.join(speechain_root, path)


# --------------------------------------------------------------------------- R6: token-list text

def parse_token_list(value: str) -> Union[str, List[str]]:
    """``"['<space>', 'HH', 'AH0']"`` -> tokens (strip the brackets, split at
    ", ", drop one pair of surrounding single quotes); other strings as is."""
    if not (value.startswith("[") and value.endswith("]")):
        return value
    tokens = value[1:-1].split(", ")
    return [t[1:-1] if t.startswith("'") and t.endswith("'") else t for t in tokens]


def trim_spaces(tokens: List[str], durations: Optional[List[float]], feat_len: Optional[int]):
    """Leading / trailing ``<space>`` tokens removed with their durations;
    with audio, the waveform loses ``int(front / total * T)`` samples at the
    start and ``int(tail / total * T)`` at the end (total: the sum of all
    durations before trimming). Returns ``(tokens, durations, (start, stop))``
    or None when only ``<space>`` tokens are left (the utterance is skipped)."""
    if not tokens or (tokens[0] != "<space>" and tokens[-1] != "<space>"):
        return tokens, durations, (0, feat_len)
    total = sum(durations) if durations is not None else None
    front = tail = 0.0
    while tokens and tokens[0] == "<space>":
        front += durations[0] if durations is not None else 0.0
        tokens, durations = tokens[1:], (durations[1:] if durations is not None else None)
    while tokens and tokens[-1] == "<space>":
        tail += durations[-1] if durations is not None else 0.0
        tokens, durations = tokens[:-1], (durations[:-1] if durations is not None else None)
    if not tokens:
        return None
    if feat_len is None:
        return tokens, durations, (0, None)
    start, cut = int(front / total * feat_len), int(tail / total * feat_len)
    return tokens, durations, (start, feat_len - cut)


def batches_equal(a: Iterable[Iterable[str]], b: Iterable[Iterable[str]]) -> bool:
    return [list(x) for x in a] == [list(x) for x in b]
