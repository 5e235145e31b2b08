"""Transcript transforms of SpeechTextDataset, after the text is parsed:
``use_g2p`` (raw text to phonemes with g2p_en) and ``unk_mask_prob`` (whole
words replaced by ``<unk>``).

SpeeChain's rules: G2P applies to raw-string text only (token-list text is
already tokens); its ``' '`` becomes ``<space>`` and punctuation-only outputs
are dropped. Masking needs token-list text: words are the runs between
``<space>`` tokens, each is masked with probability ``unk_mask_prob`` and
becomes one ``<unk>`` whose duration is the sum of the word's durations
rounded to 2 decimals; ``<space>`` tokens stay. The draws come from the
batch's random state (:func:`speechiter.seeding.rng`), so they do not depend
on the worker count or the resume point (SpeeChain draws from numpy's global
state, seeded per worker).

g2p_en is an optional extra (``pip install 'speechiter[g2p]'``) and needs the
NLTK data ``cmudict`` and ``averaged_perceptron_tagger(_eng)``.
"""
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from speechiter.checks import check_bool, check_number
from speechiter.errors import ConfigError, DataError
from speechiter.seeding import rng

SPACE, UNK = "<space>", "<unk>"
G2P_INSTALL_HINT = ("pip install 'speechiter[g2p]' (g2p_en), then fetch its NLTK data: python -m nltk.downloader "
                    "cmudict averaged_perceptron_tagger averaged_perceptron_tagger_eng (offline: copy an nltk_data "
                    "folder and set NLTK_DATA)")
#: punctuation runs g2p_en may output; dropped as SpeeChain's G2P tokenizer does
ABNORMAL_PHONEMES = frozenset(["...", ". ...", "... .", "..", ".. ..", ". ."] + [" ".join(["."] * n) for n in range(3, 10)])
#: NLTK resources g2p_en reads; any one of the taggers will do (nltk < 3.9 / >= 3.9)
_NLTK_CORPORA = ("corpora/cmudict",)
_NLTK_TAGGERS = ("taggers/averaged_perceptron_tagger_eng", "taggers/averaged_perceptron_tagger")


class G2P:
    """g2p_en's ``G2p``, made once per process (or thread pool) on first use.

    :meth:`check` imports g2p_en and converts one sentence, so a missing
    package or missing NLTK data is a ConfigError at build time, not a
    traceback in a worker.
    """

    def __init__(self):
        self._model = None
        self._lock = threading.Lock()

    def __getstate__(self):  # workers make their own model
        return {}

    def __setstate__(self, state):
        self.__init__()

    def check(self, where: str = "use_g2p") -> "G2P":
        self._load(where)
        return self

    def _load(self, where: str = "use_g2p"):
        with self._lock:
            if self._model is None:
                self._model = _make_g2p(where)
            return self._model

    def __call__(self, text: str) -> List[str]:
        """Phoneme tokens of ``text``: ``' '`` as ``<space>``, punctuation runs dropped."""
        phonemes = self._load()(text)
        return [SPACE if p == " " else p for p in phonemes if p not in ABNORMAL_PHONEMES]


def _make_g2p(where: str):
    try:
        import nltk
    except ImportError as e:
        raise ConfigError(where, f"use_g2p needs g2p_en and nltk, which are not installed ({e}); "
                                 f"{G2P_INSTALL_HINT}") from None
    missing = [name for name in _NLTK_CORPORA if not _nltk_has(nltk, name)]
    if not any(_nltk_has(nltk, name) for name in _NLTK_TAGGERS):
        missing.append(_NLTK_TAGGERS[0])
    if missing:  # checked before importing g2p_en, whose import tries to download them
        raise ConfigError(where, f"use_g2p: the NLTK data {', '.join(missing)} is missing; {G2P_INSTALL_HINT}")
    try:
        from g2p_en import G2p
        model = G2p()
        model("hello world")
    except ImportError as e:
        raise ConfigError(where, f"use_g2p needs g2p_en, which is not installed ({e}); {G2P_INSTALL_HINT}") from None
    except (LookupError, OSError) as e:
        detail = " ".join(str(e).split())[:200]
        raise ConfigError(where, f"g2p_en cannot run ({type(e).__name__}: {detail}); {G2P_INSTALL_HINT}") from None
    return model


def _nltk_has(nltk, name: str) -> bool:
    for candidate in (name, name + ".zip"):
        try:
            nltk.data.find(candidate)
            return True
        except LookupError:
            continue
    return False


def mask_words(tokens: Sequence[str], durations: Optional[Sequence[float]], flags: Sequence[bool]
               ) -> Tuple[List[str], Optional[List[float]]]:
    """Replace word ``i`` (the ``i``-th run between ``<space>`` tokens) by one
    ``<unk>`` where ``flags[i]``; its duration is the word's sum rounded to 2 decimals."""
    spaces = [i for i, token in enumerate(tokens) if token == SPACE]
    starts, ends = [0] + [i + 1 for i in spaces], spaces + [len(tokens)]
    text: List[str] = []
    duration: Optional[List[float]] = None if durations is None else []
    for word, (start, end) in enumerate(zip(starts, ends)):
        if flags[word]:
            text.append(UNK)
            if duration is not None:
                duration.append(round(float(sum(float(d) for d in durations[start:end])), 2))
        else:
            text += tokens[start:end]
            if duration is not None:
                duration += [float(d) for d in durations[start:end]]
        if word < len(starts) - 1:  # the <space> after the word
            text.append(tokens[end])
            if duration is not None:
                duration.append(float(durations[end]))
    return text, duration


def is_token_list(value: Any) -> bool:
    """Whether ``value`` is a token list as Python writes one (``['a', 'b']``).

    Stricter than SpeeChain (any ``[...]``): a transcript such as
    ``[noise] hello [laugh]`` stays a string here.
    """
    return isinstance(value, str) and (value == "[]" or (value[:2] in ("['", '["') and value[-2:] in ("']", '"]')))


def parse_token_list(value: str) -> List[str]:
    """``"['<space>', 'HH', 'AH0']"`` -> ``['<space>', 'HH', 'AH0']``, as
    SpeeChain: strip the brackets, split at ``", "``, remove one pair of
    single quotes around each token (a token holding ``'`` keeps its double
    quotes, as Python's repr wrote them)."""
    body = value[1:-1]
    if not body:
        return []
    return [t[1:-1] if len(t) >= 2 and t[0] == "'" and t[-1] == "'" else t for t in body.split(", ")]


def num_words(tokens: Sequence[str]) -> int:
    return sum(1 for token in tokens if token == SPACE) + 1


class TextTransforms:
    """The ``use_g2p`` and ``unk_mask_prob`` options, applied to one utterance."""

    def __init__(self, g2p: Optional[G2P], unk_mask_prob: float):
        self.g2p, self.unk_mask_prob = g2p, unk_mask_prob

    @classmethod
    def from_options(cls, use_g2p: bool, unk_mask_prob: float, has_text: bool) -> Optional["TextTransforms"]:
        """None when neither option is on; ConfigError for bad values or a missing g2p_en."""
        use_g2p = check_bool(use_g2p, "use_g2p")
        unk_mask_prob = check_number(unk_mask_prob, "unk_mask_prob", minimum=0)
        if unk_mask_prob > 1:
            raise ConfigError("unk_mask_prob", f"expected a probability in [0, 1], got {unk_mask_prob!r}")
        if not use_g2p and unk_mask_prob == 0:
            return None
        if not has_text:
            raise ConfigError("use_g2p" if use_g2p else "unk_mask_prob", "needs text in main_data")
        return cls(G2P().check() if use_g2p else None, float(unk_mask_prob))

    def __call__(self, uid: str, item: Dict[str, Any]) -> None:
        """Transform ``item['text']`` (and ``item['duration']``) in place."""
        if self.g2p is not None and isinstance(item.get("text"), str):
            item["text"] = self.g2p(item["text"])
        if self.unk_mask_prob > 0:
            tokens = item.get("text")
            if is_token_list(tokens):  # not parsed (and trimmed) by the dataset yet
                tokens = parse_token_list(tokens)
            if not isinstance(tokens, list):
                raise DataError(f"utterance {uid}: unk_mask_prob needs token-list text ('[tok, ...]' in the idx2 "
                                f"file, or use_g2p), got {type(tokens).__name__}")
            flags = rng().random(num_words(tokens)) < self.unk_mask_prob
            durations = item.get("duration")
            if durations is not None and len(durations) != len(tokens):
                raise DataError(f"utterance {uid}: {len(tokens)} tokens but {len(durations)} durations")
            item["text"], masked = mask_words(tokens, durations, flags)
            if masked is not None:
                item["duration"] = np.asarray(masked, dtype=np.float32) if isinstance(durations, np.ndarray) else masked
