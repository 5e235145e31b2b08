"""Convert a Kaldi/ESPnet data directory into speechiter idx2 files.

    python -m speechiter.importers.kaldi data/train corpora/train
    python -m speechiter.importers.kaldi data/train corpora/train --root /path/to/egs/recipe/s5

Reads DATA_DIR/wav.scp and, when present, segments, text, utt2spk, spk2utt,
utt2dur and reco2dur; writes into OUT_DIR (created if needed), sorted by id, one
``<id> <value>`` per line:

- ``idx2wav``: the audio of each utterance. Without ``segments`` each
  recording is an utterance (its path); with ``segments`` each segment is one,
  written as ``<path>#t=<start>,<end>`` with the times as ``segments`` gives
  them (an end of -1, Kaldi's "to the end of the file", becomes the open form
  ``#t=<start>``). See NOTE [ Segment layout ] in speechiter/importers/writer.py.
- ``idx2wav_len``: samples at the recording's own rate, from the audio header
  (soundfile.info, read once per recording): the file's frames, or
  ``half_up((end - start) * rate)`` for a segment (Lhotse's rule; see NOTE
  [ Segment samples ] in speechiter/io/samples.py). With ``--sample_rate SR``
  every length is the one a dataset reading at SR gets (NOTE [ One sample
  rate ] in speechiter/importers/writer.py); without it, recordings at several
  rates are one warning with the count at each rate.
- ``idx2dur``: seconds, utt2dur's value as written, else computed
  (``end - start`` exactly as the decimal texts give it).
- ``idx2text`` (from text; an empty transcript cannot be an idx2 value: those
  utterances are left out of idx2text, with one warning), ``idx2spk`` (from utt2spk, or spk2utt when there is
  no utt2spk; both must agree) and ``spk_list`` (the speakers, sorted).

Paths. Kaldi resolves relative paths in wav.scp against the folder the recipe
runs in; so does this tool, against ``--root`` (default: the current folder).
idx2wav keeps absolute paths and URLs (``s3://...``, read through fsspec) as
they are, and writes paths that were relative as paths relative to OUT_DIR
(speechiter resolves a relative idx2 value against its idx2 file's folder):
the corpus keeps working when the audio and OUT_DIR move together.
``--absolute`` writes absolute paths instead.

Piped wav.scp entries. The commands recipes write (``flac -c -d -s F |``,
``sox F -t wav [-r R] [-c 1] [-b 16] - [remix N] |``, ``sph2pipe -f wav [-p]
[-c N] F |``, ``ffmpeg -i F [-ar R] [-ac 1] -f wav - |``, ``cat F |``) are read
natively, with no shell: idx2wav names F itself where the command's output is
F's samples, else the command with F made absolute (NOTE [ Piped values ] in
speechiter/io/pipes.py). Any other command is refused, all of them in one
message, unless ``--allow_commands``: then each runs once here for its length
(``--command_timeout`` seconds at most) and again whenever it is read, as
arbitrary shell (only for data you trust; the dataset needs
``allow_commands: true`` too).

reco2dur, when present, is checked: a recording whose length differs from
it by more than 0.1 s is an error naming the line.

Refused, with one line naming the file and line (exit code 2): ark offsets
(``foo.ark:123``), paths containing ``#``, duplicate ids, a segment whose
recording is not in wav.scp, a segment whose end is not after its start, and
one that starts past (or ends more than 0.5 s past) the end of its recording. Lines in text/utt2spk/utt2dur for unknown utterances
are dropped with a warning.
"""
from __future__ import annotations

import sys
from pathlib import Path

from speechiter.importers.command import Parser, run_main
from speechiter.importers.kaldi_dir import import_kaldi
from speechiter.io.commands import COMMAND_TIMEOUT

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
    parser.add_argument("--sample_rate", type=int,
                        help="write idx2wav_len at this rate, the dataset's sample_rate (default: each recording's)")
    parser.add_argument("--allow_commands", action="store_true",
                        help="run the piped wav.scp commands that are not read natively (arbitrary shell: only "
                             "for data you trust)")
    parser.add_argument("--command_timeout", type=float, default=COMMAND_TIMEOUT,
                        help=f"seconds each allowed command may run (default {COMMAND_TIMEOUT:g})")
    args = parser.parse_args(argv)
    if args.sample_rate is not None and args.sample_rate <= 0:
        parser.error(f"--sample_rate should be a positive integer, but got {args.sample_rate}")
    if not args.command_timeout > 0:
        parser.error(f"--command_timeout should be a positive number of seconds, but got {args.command_timeout}")
    return run_main(parser, lambda a: import_kaldi(a.data_dir, a.out_dir, a.root, a.absolute, a.sample_rate,
                                                   a.allow_commands, a.command_timeout), args)


if __name__ == "__main__":
    sys.exit(main())
