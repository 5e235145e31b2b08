"""Lhotse manifests (recordings + supervisions, or cuts) as utterances.

The command, its options and the files it writes: speechiter/importers/lhotse.py.
"""
from __future__ import annotations

import math
from pathlib import Path

from speechiter.importers.utterance import AudioInfo, InputError, Utterance, resolve, seconds_text
from speechiter.importers.writer import write_corpus
from speechiter.io.samples import compute_num_samples, sample_range
from speechiter.io.storage import is_url

__all__ = ["import_lhotse", "load_manifests"]

_SEGMENT = ("segment", "its recording")  # a segment in messages (see sample_range)


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
        if not (math.isfinite(start) and start >= 0):  # lhotse takes NaN, inf and negative times
            raise InputError(f"{where}: {utt_id!r} starts at {start} s; it should be a finite number of seconds, "
                             f"not negative")
        if not (math.isfinite(duration) and duration > 0):
            raise InputError(f"{where}: {utt_id!r} has duration {duration} s; it should be a positive, finite "
                             f"number of seconds")
        location, relative, frames, rate = self.source(recording, channels, where)
        if whole_ok and start == 0 and compute_num_samples(duration, rate) == frames:
            return Utterance(utt_id, location, frames, seconds_text(duration), relative=relative, where=where,
                             rate=rate)
        start_text = seconds_text(start)
        end = round(start + duration, ndigits=8)  # lhotse's end (supervision.end, cut.end)
        end_text = seconds_text(end)
        length = sample_range(float(start_text), float(end_text), frames, rate, f"{where}: {utt_id!r}", _SEGMENT)[1]
        clipped = length != compute_num_samples(float(end_text) - float(start_text), rate)
        return Utterance(utt_id, location, length, seconds_text(length / rate if clipped else duration),
                         start_text, end_text, relative=relative, where=where, rate=rate)

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


def import_lhotse(manifests, out_dir, root=".", channel=None, absolute=False, sample_rate=None):
    """Convert the manifest files into ``out_dir``; returns ``{file name:
    lines}``. ``sample_rate``: write idx2wav_len at that rate (None: each
    recording's own). Raises DataError (one line) for bad input."""
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
    return write_corpus(out_dir, utts, absolute, sample_rate=sample_rate)
