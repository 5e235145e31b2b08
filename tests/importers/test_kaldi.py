"""speechiter.importers.kaldi: real Kaldi data directories over real audio files."""
import os
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile

from speechiter.importers import kaldi as kaldi_command

from tests.inprocess import run_cli

PROG = "python -m speechiter.importers.kaldi"

SR = 16000


@pytest.fixture
def kaldi():
    return kaldi_command


def command(module, *argv, cwd=None):
    """``python -m <module> argv...`` (its main(), in this process: tests/inprocess.py), run from any folder."""
    return run_cli(*argv, module=module, cwd=cwd or Path.cwd())


def tone(seconds, sample_rate=SR, channels=1, seed=0):
    """int16 noise + ramp, so every sample is distinguishable from its neighbours."""
    n = int(round(seconds * sample_rate))
    rng = np.random.default_rng(seed)
    x = (np.arange(n) % 1000 * 20 + rng.integers(-500, 500, n)).astype(np.int16)
    return x if channels == 1 else np.stack([x, -x], axis=1)


def write_audio(path, seconds, sample_rate=SR, seed=0):
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, tone(seconds, sample_rate, seed=seed), sample_rate, subtype="PCM_16")
    return path


def write_files(folder, **files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def read_idx2(path):
    rows = [line.split(" ", 1) for line in path.read_text(encoding="utf-8").splitlines()]
    return {k: v for k, v in rows}


def parse_wav(value, idx2_dir):
    """(absolute path, start, end) of an idx2wav value; times as text or None."""
    match = re.fullmatch(r"(.*?)(?:#t=([0-9.]+)(?:,([0-9.]+))?)?", value)
    path = match.group(1)
    if not os.path.isabs(path) and "://" not in path:
        path = os.path.normpath(os.path.join(idx2_dir, path))
    return path, match.group(2), match.group(3)


def half_up(x):
    from decimal import ROUND_HALF_UP, Decimal

    return int(Decimal(round(x, 8)).quantize(0, rounding=ROUND_HALF_UP))


def read_segment(value, length, idx2_dir):
    """The samples of one idx2wav value as NOTE [ Segment samples ] defines
    them: first sample half_up(start * sr), idx2wav_len samples."""
    path, start, _ = parse_wav(value, idx2_dir)
    sr = soundfile.info(path).samplerate
    first = half_up(float(start) * sr) if start else 0
    return soundfile.read(path, start=first, frames=length, dtype="float32", always_2d=True)[0]


@pytest.fixture
def data(tmp_path):
    """A recipe root with two recordings (one relative, one absolute in
    wav.scp) and a segments data dir."""
    root = tmp_path / "recipe"
    write_audio(root / "audio" / "rec1.flac", 4.0, seed=1)
    rec2 = write_audio(tmp_path / "elsewhere" / "rec2.wav", 3.0, seed=2)
    data_dir = write_files(
        root / "data" / "train",
        **{"wav.scp": f"rec1 audio/rec1.flac\nrec2 {rec2}\n",
           "segments": "utt_a rec1 0.000 1.250\nutt_b rec1 1.250 3.999\nutt_c rec2 0.5 2.75\n",
           "text": "utt_a HELLO WORLD\nutt_b  GOOD   MORNING \nutt_c BYE\n",
           "utt2spk": "utt_a spk1\nutt_b spk1\nutt_c spk2\n",
           "spk2utt": "spk1 utt_a utt_b\nspk2 utt_c\n"})
    return root, data_dir


def run(kaldi, *argv):
    return kaldi.main([str(a) for a in argv])


# ------------------------------------------------------------------ success


def test_segments_become_media_fragments(kaldi, data, tmp_path, capsys):
    root, data_dir = data
    out = tmp_path / "out"
    assert run(kaldi, data_dir, out, "--root", root) == 0
    assert "wrote idx2wav (3)" in capsys.readouterr().out
    rec1 = os.path.relpath(root / "audio" / "rec1.flac", out)
    assert read_idx2(out / "idx2wav") == {
        "utt_a": f"{rec1}#t=0.000,1.250",
        "utt_b": f"{rec1}#t=1.250,3.999",  # times as written, not re-rounded
        "utt_c": f"{tmp_path / 'elsewhere' / 'rec2.wav'}#t=0.5,2.75",  # absolute stays absolute
    }
    assert read_idx2(out / "idx2wav_len") == {"utt_a": "20000", "utt_b": "43984", "utt_c": "36000"}
    assert read_idx2(out / "idx2dur") == {"utt_a": "1.25", "utt_b": "2.749", "utt_c": "2.25"}
    assert read_idx2(out / "idx2text") == {"utt_a": "HELLO WORLD", "utt_b": "GOOD MORNING", "utt_c": "BYE"}
    assert read_idx2(out / "idx2spk") == {"utt_a": "spk1", "utt_b": "spk1", "utt_c": "spk2"}
    assert (out / "spk_list").read_text() == "spk1\nspk2\n"
    assert list(read_idx2(out / "idx2wav")) == sorted(read_idx2(out / "idx2wav"))


def test_segment_samples_match_the_recording(kaldi, data, tmp_path):
    root, data_dir = data
    out = tmp_path / "out"
    assert run(kaldi, data_dir, out, "--root", root) == 0
    lengths = read_idx2(out / "idx2wav_len")
    whole = soundfile.read(root / "audio" / "rec1.flac", dtype="float32", always_2d=True)[0]
    x = read_segment(read_idx2(out / "idx2wav")["utt_b"], int(lengths["utt_b"]), out)
    np.testing.assert_array_equal(x, whole[20000:20000 + 43984])


@pytest.mark.slow  # forks (lhotse reads in a process)
def test_samples_match_lhotse_reading_the_same_data_dir(kaldi, data, tmp_path, monkeypatch):
    pytest.importorskip("lhotse")
    from lhotse.kaldi import load_kaldi_data_dir

    root, data_dir = data
    out = tmp_path / "out"
    assert run(kaldi, data_dir, out, "--root", root) == 0
    monkeypatch.chdir(root)  # lhotse opens wav.scp paths relative to the current folder, as Kaldi does
    recordings, supervisions, _ = load_kaldi_data_dir(data_dir, sampling_rate=SR)
    wavs, lengths = read_idx2(out / "idx2wav"), read_idx2(out / "idx2wav_len")
    for sup in supervisions:
        expected = recordings[sup.recording_id].load_audio(offset=sup.start, duration=sup.duration).T
        got = read_segment(wavs[sup.id], int(lengths[sup.id]), out)
        assert got.shape == expected.shape, sup.id
        np.testing.assert_array_equal(got, expected)


def test_whole_recordings_without_segments(kaldi, tmp_path):
    rec = write_audio(tmp_path / "a.wav", 1.5)
    write_audio(tmp_path / "b.flac", 0.25, sample_rate=8000)
    data_dir = write_files(tmp_path / "d", **{"wav.scp": "b b.flac\na a.wav\n", "utt2spk": "a s\nb s\n"})
    out = tmp_path / "out"
    assert run(kaldi, data_dir, out, "--root", tmp_path, "--absolute") == 0
    assert read_idx2(out / "idx2wav") == {"a": str(rec), "b": str(tmp_path / "b.flac")}
    assert read_idx2(out / "idx2wav_len") == {"a": "24000", "b": "2000"}
    assert read_idx2(out / "idx2dur") == {"a": "1.5", "b": "0.25"}
    assert not (out / "idx2text").exists()
    assert (out / "spk_list").read_text() == "s\n"


def test_open_end_utt2dur_and_spk2utt_only(kaldi, tmp_path):
    write_audio(tmp_path / "r.wav", 2.0)
    data_dir = write_files(tmp_path / "d", **{
        "wav.scp": "r r.wav\n", "segments": "u1 r 0.5 -1\nu2 r 0 0.5\n",
        "utt2dur": "u1 1.50\nu2 0.5\n", "spk2utt": "bob u1 u2\n"})
    out = tmp_path / "out"
    assert run(kaldi, data_dir, out, "--root", tmp_path) == 0
    assert read_idx2(out / "idx2wav") == {"u1": "../r.wav#t=0.5", "u2": "../r.wav#t=0,0.5"}
    assert read_idx2(out / "idx2wav_len") == {"u1": "24000", "u2": "8000"}
    assert read_idx2(out / "idx2dur") == {"u1": "1.50", "u2": "0.5"}  # utt2dur as written
    assert read_idx2(out / "idx2spk") == {"u1": "bob", "u2": "bob"}


def test_lengths_follow_lhotse_half_up_rule(kaldi, tmp_path):
    """At 22050 Hz, 0.01 s is 220.5 samples: the segment [0.01, 0.02) starts
    at sample 221 (halves up, not Python's round-half-even 220) and has
    half_up(0.01 * 22050) = 221 samples, one more than half_up(0.02 * 22050)
    - 221. See NOTE [ Segment samples ]."""
    write_audio(tmp_path / "r.wav", 0.1, sample_rate=22050)
    data_dir = write_files(tmp_path / "d", **{"wav.scp": "r r.wav\n", "segments": "u r 0.01 0.02\n"})
    assert run(kaldi, data_dir, tmp_path / "out", "--root", tmp_path) == 0
    assert read_idx2(tmp_path / "out" / "idx2wav_len") == {"u": "221"}


def test_small_overshoot_is_clipped(kaldi, tmp_path):
    write_audio(tmp_path / "r.wav", 1.0)
    data_dir = write_files(tmp_path / "d", **{"wav.scp": "r r.wav\n", "segments": "u r 0.75 1.2\n"})
    assert run(kaldi, data_dir, tmp_path / "out", "--root", tmp_path) == 0
    assert read_idx2(tmp_path / "out" / "idx2wav") == {"u": "../r.wav#t=0.75,1.2"}
    assert read_idx2(tmp_path / "out" / "idx2wav_len") == {"u": "4000"}
    assert read_idx2(tmp_path / "out" / "idx2dur") == {"u": "0.25"}


def test_unknown_ids_in_text_are_dropped_with_a_warning(kaldi, tmp_path, capsys):
    write_audio(tmp_path / "r.wav", 1.0)
    data_dir = write_files(tmp_path / "d", **{"wav.scp": "r r.wav\n", "text": "r HI\nzz NOPE\n"})
    assert run(kaldi, data_dir, tmp_path / "out", "--root", tmp_path) == 0
    assert "warning: lines for utterances not in the data directory were dropped: 1 in text" in capsys.readouterr().err
    assert read_idx2(tmp_path / "out" / "idx2text") == {"r": "HI"}


def test_cli_help_and_relative_root(tmp_path):
    help_text = command("speechiter.importers.kaldi", "--help", cwd=tmp_path).stdout
    assert "--root" in help_text and "#t=" in help_text and help_text.startswith(f"usage: {PROG} ")
    write_audio(tmp_path / "audio" / "r.wav", 0.5)
    write_files(tmp_path / "d", **{"wav.scp": "r audio/r.wav\n"})
    done = command("speechiter.importers.kaldi", "d", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert read_idx2(tmp_path / "out" / "idx2wav") == {"r": "../audio/r.wav"}


# ------------------------------------------------------------------- errors


def test_pipe_is_refused_and_never_run(tmp_path):
    marker = tmp_path / "ran"
    write_audio(tmp_path / "r.wav", 0.5)
    data_dir = write_files(tmp_path / "d", **{"wav.scp": f"r r.wav\npiped touch {marker} |\n"})
    done = command("speechiter.importers.kaldi", data_dir, tmp_path / "out", "--root", tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert (f"1 piped command that speechiter does not read natively, never run by default: {data_dir / 'wav.scp'}:2 "
            f"(program 'touch'); pass --allow_commands") in done.stderr
    assert not marker.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("files, message", [
    ({"wav.scp": "r r.wav\nx y.ark:1234\n"}, "wav.scp:2: recording 'x' is an ark offset"),
    ({"wav.scp": "r r.wav\nr r.wav\n"}, "wav.scp:2: duplicate id 'r' (first on line 1)"),
    ({"wav.scp": "r r#1.wav\n"}, "wav.scp:1: 'r#1.wav' contains '#'"),
    ({"wav.scp": "r missing.wav\n"}, "wav.scp:1: no such audio file: "),
    ({"wav.scp": "r r.wav\n", "segments": "u r 0 1\nv q 0 1\n"},
     "segments:2: segment 'v': recording 'q' is not in wav.scp"),
    ({"wav.scp": "r r.wav\n", "segments": "u r 0.5 0.5\n"},
     "segments:1: segment 'u' ends at 0.5 s, not after its start"),
    ({"wav.scp": "r r.wav\n", "segments": "u r 0.6 0.2\n"}, "segments:1: segment 'u' ends at 0.2 s"),
    ({"wav.scp": "r r.wav\n", "segments": "u r 0 0.2\nu r 0.2 0.4\n"},
     "segments:2: duplicate id 'u' (first on line 1)"),
    ({"wav.scp": "r r.wav\n", "segments": "u r 0 x\n"}, "segments:1: end should be a number of seconds, but got 'x'"),
    ({"wav.scp": "r r.wav\n", "segments": "u r 0 0.2 9\n"}, "segments:1: expected 4 fields, got 5"),
    ({"wav.scp": "r r.wav\n", "segments": "u r 1.0 1.2\n"}, "segments:1: segment 'u' starts at 1.0 s, at or past the end of recording 'r'"),
    ({"wav.scp": "r r.wav\n", "segments": "u r 0.2 1.6\n"}, "segments:1: segment 'u' ends at 1.6 s, more than 0.5 s past"),
    ({"wav.scp": "r r.wav\n", "text": "r A\nr B\n"}, "text:2: duplicate id 'r' (first on line 1)"),
    ({"wav.scp": "r r.wav\n", "utt2spk": "r a\n", "spk2utt": "b r\n"},
     "spk2utt:1: utterance 'r' is under speaker 'b', but utt2spk says 'a'"),
    ({"segments": "u r 0 1\n"}, "no wav.scp"),
])
def test_bad_input_is_one_line_exit_2(kaldi, tmp_path, capsys, files, message):
    write_audio(tmp_path / "r.wav", 1.0)
    data_dir = write_files(tmp_path / "d", **files)
    assert run(kaldi, data_dir, tmp_path / "out", "--root", tmp_path) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{PROG}: error: ")
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()


def test_unreadable_audio_names_the_line(kaldi, tmp_path, capsys):
    (tmp_path / "bad.wav").write_bytes(b"not audio at all")
    data_dir = write_files(tmp_path / "d", **{"wav.scp": "r bad.wav\n"})
    assert run(kaldi, data_dir, tmp_path / "out", "--root", tmp_path) == 2
    err = capsys.readouterr().err
    assert f"{data_dir / 'wav.scp'}:1: {tmp_path / 'bad.wav'}: cannot read audio header" in err


# ------------------------------------------------ whole imports, clean input
# See NOTE [ Whole imports ] in speechiter/importers/writer.py.


def test_a_byte_order_mark_is_not_part_of_the_first_id(kaldi, tmp_path):
    write_audio(tmp_path / "r0.wav", 0.5)
    write_audio(tmp_path / "r1.wav", 0.5)
    data_dir = write_files(tmp_path / "d", **{"wav.scp": "\ufeffr0 r0.wav\nr1 r1.wav\n",
                                              "text": "\ufeffr0 HELLO\nr1 BYE\n", "utt2spk": "\ufeffr0 a\nr1 b\n"})
    assert run(kaldi, data_dir, tmp_path / "out", "--root", tmp_path) == 0
    assert list(read_idx2(tmp_path / "out" / "idx2wav")) == ["r0", "r1"]
    assert read_idx2(tmp_path / "out" / "idx2text") == {"r0": "HELLO", "r1": "BYE"}
    assert read_idx2(tmp_path / "out" / "idx2spk") == {"r0": "a", "r1": "b"}


def test_a_byte_order_mark_in_wav_scp_beside_segments(tmp_path):
    from speechiter.io.kaldi_segments import read_wav_scp

    write_files(tmp_path, **{"wav.scp": "\ufeffr0 r0.wav\n"})
    assert read_wav_scp(str(tmp_path / "wav.scp")) == {"r0": "r0.wav"}


@pytest.mark.parametrize("name, files", [
    ("wav.scp", {"wav.scp": ""}),
    ("wav.scp", {"wav.scp": "\n  \n"}),
    ("segments", {"wav.scp": "r r.wav\n", "segments": ""}),
])
def test_an_empty_file_is_named(kaldi, tmp_path, capsys, name, files):
    write_audio(tmp_path / "r.wav", 0.5)
    data_dir = write_files(tmp_path / "d", **files)
    assert run(kaldi, data_dir, tmp_path / "out", "--root", tmp_path) == 2
    err = capsys.readouterr().err
    assert f"{data_dir / name}: lists no " in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_reimport_replaces_the_earlier_import_as_a_whole(kaldi, tmp_path):
    write_audio(tmp_path / "r.wav", 0.5)
    write_audio(tmp_path / "s.wav", 0.25)
    first = write_files(tmp_path / "d1", **{"wav.scp": "r r.wav\n", "text": "r HI\n", "utt2spk": "r a\n"})
    second = write_files(tmp_path / "d2", **{"wav.scp": "s s.wav\n"})
    out = tmp_path / "out"
    assert run(kaldi, first, out, "--root", tmp_path) == 0
    (out / "notes.txt").write_text("mine\n")  # not the importer's: kept
    assert run(kaldi, second, out, "--root", tmp_path) == 0
    assert sorted(p.name for p in out.iterdir()) == ["idx2dur", "idx2wav", "idx2wav_len", "notes.txt"]
    assert read_idx2(out / "idx2wav") == {"s": "../s.wav"}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary folder left


def test_a_new_out_dir_appears_whole_with_the_usual_permissions(kaldi, tmp_path):
    write_audio(tmp_path / "r.wav", 0.5)
    data_dir = write_files(tmp_path / "d", **{"wav.scp": "r r.wav\n"})
    assert run(kaldi, data_dir, tmp_path / "new" / "out", "--root", tmp_path) == 0
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "new" / "out").stat().st_mode & 0o777 == 0o777 & ~umask
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["out"]


def test_a_zero_utt2dur_names_its_line(kaldi, tmp_path, capsys):
    write_audio(tmp_path / "r.wav", 0.5)
    data_dir = write_files(tmp_path / "d", **{"wav.scp": "r r.wav\n", "utt2dur": "r 0\n"})
    assert run(kaldi, data_dir, tmp_path / "out", "--root", tmp_path) == 2
    assert f"{data_dir / 'utt2dur'}:1: duration should be positive" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
