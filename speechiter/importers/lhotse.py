"""Convert Lhotse manifests into speechiter idx2 files.

    python -m speechiter.importers.lhotse recordings.jsonl.gz supervisions.jsonl.gz corpora/train
    python -m speechiter.importers.lhotse cuts_train.jsonl.gz corpora/train
    python -m speechiter.importers.lhotse ami_recordings.jsonl.gz ami_supervisions.jsonl.gz out --channel 0

Needs the lhotse package (``pip install 'speechiter[lhotse]'``), which reads
the manifests (any format ``lhotse.load_manifest`` reads: .json, .jsonl,
.jsonl.gz, ...). Give either RecordingSet and SupervisionSet manifests (each
supervision becomes an utterance; a RecordingSet alone makes each recording
one), or CutSet manifests (each cut becomes an utterance). Writes into OUT_DIR
(created if needed), sorted by id, one ``<id> <value>`` per line:

- ``idx2wav``: the audio file (or URL) of the utterance's recording followed
  by ``#t=<start>,<end>`` in seconds (Lhotse's floats, shortest form; see NOTE
  [ Segment layout ] in speechiter/importers/writer.py). Whole recordings (a RecordingSet
  alone, or a cut that spans its whole recording) have no suffix.
- ``idx2wav_len``: samples at the recording's rate, ``half_up(duration *
  rate)``, exactly the count ``cut.load_audio()`` and ``recording.load_audio(
  offset, duration)`` return (NOTE [ Segment samples ] in speechiter/io/samples.py); local files' rate and
  frames come from their headers (soundfile.info) and must agree with the
  manifest; URLs are not opened (the manifest's rate and length are used).
  With ``--sample_rate SR`` every length is the one a dataset reading at SR
  gets (NOTE [ One sample rate ] in speechiter/importers/writer.py); without
  it, recordings at several rates are one warning with the count at each rate.
- ``idx2dur`` (seconds), ``idx2text``, ``idx2spk`` and ``spk_list`` (sorted
  speakers) from the supervisions. A cut with several supervisions is refused
  (run ``cuts.trim_to_supervisions()`` first); a cut with none has no text or
  speaker.

Channels. idx2wav names one file per utterance and cannot pick a channel
inside a file. So an utterance whose channel(s) are exactly the channels of
one of its recording's sources reads that source's file (a mono recording; or
per-channel files such as AMI's headsets, each supervision naming its
channel); ``--channel N`` uses channel N instead of the supervision's or cut's
channel (e.g. one array microphone of a multi-source recording). Anything
else (several sources at once, one channel inside a multi-channel file) is
refused with a message saying so.

Paths: relative source paths are relative to ``--root`` (default: the current
folder, where Lhotse opens them); idx2wav keeps absolute paths and URLs as they
are and writes relative ones relative to OUT_DIR, or absolute with
``--absolute``. Refused (exit code 2, one line): command, in-memory and shar
sources (never run or unpacked), recordings with transforms (speed
perturbation, resampling ...), mixed or padding cuts, duplicate ids, a
supervision whose recording is missing, and a segment that starts past (or
ends more than 0.5 s past) the end of its recording.
"""
from __future__ import annotations

import sys
from pathlib import Path

from speechiter.importers.command import Parser, run_main
from speechiter.importers.lhotse_manifests import import_lhotse

__all__ = ["import_lhotse", "main"]


def main(argv=None):
    parser = Parser("speechiter.importers.lhotse", __doc__)
    parser.add_argument("manifests", nargs="+", type=Path, metavar="MANIFEST",
                        help="Lhotse RecordingSet, SupervisionSet or CutSet files")
    parser.add_argument("out_dir", type=Path, help="folder to write the idx2 files into (created if needed)")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="folder that relative source paths are relative to (default: the current folder)")
    parser.add_argument("--channel", type=int,
                        help="take this channel of every recording (it must be a source file of its own)")
    parser.add_argument("--absolute", action="store_true",
                        help="write absolute paths in idx2wav (default: relative ones stay relative, to OUT_DIR)")
    parser.add_argument("--sample_rate", type=int,
                        help="write idx2wav_len at this rate, the dataset's sample_rate (default: each recording's)")
    args = parser.parse_args(argv)
    if args.sample_rate is not None and args.sample_rate <= 0:
        parser.error(f"--sample_rate should be a positive integer, but got {args.sample_rate}")
    return run_main(parser, lambda a: import_lhotse(a.manifests, a.out_dir, a.root, a.channel, a.absolute,
                                                    a.sample_rate), args)


if __name__ == "__main__":
    sys.exit(main())
