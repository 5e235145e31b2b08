"""Index WebDataset tar shards in place into speechiter idx2 files.

    python -m speechiter.importers.webdataset shards/train-{000000..000099}.tar corpora/train
    python -m speechiter.importers.webdataset s3://bucket/train/shard-000000.tar ... corpora/train

A shard holds samples as WebDataset writes them: members named
``<key>.<extension>``, the key being the member's path up to the first dot of
its base name, one sample's members next to each other. A sample's audio is its
``.flac`` or ``.wav`` member, its text the ``.txt`` member (UTF-8) or else the
``"text"`` field of its ``.json`` member. Shards are local paths (globs and
brace ranges such as ``{000000..000099}`` are expanded) or URLs; they are not
copied: idx2wav names the bytes of each audio member
(``<shard>#bytes=<first>-<last>``), and only tar headers, audio headers and
text members are read, with ranged reads at a URL (see NOTE [ Tar shards read
in place ] in speechiter/importers/tar_index.py). Writes into OUT_DIR:

- ``idx2wav``, ``idx2wav_len`` (samples, from the audio header), ``idx2dur``
  and ``idx2text``, sorted by key;
- ``shards.json``: each shard's size and mtime or ETag, so a shard that
  changes later is an error naming it.

Refused, with one line naming the shard and member (exit code 2): a missing
shard, a corrupt tar header, an audio member that is not audio, a sample with
two audio members, a key that occurs twice. Samples without text are kept
(with a warning, as the Kaldi importer does); samples with text but no audio
are dropped with a warning.
"""
from __future__ import annotations

import json
import sys
import warnings

from speechiter.importers.tar_audio import audio_utterance
from speechiter.importers.tar_index import (AUDIO_EXTENSIONS, Keys, TarShard, command, expand_shards, member_key,
                                            read_text_member, write_index)
from speechiter.importers.utterance import InputError

__all__ = ["import_webdataset", "main"]


def _json_text(data: bytes):
    value = json.loads(data.decode("utf-8"))
    return value.get("text") if isinstance(value, dict) else None


def _samples(shard: TarShard):
    """``(key, {extension: member})`` of each sample, in shard order."""
    key, members = None, {}
    for member in shard.members():
        k, ext = member_key(member.name)
        if k != key:
            if members:
                yield key, members
            key, members = k, {}
        members[ext.lower()] = member
    if members:
        yield key, members


def import_webdataset(shard_names, out_dir, absolute=False):
    """Index the shards into ``out_dir``; returns ``{file name: lines}``.
    Raises DataError (one line) for bad input."""
    shards, utts, keys, audioless = [], [], Keys(), 0
    for name in expand_shards([str(n) for n in shard_names]):
        shard = TarShard(name)
        shards.append(shard)
        for key, members in _samples(shard):
            where = f"{shard.where}: sample {key!r}"
            keys.add(key, where)
            audio = [ext for ext in members if ext in AUDIO_EXTENSIONS]
            if len(audio) > 1:
                raise InputError(f"{where}: two audio members ({', '.join(key + '.' + e for e in audio)})")
            if not audio:
                if "txt" in members or "json" in members:
                    audioless += 1
                continue
            member = members[audio[0]]
            utt = audio_utterance(key, shard, member, f"{shard.where}: member {member.name}")
            if "txt" in members:
                utt.text = read_text_member(shard, members["txt"], f"{shard.where}: member {members['txt'].name}",
                                            lambda b: b.decode("utf-8"))
            elif "json" in members:
                utt.text = read_text_member(shard, members["json"], f"{shard.where}: member "
                                            f"{members['json'].name}", _json_text)
            utts.append(utt)
    if not utts:
        raise InputError("the shards hold no audio members (.flac or .wav)")
    if audioless:
        warnings.warn(f"{audioless} samples have text but no audio member and were dropped", stacklevel=2)
    return write_index(out_dir, utts, shards, absolute, importer="webdataset")


def main(argv=None):
    def inputs(parser):
        parser.add_argument("shards", nargs="+", help="tar shards: paths, globs, brace ranges or URLs")

    return command("speechiter.importers.webdataset", __doc__, inputs,
                   lambda a: import_webdataset(a.shards, a.out_dir, a.absolute), argv)


if __name__ == "__main__":
    sys.exit(main())
