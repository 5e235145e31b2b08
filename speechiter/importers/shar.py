"""Index a Lhotse Shar directory in place into speechiter idx2 files.

    python -m speechiter.importers.shar data/shar/train corpora/train
    python -m speechiter.importers.shar s3://bucket/shar/train corpora/train

A Shar directory, as ``CutSet.to_shar`` writes it, holds numbered pairs:
``cuts.000000.jsonl.gz`` (one cut per line, its recording's source left out)
and ``recording.000000.tar`` (for each cut, ``<cut id>.<format>``, the cut's
audio as one file, and ``<cut id>.json``, its recording manifest). Each cut
becomes an utterance: idx2wav names the bytes of its audio member
(``<shard>#bytes=<first>-<last>``; the tar is not copied, only its headers
are read, with ranged reads at a URL: see NOTE [ Tar shards read in place ] in
speechiter/importers/tar_index.py), idx2wav_len its samples from the audio
header; idx2dur, and idx2text and idx2spk from the cut's supervision. Also
writes ``shards.json`` (each tar's size and mtime or ETag). Lhotse is not
needed: the cuts are JSON lines.

Refused, with one line naming the shard and cut (exit code 2): a missing tar,
a corrupt tar header, a cut whose audio member is missing, not audio, or
``.nodata`` (a cut without a recording), a cut with several supervisions
(split it with ``cuts.trim_to_supervisions()`` first, as for the Lhotse
importer), a cut id that occurs twice. Cuts without supervisions are kept
without text (a warning says how many when others have text); audio members
without a cut are dropped with a warning.
"""
from __future__ import annotations

import glob
import gzip
import json
import os
import re
import sys
import warnings

from speechiter.importers.tar_audio import audio_utterance
from speechiter.importers.tar_index import (AUDIO_EXTENSIONS, Keys, TarShard, command, member_key, read_object,
                                            write_index)
from speechiter.importers.utterance import InputError
from speechiter.io.storage import call, filesystem, is_url

__all__ = ["import_shar", "main"]

_CUTS_RE = re.compile(r"^cuts\.(\d+)\.jsonl(\.gz)?$")


def _listing(shar_dir: str):
    """``[(number, cuts file)]`` of the Shar directory, in order."""
    if is_url(shar_dir):
        fs = filesystem(shar_dir)
        names = call(shar_dir, lambda: fs.ls(shar_dir.rstrip("/"), detail=False), "list")
        names = [n.rsplit("/", 1)[-1] for n in names]
    elif os.path.isdir(shar_dir):
        names = [os.path.basename(n) for n in glob.glob(os.path.join(glob.escape(shar_dir), "cuts.*"))]
    else:
        raise InputError(f"{shar_dir}: no such Shar directory")
    found = sorted((m.group(1), n) for n in names for m in [_CUTS_RE.match(n)] if m)
    if not found:
        raise InputError(f"{shar_dir}: no cuts.NNNNNN.jsonl.gz files (is this a Lhotse Shar directory?)")
    return found


def _cuts(shar_dir: str, name: str):
    """``[(line number, cut dict)]`` of a cuts file."""
    path = f"{shar_dir.rstrip('/')}/{name}" if is_url(shar_dir) else os.path.join(shar_dir, name)
    data = read_object(path, "the cuts")
    try:
        text = (gzip.decompress(data) if name.endswith(".gz") else data).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read the cuts ({e})") from None
    rows = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if line.strip():
            try:
                rows.append((lineno, json.loads(line)))
            except ValueError as e:
                raise InputError(f"{path}:{lineno}: not a JSON cut ({e})") from None
    return path, rows


def import_shar(shar_dir, out_dir, absolute=False):
    """Index the Shar directory into ``out_dir``; returns ``{file name: lines}``.
    Raises DataError (one line) for bad input."""
    shar_dir = str(shar_dir)
    shards, utts, keys, orphans = [], [], Keys(), 0
    for number, cuts_name in _listing(shar_dir):
        cuts_path, cuts = _cuts(shar_dir, cuts_name)
        tar_name = f"recording.{number}.tar"
        shard = TarShard(f"{shar_dir.rstrip('/')}/{tar_name}" if is_url(shar_dir) else
                         os.path.join(shar_dir, tar_name))
        shards.append(shard)
        members = {}
        for member in shard.members():
            key, ext = member_key(member.name)
            if ext.lower() in AUDIO_EXTENSIONS or ext == "nodata":
                members[key] = member
        for lineno, cut in cuts:
            where = f"{cuts_path}:{lineno}: cut {cut.get('id')!r}"
            uid = cut.get("id")
            keys.add(uid, where)
            member = members.pop(uid, None)
            if member is None:
                raise InputError(f"{where}: {shard.where} has no audio member for it")
            if member.name.endswith(".nodata"):
                raise InputError(f"{where}: the cut has no recording ({member.name} in {shard.where})")
            supervisions = cut.get("supervisions") or []
            if len(supervisions) > 1:
                raise InputError(f"{where}: the cut has {len(supervisions)} supervisions; split it with "
                                 f"cuts.trim_to_supervisions() first")
            utt = audio_utterance(uid, shard, member, f"{shard.where}: member {member.name} ({where})")
            if supervisions:
                utt.text, utt.speaker = supervisions[0].get("text"), supervisions[0].get("speaker")
            utts.append(utt)
        orphans += len(members)
    if orphans:
        warnings.warn(f"{orphans} audio members have no cut in the cuts files and were dropped", stacklevel=2)
    return write_index(out_dir, utts, shards, absolute, importer="shar")


def main(argv=None):
    def inputs(parser):
        parser.add_argument("shar_dir", help="Lhotse Shar directory (a path or URL)")

    return command("speechiter.importers.shar", __doc__, inputs, lambda a: import_shar(a.shar_dir, a.out_dir,
                                                                                       a.absolute), argv)


if __name__ == "__main__":
    sys.exit(main())
