"""Convert Lhotse manifests into speechiter idx2 files.

    python tools/import_lhotse.py recordings.jsonl.gz supervisions.jsonl.gz corpora/train
    python tools/import_lhotse.py cuts_train.jsonl.gz corpora/train
    python tools/import_lhotse.py ami_recordings.jsonl.gz ami_supervisions.jsonl.gz out --channel 0

Needs the lhotse package (``pip install 'speechiter[lhotse]'``), which reads
the manifests (any format ``lhotse.load_manifest`` reads: .json, .jsonl,
.jsonl.gz, ...). Give either RecordingSet and SupervisionSet manifests (each
supervision becomes an utterance; a RecordingSet alone makes each recording
one), or CutSet manifests (each cut becomes an utterance). Writes into OUT_DIR
(created if needed), sorted by id, one ``<id> <value>`` per line:

- ``idx2wav``: the audio file (or URL) of the utterance's recording followed
  by ``#t=<start>,<end>`` in seconds (Lhotse's floats, shortest form; see NOTE
  [ Segment layout ] in tools/_idx2_out.py). Whole recordings (a RecordingSet
  alone, or a cut that spans its whole recording) have no suffix.
- ``idx2wav_len``: samples at the recording's rate, ``half_up(duration *
  rate)``, exactly the count ``cut.load_audio()`` and ``recording.load_audio(
  offset, duration)`` return (NOTE [ Segment samples ]); local files' rate and
  frames come from their headers (soundfile.info) and must agree with the
  manifest; URLs are not opened (the manifest's rate and length are used).
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

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _idx2_out import (  # noqa: E402
    AudioInfo, InputError, Parser, Utterance, half_up, is_url, resolve, run_main, seconds_text, segment_samples,
    write_corpus,
)


def _lhotse():
    try:
        import lhotse
    except ImportError:
        raise InputError("reading Lhotse manifests needs the lhotse package (pip install 'speechiter[lhotse]')") \
            from None
    return lhotse


def load_manifests(paths):
    """``(recordings, supervisions, cuts)``: ``{id: (item, where)}`` each,
    from the manifest files in ``paths`` (any mix of kinds lhotse reads)."""
    lhotse = _lhotse()
    kinds = {lhotse.RecordingSet: {}, lhotse.SupervisionSet: {}, lhotse.CutSet: {}}
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise InputError(f"{path}: no such manifest file")
        try:
            manifest = lhotse.load_manifest(path)
        except Exception as e:  # lhotse raises ValueError, KeyError, JSON errors ... for a bad file
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise InputError(f"{path}: cannot read as a Lhotse manifest ({reason})") from None
        table = next((t for kind, t in kinds.items() if isinstance(manifest, kind)), None)
        if table is None:
            raise InputError(f"{path}: a {type(manifest).__name__}, expected recordings, supervisions or cuts")
        for number, item in enumerate(manifest, 1):
            if item.id in table:
                raise InputError(f"{path}: item {number}: duplicate id {item.id!r} (also in {table[item.id][1]})")
            table[item.id] = (item, f"{path}: item {number}")
    return tuple(kinds.values())


class _Converter:
    def __init__(self, root, channel):
        self.root, self.channel, self.info = Path(root).resolve(), channel, AudioInfo()

    def source(self, recording, channels, where):
        """``(location, relative, frames, rate)`` of the one source file that holds
        exactly ``channels`` of ``recording`` (see Channels above)."""
        if recording.transforms:
            raise InputError(f"{where}: recording {recording.id!r} has transforms "
                             f"({', '.join(_transform_name(t) for t in recording.transforms)}); "
                             f"import the recording without them")
        if self.channel is not None:
            if self.channel not in recording.channel_ids:
                raise InputError(f"{where}: --channel {self.channel} is not a channel of recording "
                                 f"{recording.id!r} (channels {recording.channel_ids})")
            channels = [self.channel]
        wanted = set(channels)
        used = [s for s in recording.sources if wanted & set(s.channels)]
        if len(used) != 1:
            raise InputError(f"{where}: recording {recording.id!r}: channels {sorted(wanted)} come from "
                             f"{len(used)} source files, and idx2wav names one file per utterance; "
                             f"pass --channel N to take one channel")
        source = used[0]
        if set(source.channels) != wanted:
            raise InputError(f"{where}: recording {recording.id!r}: channels {sorted(wanted)} are part of the "
                             f"{len(source.channels)}-channel file {source.source!r}, and idx2wav cannot select "
                             f"channels inside a file; write those channels to a file of their own")
        if source.type not in ("file", "url"):
            what = {"command": "a command, which is never run", "memory": "in memory",
                    "shar": "inside a Lhotse shar"}.get(source.type, f"of type {source.type!r}")
            raise InputError(f"{where}: recording {recording.id!r}: its audio source is {what}; "
                             f"write the audio to files first")
        location, relative = resolve(str(source.source), self.root, where)
        if source.type == "url" or is_url(location):
            return location, relative, int(recording.num_samples), int(recording.sampling_rate)
        frames, rate = self.info(location, where)
        if rate != recording.sampling_rate:
            raise InputError(f"{where}: recording {recording.id!r}: the manifest says {recording.sampling_rate} Hz, "
                             f"but {location} is {rate} Hz")
        return location, relative, frames, rate

    def segment(self, utt_id, recording, channels, start, duration, where, whole_ok):
        location, relative, frames, rate = self.source(recording, channels, where)
        if whole_ok and start == 0 and half_up(duration * rate) == frames:
            return Utterance(utt_id, location, frames, seconds_text(duration), relative=relative)
        if not duration > 0:
            raise InputError(f"{where}: {utt_id!r} has duration {duration} s; it should be positive")
        start_text = seconds_text(start)
        end = round(start + duration, ndigits=8)  # lhotse's end (supervision.end, cut.end)
        end_text = seconds_text(end)
        length = segment_samples(float(start_text), float(end_text), frames, rate, f"{where}: {utt_id!r}")
        clipped = length != half_up((float(end_text) - float(start_text)) * rate)
        return Utterance(utt_id, location, length, seconds_text(length / rate if clipped else duration),
                         start_text, end_text, relative=relative)

    def supervision(self, sup, recordings, where):
        if sup.recording_id not in recordings:
            raise InputError(f"{where}: supervision {sup.id!r}: recording {sup.recording_id!r} is not in the "
                             f"recording manifests")
        recording = recordings[sup.recording_id][0]
        utt = self.segment(sup.id, recording, _channel_list(sup.channel), sup.start, sup.duration, where, False)
        utt.text, utt.speaker = sup.text, sup.speaker
        return utt

    def cut(self, cut, where):
        from lhotse.cut import MonoCut, MultiCut

        if not isinstance(cut, (MonoCut, MultiCut)):
            raise InputError(f"{where}: cut {cut.id!r} is a {type(cut).__name__}; only cuts of one recording "
                             f"(MonoCut, MultiCut) map onto idx2wav")
        if not cut.has_recording:
            raise InputError(f"{where}: cut {cut.id!r} has no recording")
        if len(cut.supervisions) > 1:
            raise InputError(f"{where}: cut {cut.id!r} has {len(cut.supervisions)} supervisions; split it with "
                             f"cuts.trim_to_supervisions() first")
        utt = self.segment(cut.id, cut.recording, _channel_list(cut.channel), cut.start, cut.duration, where,
                           True)
        if cut.supervisions:
            utt.text, utt.speaker = cut.supervisions[0].text, cut.supervisions[0].speaker
        return utt


def _channel_list(channel):
    return [channel] if isinstance(channel, int) else list(channel)


def _transform_name(transform):
    return transform.get("name", "?") if isinstance(transform, dict) else type(transform).__name__


def import_lhotse(manifests, out_dir, root=".", channel=None, absolute=False):
    """Convert the manifest files into ``out_dir``; returns ``{file name:
    lines}``. Raises InputError (one line) for bad input."""
    if channel is not None and channel < 0:
        raise InputError(f"channel should be a non-negative integer, but got channel={channel}")
    recordings, supervisions, cuts = load_manifests(manifests)
    convert = _Converter(root, channel)
    if cuts:
        if recordings or supervisions:
            raise InputError("give either cut manifests or recording (+ supervision) manifests, not both")
        utts = [convert.cut(cut, where) for cut, where in cuts.values()]
    elif supervisions:
        if not recordings:
            raise InputError("supervision manifests need the recording manifests they refer to")
        utts = [convert.supervision(sup, recordings, where) for sup, where in supervisions.values()]
    elif recordings:
        utts = []
        for rec, where in recordings.values():
            utts.append(convert.segment(rec.id, rec, rec.channel_ids, 0, rec.duration, where, True))
    else:
        raise InputError("the manifests hold no recordings, supervisions or cuts")
    return write_corpus(out_dir, utts, absolute)


def main(argv=None):
    parser = Parser(prog=Path(__file__).name, description=__doc__.split("\n\n")[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("manifests", nargs="+", type=Path, metavar="MANIFEST",
                        help="Lhotse RecordingSet, SupervisionSet or CutSet files")
    parser.add_argument("out_dir", type=Path, help="folder to write the idx2 files into (created if needed)")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="folder that relative source paths are relative to (default: the current folder)")
    parser.add_argument("--channel", type=int,
                        help="take this channel of every recording (it must be a source file of its own)")
    parser.add_argument("--absolute", action="store_true",
                        help="write absolute paths in idx2wav (default: relative ones stay relative, to OUT_DIR)")
    args = parser.parse_args(argv)
    return run_main(parser, lambda a: import_lhotse(a.manifests, a.out_dir, a.root, a.channel, a.absolute), args)


if __name__ == "__main__":
    sys.exit(main())
