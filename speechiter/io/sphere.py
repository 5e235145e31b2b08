"""NIST SPHERE files that libsndfile cannot decode: shorten (or wavpack) compressed, as LDC ships many."""
from __future__ import annotations

import os
import re

from speechiter.errors import DataError
from speechiter.io.storage import is_url

__all__ = ["check_sphere"]

_CODING_RE = re.compile(rb"\nsample_coding -s[0-9]+ ([^\n]*)")


def check_sphere(file: str) -> None:
    """Raise DataError for a NIST SPHERE file compressed with shorten (or
    wavpack), which libsndfile cannot decode, saying what to do."""
    if is_url(file):
        return
    try:
        with open(file, "rb") as f:
            head = f.read(1024)
    except OSError:
        return  # the decoder names a missing file
    if not head.startswith(b"NIST_1A"):
        return
    match = _CODING_RE.search(head)
    coding = match.group(1).decode("ascii", "replace").strip() if match else ""
    if any(c in coding for c in ("shorten", "wavpack", "shortpack")):
        wav = os.path.splitext(file)[0] + ".wav"
        raise DataError(f"{file}: NIST SPHERE compressed as {coding!r}, which speechiter cannot decode "
                        f"(libsndfile reads uncompressed SPHERE only); convert it once, e.g. "
                        f"'sph2pipe -f wav {file} {wav}', and list the .wav in wav.scp")
