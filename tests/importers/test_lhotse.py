"""speechiter.importers.lhotse: manifests built with lhotse's own API and written
with to_file; the imported corpus must read the samples lhotse reads."""
import numpy as np
import pytest
import soundfile

from speechiter.importers import lhotse as lhotse_command

from tests.importers.test_kaldi import command, read_idx2, read_segment, tone, write_audio

lhotse = pytest.importorskip("lhotse")
from lhotse import AudioSource, CutSet, Recording, RecordingSet, SupervisionSegment, SupervisionSet  # noqa: E402

SR = 16000


PROG = "python -m speechiter.importers.lhotse"


@pytest.fixture
def lhotse_tool():
    return lhotse_command


def run(tool, *argv):
    return tool.main([str(a) for a in argv])


def save(manifest, path):
    manifest.to_file(path)
    return path


@pytest.fixture
def manifests(tmp_path, monkeypatch):
    """Two recordings (flac at 16 kHz; wav at 22050 Hz), relative paths,
    supervisions including the half-up off-by-one case; as .jsonl.gz."""
    monkeypatch.chdir(tmp_path)  # lhotse opens relative paths from the current folder
    write_audio(tmp_path / "audio" / "a.flac", 3.0, seed=1)
    write_audio(tmp_path / "audio" / "b.wav", 1.0, sample_rate=22050, seed=2)
    recordings = RecordingSet.from_recordings([
        Recording.from_file("audio/a.flac", recording_id="a"),
        Recording.from_file("audio/b.wav", recording_id="b"),
    ])
    supervisions = SupervisionSet.from_segments([
        SupervisionSegment("a-1", "a", start=0.0, duration=1.25, text="HELLO  WORLD", speaker="s1"),
        SupervisionSegment("a-2", "a", start=1.3, duration=1.333, text="AGAIN", speaker="s1"),
        SupervisionSegment("b-1", "b", start=0.01, duration=0.01, text="TINY", speaker="s2"),
        SupervisionSegment("b-2", "b", start=0.123, duration=0.877, text="REST", speaker="s2"),
    ])
    return (save(recordings, tmp_path / "recordings.jsonl.gz"),
            save(supervisions, tmp_path / "supervisions.jsonl.gz"), recordings, supervisions)


def test_supervisions_become_segments(lhotse_tool, manifests, tmp_path, capsys):
    rec_path, sup_path, _, _ = manifests
    out = tmp_path / "out"
    assert run(lhotse_tool, rec_path, sup_path, out) == 0
    assert "wrote idx2wav (4)" in capsys.readouterr().out
    assert read_idx2(out / "idx2wav") == {
        "a-1": "../audio/a.flac#t=0,1.25", "a-2": "../audio/a.flac#t=1.3,2.633",
        "b-1": "../audio/b.wav#t=0.01,0.02", "b-2": "../audio/b.wav#t=0.123,1",
    }
    # b-1: 0.01 s at 22050 Hz is 220.5 samples -> 221 (halves up, as lhotse)
    assert read_idx2(out / "idx2wav_len") == {"a-1": "20000", "a-2": "21328", "b-1": "221", "b-2": "19338"}
    assert read_idx2(out / "idx2dur") == {"a-1": "1.25", "a-2": "1.333", "b-1": "0.01", "b-2": "0.877"}
    assert read_idx2(out / "idx2text") == {"a-1": "HELLO WORLD", "a-2": "AGAIN", "b-1": "TINY", "b-2": "REST"}
    assert read_idx2(out / "idx2spk") == {"a-1": "s1", "a-2": "s1", "b-1": "s2", "b-2": "s2"}
    assert (out / "spk_list").read_text() == "s1\ns2\n"


def test_samples_equal_recording_load_audio(lhotse_tool, manifests, tmp_path):
    rec_path, sup_path, recordings, supervisions = manifests
    out = tmp_path / "out"
    assert run(lhotse_tool, rec_path, sup_path, out) == 0
    wavs, lengths = read_idx2(out / "idx2wav"), read_idx2(out / "idx2wav_len")
    for sup in supervisions:
        expected = recordings[sup.recording_id].load_audio(offset=sup.start, duration=sup.duration).T
        got = read_segment(wavs[sup.id], int(lengths[sup.id]), out)
        assert got.shape == expected.shape, sup.id
        np.testing.assert_array_equal(got, expected, err_msg=sup.id)


def test_cuts_equal_cut_load_audio(lhotse_tool, manifests, tmp_path):
    _, _, recordings, supervisions = manifests
    trimmed = CutSet.from_manifests(recordings, supervisions).trim_to_supervisions(keep_overlapping=False)
    whole = CutSet.from_manifests(recordings.filter(lambda r: r.id == "b"))  # no supervision, no suffix
    whole = whole.modify_ids(lambda i: f"whole-{i}")
    (whole_id,) = whole.ids
    cuts = trimmed + whole
    path = save(cuts, tmp_path / "cuts.jsonl.gz")
    out = tmp_path / "out"
    assert run(lhotse_tool, path, out) == 0
    wavs, lengths = read_idx2(out / "idx2wav"), read_idx2(out / "idx2wav_len")
    assert wavs[whole_id] == "../audio/b.wav" and lengths[whole_id] == "22050"
    assert len(wavs) == len(cuts.to_eager())
    for cut in CutSet.from_file(path):
        expected = cut.load_audio().T
        assert int(lengths[cut.id]) == cut.num_samples
        got = read_segment(wavs[cut.id], int(lengths[cut.id]), out)
        assert got.shape == expected.shape, cut.id
        np.testing.assert_array_equal(got, expected, err_msg=cut.id)
    texts = read_idx2(out / "idx2text")
    assert whole_id not in texts and sorted(texts.values()) == ["AGAIN", "HELLO WORLD", "REST", "TINY"]


def test_recordings_alone_are_whole_utterances(lhotse_tool, manifests, tmp_path):
    rec_path = manifests[0]
    out = tmp_path / "out"
    assert run(lhotse_tool, rec_path, out, "--absolute") == 0
    assert read_idx2(out / "idx2wav") == {"a": str(tmp_path / "audio" / "a.flac"),
                                          "b": str(tmp_path / "audio" / "b.wav")}
    assert read_idx2(out / "idx2wav_len") == {"a": "48000", "b": "22050"}
    assert read_idx2(out / "idx2dur") == {"a": "3", "b": "1"}


@pytest.fixture
def two_sources(tmp_path, monkeypatch):
    """A recording with one mono file per channel (AMI headset style) and a
    stereo recording in one file."""
    monkeypatch.chdir(tmp_path)
    for ch in (0, 1):
        write_audio(tmp_path / f"ch{ch}.wav", 1.0, seed=10 + ch)
    soundfile.write(tmp_path / "stereo.wav", tone(1.0, channels=2), SR, subtype="PCM_16")
    multi = Recording(id="m", sources=[AudioSource("file", [0], "ch0.wav"), AudioSource("file", [1], "ch1.wav")],
                      sampling_rate=SR, num_samples=SR, duration=1.0)
    stereo = Recording.from_file("stereo.wav", recording_id="st")
    return multi, stereo


def test_per_channel_sources_follow_the_supervision_channel(lhotse_tool, two_sources, tmp_path):
    multi, _ = two_sources
    sups = SupervisionSet.from_segments([
        SupervisionSegment("m-0", "m", 0.1, 0.5, channel=0, speaker="x"),
        SupervisionSegment("m-1", "m", 0.2, 0.5, channel=1, speaker="y"),
    ])
    paths = save(RecordingSet.from_recordings([multi]), tmp_path / "r.jsonl"), save(sups, tmp_path / "s.jsonl")
    out = tmp_path / "out"
    assert run(lhotse_tool, *paths, out) == 0
    wavs, lengths = read_idx2(out / "idx2wav"), read_idx2(out / "idx2wav_len")
    assert wavs == {"m-0": "../ch0.wav#t=0.1,0.6", "m-1": "../ch1.wav#t=0.2,0.7"}
    for sup in sups:
        expected = multi.load_audio(channels=sup.channel, offset=sup.start, duration=sup.duration).T
        np.testing.assert_array_equal(read_segment(wavs[sup.id], int(lengths[sup.id]), out), expected)


def test_channel_option_picks_one_source(lhotse_tool, two_sources, tmp_path, capsys):
    multi, _ = two_sources
    sups = SupervisionSet.from_segments([SupervisionSegment("m-all", "m", 0.1, 0.5, channel=[0, 1])])
    paths = save(RecordingSet.from_recordings([multi]), tmp_path / "r.jsonl"), save(sups, tmp_path / "s.jsonl")
    assert run(lhotse_tool, *paths, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "recording 'm': channels [0, 1] come from 2 source files" in err and "--channel N" in err
    assert run(lhotse_tool, *paths, tmp_path / "out", "--channel", "1") == 0
    assert read_idx2(tmp_path / "out" / "idx2wav") == {"m-all": "../ch1.wav#t=0.1,0.6"}
    assert run(lhotse_tool, *paths, tmp_path / "out2", "--channel", "5") == 2
    assert "--channel 5 is not a channel of recording 'm' (channels [0, 1])" in capsys.readouterr().err


def test_one_channel_of_a_stereo_file_is_refused(lhotse_tool, two_sources, tmp_path, capsys):
    _, stereo = two_sources
    sups = SupervisionSet.from_segments([SupervisionSegment("st-0", "st", 0.0, 0.5, channel=0)])
    paths = save(RecordingSet.from_recordings([stereo]), tmp_path / "r.jsonl"), save(sups, tmp_path / "s.jsonl")
    assert run(lhotse_tool, *paths, tmp_path / "out") == 2
    assert ("channels [0] are part of the 2-channel file 'stereo.wav', and idx2wav cannot select channels"
            in capsys.readouterr().err)
    # all channels of the file: readable as it is
    sups = SupervisionSet.from_segments([SupervisionSegment("st-all", "st", 0.0, 0.5, channel=[0, 1])])
    assert run(lhotse_tool, paths[0], save(sups, tmp_path / "s2.jsonl"), tmp_path / "out") == 0
    assert read_idx2(tmp_path / "out" / "idx2wav") == {"st-all": "../stereo.wav#t=0,0.5"}


# ------------------------------------------------------------------- errors


def test_command_source_is_refused_and_never_run(tmp_path):
    marker = tmp_path / "ran"
    rec = Recording(id="c", sources=[AudioSource("command", [0], f"touch {marker}")], sampling_rate=SR,
                    num_samples=SR, duration=1.0)
    path = save(RecordingSet.from_recordings([rec]), tmp_path / "r.jsonl.gz")
    done = command("speechiter.importers.lhotse", path, tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"{PROG}: error: ")
    assert "recording 'c': its audio source is a command, which is never run" in done.stderr
    assert not marker.exists() and not (tmp_path / "out").exists()


def _bad_cases(tmp_path):
    write_audio(tmp_path / "a.wav", 1.0)
    rec = Recording.from_file("a.wav", recording_id="a")
    recs = save(RecordingSet.from_recordings([rec]), tmp_path / "r.jsonl.gz")

    names = iter(range(100))

    def sups(*segments, name=None):
        return save(SupervisionSet.from_segments(segments), tmp_path / (name or f"s{next(names)}.jsonl.gz"))

    other_rate = Recording(id="a", sources=rec.sources, sampling_rate=8000, num_samples=8000, duration=1.0)
    cuts = CutSet.from_manifests(RecordingSet.from_recordings([rec]))
    return {
        "missing recording": ((recs, sups(SupervisionSegment("u", "zz", 0, 0.5))),
                              "supervision 'u': recording 'zz' is not in the recording manifests"),
        "starts past the end": ((recs, sups(SupervisionSegment("u", "a", 1.0, 0.5))),
                                "'u': segment starts at 1.0 s, at or past the end"),
        "ends far past the end": ((recs, sups(SupervisionSegment("u", "a", 0.2, 1.5))),
                                  "'u': segment ends at 1.7 s, more than 0.5 s past"),
        "zero duration": ((recs, sups(SupervisionSegment("u", "a", 0.2, 0.0))), "'u' has duration 0.0 s"),
        "duplicate id": ((recs, sups(SupervisionSegment("u", "a", 0, 0.2), name="s1.jsonl"),
                          sups(SupervisionSegment("u", "a", 0.2, 0.2), name="s2.jsonl")),
                         "s2.jsonl: item 1: duplicate id 'u' (also in "),
        "supervisions alone": ((sups(SupervisionSegment("u", "a", 0, 0.2)),),
                               "supervision manifests need the recording manifests"),
        "cuts and recordings": ((recs, save(cuts, tmp_path / "c.jsonl.gz")), "give either cut manifests or"),
        "rate mismatch": ((save(RecordingSet.from_recordings([other_rate]), tmp_path / "r8k.jsonl"),),
                          "the manifest says 8000 Hz, but "),
        "transforms": ((save(RecordingSet.from_recordings([rec.perturb_speed(1.1)]), tmp_path / "sp.jsonl"),),
                       "has transforms (Speed); import the recording without them"),
        "not a manifest": (((tmp_path / "junk.jsonl").write_text("{}\n") and (tmp_path / "junk.jsonl"),),
                           "junk.jsonl: cannot read as a Lhotse manifest"),
        "no file": ((tmp_path / "nope.jsonl.gz",), "nope.jsonl.gz: no such manifest file"),
        "mixed cut": ((save(cuts.pad(duration=2.0), tmp_path / "pad.jsonl.gz"),),
                      "is a MixedCut; only cuts of one recording"),
    }


@pytest.mark.parametrize("case", [
    "missing recording", "starts past the end", "ends far past the end", "zero duration", "duplicate id",
    "supervisions alone", "cuts and recordings", "rate mismatch", "transforms", "not a manifest", "no file",
    "mixed cut",
])
def test_bad_input_is_one_line_exit_2(lhotse_tool, tmp_path, monkeypatch, capsys, case):
    monkeypatch.chdir(tmp_path)
    paths, message = _bad_cases(tmp_path)[case]
    assert run(lhotse_tool, *paths, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{PROG}: error: ") and err.count("\n") == 1, err
    assert message in err, err
    assert not (tmp_path / "out").exists()


def test_help(tmp_path):
    done = command("speechiter.importers.lhotse", "--help", cwd=tmp_path)
    assert "--channel" in done.stdout and "MANIFEST" in done.stdout


# ------------------------------------------------ values speechiter cannot read
# An import writes files that load, or exits 2 naming the input (NOTE [ Whole imports ]).


def _recording(tmp_path):
    write_audio(tmp_path / "a.wav", 1.0)
    rec = Recording.from_file("a.wav", recording_id="a")
    return rec, save(RecordingSet.from_recordings([rec]), tmp_path / "r.jsonl.gz")


@pytest.mark.parametrize("segment, message", [
    (SupervisionSegment("u 1", "a", 0, 0.5), "item 1: utterance id 'u 1' is empty or contains whitespace"),
    (SupervisionSegment("u\n1", "a", 0, 0.5), "item 1: utterance id 'u\\n1' is empty or contains whitespace"),
    (SupervisionSegment("", "a", 0, 0.5), "item 1: utterance id '' is empty"),
    (SupervisionSegment("u", "a", -0.25, 0.5), "item 1: 'u' starts at -0.25 s; it should be a finite number"),
    (SupervisionSegment("u", "a", float("nan"), 0.5), "item 1: 'u' starts at nan s"),
    (SupervisionSegment("u", "a", 0, float("inf")), "item 1: 'u' has duration inf s; it should be a positive"),
])
def test_unreadable_supervisions_exit_2(lhotse_tool, tmp_path, monkeypatch, capsys, segment, message):
    monkeypatch.chdir(tmp_path)
    _, recs = _recording(tmp_path)
    sups = save(SupervisionSet.from_segments([SupervisionSegment("ok", "a", 0, 0.5), segment]),
                tmp_path / "s.jsonl")
    assert run(lhotse_tool, recs, sups, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{PROG}: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert message.replace("item 1", "item 2") in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field, value, message", [
    ("start", float("nan"), "'c1' starts at nan s"),
    ("duration", float("inf"), "'c1' has duration inf s"),
    ("duration", float("nan"), "'c1' has duration nan s"),
])
def test_a_nan_or_infinite_cut_names_the_cut(tmp_path, monkeypatch, field, value, message):
    monkeypatch.chdir(tmp_path)
    rec, _ = _recording(tmp_path)
    cut = CutSet.from_manifests(RecordingSet.from_recordings([rec]))[0]
    cut = cut.with_id("c1")
    setattr(cut, field, value)
    path = save(CutSet.from_cuts([cut]), tmp_path / "cuts.jsonl")
    done = command("speechiter.importers.lhotse", path, tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"{path}: item 1: {message}" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------- one sample rate


def mixed_cuts(tmp_path):
    """A CutSet of four 16 kHz recordings and one at 22.05 kHz, whole recordings with a supervision each."""
    recordings = []
    for i, (seconds, rate) in enumerate([(1.0, SR), (1.5, SR), (0.75, SR), (1.25, SR), (1.1, 22050)]):
        write_audio(tmp_path / "audio" / f"r{i}.wav", seconds, sample_rate=rate, seed=i)
        recordings.append(Recording.from_file(str(tmp_path / "audio" / f"r{i}.wav"), recording_id=f"r{i}"))
    recordings = RecordingSet.from_recordings(recordings)
    supervisions = SupervisionSet.from_segments([
        SupervisionSegment(f"r{i}-1", r.id, start=0, duration=r.duration, text=f"WORDS {i}", speaker="s")
        for i, r in enumerate(recordings)])
    cuts = CutSet.from_manifests(recordings, supervisions)
    return save(cuts.modify_ids(lambda i: f"c-{i.split('-')[0]}"), tmp_path / "cuts.jsonl.gz")


def build(corpus, data_len, sample_rate=16000):
    from speechiter.dataset.speech_text import SpeechTextDataset
    from speechiter.iterator.block import BlockIterator

    iterator = BlockIterator(dataset_type=SpeechTextDataset,
                             dataset_conf={"main_data": {"feat": str(corpus / "idx2wav")}, "sample_rate": sample_rate},
                             data_len=str(data_len), batch_len=16000 * 3, engine="inline", out_type="null")
    try:
        return [b["feat"].shape for b in iterator.build_loader(1)]
    finally:
        iterator.close()


def test_a_mixed_rate_import_says_so_and_sample_rate_writes_one_rate(lhotse_tool, tmp_path, capsys):
    from speechiter.io.read import read_feat
    from speechiter.paths import resolve_data_path

    cuts = mixed_cuts(tmp_path)
    out = tmp_path / "out"
    assert run(lhotse_tool, cuts, out) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [f"{PROG}: warning: utterances at several sample rates: 16000 Hz (4), 22050 Hz (1); idx2wav_len "
                   f"counts each at its own rate, so a dataset reading at one sample_rate would batch on wrong "
                   f"lengths: pass --sample_rate (the dataset's) to write them all at that rate"]
    assert read_idx2(out / "idx2wav_len")["c-r4"] == "24255"
    assert run(lhotse_tool, cuts, out, "--sample_rate", 16000) == 0
    assert capsys.readouterr().err == ""
    lengths = read_idx2(out / "idx2wav_len")
    assert lengths["c-r4"] == "17600"
    for utt, value in read_idx2(out / "idx2wav").items():
        assert read_feat(resolve_data_path(value, out / "idx2wav"), 16000).shape[0] == int(lengths[utt]), utt
    assert len(build(out, out / "idx2wav_len")) >= 2


def test_lengths_written_at_another_rate_say_which(lhotse_tool, tmp_path, capsys):
    from speechiter.errors import DataError

    out = tmp_path / "out"
    assert run(lhotse_tool, mixed_cuts(tmp_path), out, "--sample_rate", 8000) == 0
    with pytest.raises(DataError, match=r"decoded \d+ samples, but \S+idx2wav_len says \d+, which is this audio "
                                        r"at 8000 Hz while it is read at 16000 Hz: the length file was written at "
                                        r"8000 Hz; write it at 16000 Hz"):
        build(out, out / "idx2wav_len")
    with pytest.raises(SystemExit) as exit:
        run(lhotse_tool, tmp_path / "cuts.jsonl.gz", out, "--sample_rate", -1)
    assert exit.value.code == 2 and "--sample_rate should be a positive integer" in capsys.readouterr().err
