"""Index NeMo tarred audio in place into speechiter idx2 files.

    python -m speechiter.importers.nemo tarred/tarred_audio_manifest.json corpora/train
    python -m speechiter.importers.nemo manifest.json corpora/train --tars 'tarred/audio_{0..511}.tar'
    python -m speechiter.importers.nemo manifest.json corpora/train --tars s3://bucket/audio_0.tar s3://...

A NeMo tarred dataset (``scripts/speech_recognition/convert_to_tarred_audio_dataset.py``)
is a manifest, one JSON object per line (``audio_filepath``: the member's
name; ``duration``; ``text``; ``shard_id``: the tar it is in), and tars
``audio_0.tar`` ... ``audio_N.tar``. ``--tars`` takes the tars as NeMo's
``tarred_audio_filepaths`` does: brace ranges (``audio_{0..N}.tar``, or
NeMo's ``audio__OP_0..N_CL_.tar``), globs for local paths, or a list; the
default is the ``audio_*.tar`` files beside a local manifest. A tar's shard id
is the number at the end of its name (``audio_7.tar``: 7), else its position
in the list.

Each manifest entry becomes an utterance whose id is the member's name
without its extension (NeMo's ``file_id``): idx2wav names the member's bytes
(``<tar>#bytes=<first>-<last>``; the tars are not copied, only their headers
are read, with ranged reads at a URL: see NOTE [ Tar shards read in place ] in
speechiter/importers/tar_index.py), idx2wav_len its samples from the audio
header, idx2dur, idx2text from ``text``; ``shards.json`` records each tar's
size and mtime or ETag.

Refused, with one line naming the manifest line and tar (exit code 2): an
entry whose tar is not given or is missing, whose member is not in its tar or
is not audio, a corrupt tar header, an id that occurs twice. Entries without
text are kept (with a warning); tar members without an entry are dropped with
a warning, as NeMo skips them.
"""
from __future__ import annotations

import glob
import json
import os
import re
import sys
import warnings

from speechiter.importers.tar_audio import audio_utterance
from speechiter.importers.tar_index import Keys, TarShard, command, expand_shards, read_object, write_index
from speechiter.importers.utterance import InputError
from speechiter.io.storage import is_url

__all__ = ["import_nemo", "main"]

_NUMBER_RE = re.compile(r"(\d+)\.tar$")


def _manifest(manifest: str):
    """``[(line number, entry)]`` of a JSON-lines manifest."""
    try:
        text = read_object(manifest, "the manifest").decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(f"{manifest}: the manifest is not UTF-8 text ({e.reason} at byte {e.start})") from None
    rows = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if line.strip():
            try:
                entry = json.loads(line)
            except ValueError as e:
                raise InputError(f"{manifest}:{lineno}: not a JSON object ({e})") from None
            if not isinstance(entry, dict) or not isinstance(entry.get("audio_filepath"), str):
                raise InputError(f"{manifest}:{lineno}: an entry needs an 'audio_filepath' (the member's name)")
            rows.append((lineno, entry))
    if not rows:
        raise InputError(f"{manifest}: the manifest is empty")
    return rows


def _default_tars(manifest: str):
    if is_url(manifest):
        raise InputError(f"{manifest}: give the tars of a manifest at a URL with --tars")
    found = glob.glob(os.path.join(glob.escape(os.path.dirname(manifest) or "."), "audio_*.tar"))
    if not found:
        raise InputError(f"{manifest}: no audio_*.tar beside the manifest; give the tars with --tars")
    return sorted(found, key=lambda n: (int(_NUMBER_RE.search(n).group(1)) if _NUMBER_RE.search(n) else -1, n))


def import_nemo(manifest, out_dir, tars=None, absolute=False):
    """Index the manifest's tars into ``out_dir``; returns ``{file name: lines}``.
    Raises DataError (one line) for bad input."""
    manifest = str(manifest)
    rows = _manifest(manifest)
    names = expand_shards(list(tars)) if tars else _default_tars(manifest)
    by_id = {}
    for position, name in enumerate(names):
        match = _NUMBER_RE.search(name)
        by_id.setdefault(int(match.group(1)) if match else position, name)
    opened, members = {}, {}  # shard id -> TarShard; (shard id, member name) -> member

    def shard(shard_id, where):
        if shard_id not in opened:
            if shard_id not in by_id:
                raise InputError(f"{where}: shard_id {shard_id} names no tar among the {len(by_id)} given")
            opened[shard_id] = TarShard(by_id[shard_id])
            for member in opened[shard_id].members():
                members[shard_id, member.name] = member
        return opened[shard_id]

    utts, keys = [], Keys()
    for lineno, entry in rows:
        where = f"{manifest}:{lineno}"
        name = os.path.basename(entry["audio_filepath"])
        shard_ids = [entry["shard_id"]] if "shard_id" in entry else list(by_id)
        found = None
        for shard_id in shard_ids:
            tar = shard(shard_id, where)
            if (shard_id, name) in members:
                found = tar, members.pop((shard_id, name))
                break
        if found is None:
            tars_named = opened[shard_ids[0]].where if len(shard_ids) == 1 else "any of the tars"
            raise InputError(f"{where}: member {name!r} is not in {tars_named}")
        uid = os.path.splitext(name)[0]
        keys.add(uid, where)
        utt = audio_utterance(uid, found[0], found[1], f"{found[0].where}: member {name} ({where})")
        utt.text = entry.get("text")
        utts.append(utt)
    if members:
        warnings.warn(f"{len(members)} tar members have no manifest entry and were dropped", stacklevel=2)
    return write_index(out_dir, utts, [opened[i] for i in sorted(opened)], absolute, importer="nemo")


def main(argv=None):
    def inputs(parser):
        parser.add_argument("manifest", help="the tarred dataset's manifest (JSON lines)")
        parser.add_argument("--tars", nargs="+", metavar="TAR",
                            help="the tars: brace ranges ('audio_{0..N}.tar'), globs or a list (default: the "
                                 "audio_*.tar files beside the manifest)")

    return command("speechiter.importers.nemo", __doc__, inputs,
                   lambda a: import_nemo(a.manifest, a.out_dir, a.tars, a.absolute), argv)


if __name__ == "__main__":
    sys.exit(main())
