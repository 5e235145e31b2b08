"""SpeeChain's text conventions: token-list transcripts, list-form durations,
``<space>`` trimming at both ends, and lengths from the raw text.

SpeeChain's MFA / G2P preparation writes a transcript as the Python repr of
its token list (``['<space>', 'HH', 'AH0', '<space>']``) and durations as a
list of seconds (``[0.2, 0.1, 0.1, 0.05]``). A Dataset parses them with
:func:`parse_token_list` and :func:`parse_durations`; :func:`space_trim`
drops the silent ``<space>`` tokens at both ends and says which fraction of
the audio they cover, and :func:`trim_fraction` cuts that much off an array.
"""
from typing import List, Optional, Sequence, Tuple

import numpy as np

from speechiter.ids import Column
from speechiter.text import SPACE, is_token_list, parse_token_list  # noqa: F401 (re-exported)



def parse_durations(value: str) -> np.ndarray:
    """Durations as float64 (SpeeChain's Python floats): SpeeChain's list form ``[0.1, 0.2]`` (items may
    be quoted) or space-separated numbers ``0.1 0.2``. ValueError otherwise."""
    value = value.strip()
    if value.startswith("[") and value.endswith("]"):
        items = [t.strip() for t in value[1:-1].split(",")] if value[1:-1].strip() else []
        items = [t[1:-1] if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"" else t for t in items]
    else:
        items = value.split()
    return np.array([float(x) for x in items], dtype=np.float64)


def space_trim(tokens: List[str], durations: Optional[Sequence[float]]
               ) -> Optional[Tuple[List[str], Optional[np.ndarray], float, float]]:
    """Drop leading and trailing ``<space>`` tokens (and their durations).

    Returns ``(tokens, durations, front, tail)``, where ``front`` / ``tail``
    are the fractions of the total duration the dropped tokens covered (0.0
    without durations), or None when nothing but ``<space>`` is left (the
    caller keeps such an utterance untrimmed; SpeeChain drops it from the
    batch). The durations must have one value per token.
    """
    first, last = 0, len(tokens)
    while first < last and tokens[first] == SPACE:
        first += 1
    while last > first and tokens[last - 1] == SPACE:
        last -= 1
    if first == last:
        return None
    if durations is None:
        return tokens[first:last], None, 0.0, 0.0
    values = [float(d) for d in durations]  # summed in Python, in SpeeChain's order, for the same cut
    total = sum(values)
    front = sum(values[:first]) / total if total else 0.0
    tail = sum(reversed(values[last:])) / total if total else 0.0
    return tokens[first:last], durations[first:last], front, tail


def trim_fraction(array: np.ndarray, front: float, tail: float) -> np.ndarray:
    """``array[int(front * T) : T - int(tail * T)]`` along the first axis (SpeeChain's cut)."""
    length = array.shape[0]
    return array[int(front * length):length - int(tail * length)]


def text_lengths(column: Column) -> np.ndarray:
    """``len(value)`` (characters) of every value of ``column``, as float64,
    without decoding: UTF-8 bytes minus continuation bytes (``10xxxxxx``)."""
    counts = (column.ends - column.starts).astype(np.float64)
    file_no = column.file_no
    for number, buffer in enumerate(column.buffers):
        rows = slice(None) if file_no is None else np.flatnonzero(file_no == number)
        continuation = np.flatnonzero((buffer & 0xC0) == 0x80)
        if len(continuation):
            starts, ends = column.starts[rows], column.ends[rows]
            counts[rows] -= np.searchsorted(continuation, ends) - np.searchsorted(continuation, starts)
    return counts

