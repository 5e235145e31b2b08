"""Convert a Kaldi/ESPnet data directory into speechiter idx2 files.

    python -m speechiter.importers.kaldi data/train corpora/train
    python -m speechiter.importers.kaldi data/train corpora/train --root /path/to/egs/recipe/s5

Reads DATA_DIR/wav.scp and, when present, segments, text, utt2spk, spk2utt
and utt2dur; writes into OUT_DIR (created if needed), sorted by id, one
``<id> <value>`` per line:

- ``idx2wav``: the audio of each utterance. Without ``segments`` each
  recording is an utterance (its path); with ``segments`` each segment is one,
  written as ``<path>#t=<start>,<end>`` with the times as ``segments`` gives
  them (an end of -1, Kaldi's "to the end of the file", becomes the open form
  ``#t=<start>``). See NOTE [ Segment layout ] in speechiter/importers/writer.py.
- ``idx2wav_len``: samples at the recording's own rate, from the audio header
  (soundfile.info, read once per recording): the file's frames, or
  ``half_up((end - start) * rate)`` for a segment (Lhotse's rule; see NOTE
  [ Segment samples ] in speechiter/io/samples.py).
- ``idx2dur``: seconds, utt2dur's value as written, else computed
  (``end - start`` exactly as the decimal texts give it).
- ``idx2text`` (from text), ``idx2spk`` (from utt2spk, or spk2utt when there is
  no utt2spk; both must agree) and ``spk_list`` (the speakers, sorted).

Paths. Kaldi resolves relative paths in wav.scp against the folder the recipe
runs in; so does this tool, against ``--root`` (default: the current folder).
idx2wav keeps absolute paths and URLs (``s3://...``, read through fsspec) as
they are, and writes paths that were relative as paths relative to OUT_DIR
(speechiter resolves a relative idx2 value against its idx2 file's folder):
the corpus keeps working when the audio and OUT_DIR move together.
``--absolute`` writes absolute paths instead.

Refused, with one line naming the file and line (exit code 2): piped wav.scp
entries (``rec sox ... |``; never executed: convert those recordings to
files first), ark offsets (``foo.ark:123``), paths containing ``#``, duplicate
ids, a segment whose recording is not in wav.scp, a segment whose end is not
after its start, and one that starts past (or ends more than 0.5 s past) the
end of its recording. Lines in text/utt2spk/utt2dur for unknown utterances
are dropped with a warning.
"""
from __future__ import annotations

import sys
from pathlib import Path

from speechiter.importers.command import Parser, run_main
from speechiter.importers.kaldi_dir import import_kaldi

__all__ = ["import_kaldi", "main"]


def main(argv=None):
    parser = Parser("speechiter.importers.kaldi", __doc__)
    parser.add_argument("data_dir", type=Path, help="Kaldi/ESPnet data directory (wav.scp, segments, text, ...)")
    parser.add_argument("out_dir", type=Path, help="folder to write the idx2 files into (created if needed)")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="folder that relative wav.scp paths are relative to (default: the current folder, "
                             "as in Kaldi: the recipe folder)")
    parser.add_argument("--absolute", action="store_true",
                        help="write absolute paths in idx2wav (default: relative ones stay relative, to OUT_DIR)")
    args = parser.parse_args(argv)
    return run_main(parser, lambda a: import_kaldi(a.data_dir, a.out_dir, a.root, a.absolute), args)


if __name__ == "__main__":
    sys.exit(main())
