"""Time-range values (``path#t=start,end``) and Kaldi ``segments`` + ``wav.scp`` read as is."""
from decimal import ROUND_HALF_UP, Decimal

import h5py
import numpy as np
import pytest
import soundfile

import speechiter
from speechiter.io import flac
from speechiter.io.read import data_num_frames, read_feat
from speechiter.dump import checksum
from speechiter.errors import DataError
from speechiter.paths import resolve_data_path
from speechiter.io.source import split_time_range

from tests.conftest import load_tool
from tests.recipes import entry, write_recipe

SR = 22050


def half_up(x):
    return int(Decimal(round(x, 8)).quantize(0, rounding=ROUND_HALF_UP))


def rule(start, end, frames, sr):
    """The documented sample rule, written out independently."""
    first = half_up(start * sr)
    count = frames - first if end is None else min(half_up((end - start) * sr), frames - first)
    return first, count


def write_recording(path, seconds, sr=SR, channels=1, seed=0):
    x = (np.random.RandomState(seed).randn(int(seconds * sr), channels) * 4000).astype(np.int16)
    soundfile.write(str(path), x, sr, subtype="PCM_16")
    return soundfile.read(str(path), dtype="float32", always_2d=True)[0]


RANGES = [(0.01, 0.02), (0.5, 1.25), (0, 0.3333), (1.2345, None), (2.8, 3.2)]  # the last overshoots 0.2 s


@pytest.mark.parametrize("fmt", ["wav", "flac", "flac-libsndfile", "hdf5"])
@pytest.mark.parametrize("channels", [1, 2])
def test_samples_equal_the_full_read_sliced_by_the_rule(tmp_path, monkeypatch, fmt, channels):
    if fmt == "flac-libsndfile":
        monkeypatch.setattr(flac, "_lib", None)
    suffix = fmt.split("-")[0]
    full = write_recording(tmp_path / f"rec.{'wav' if suffix == 'hdf5' else suffix}", 3.0, channels=channels)
    path = tmp_path / f"rec.{suffix}"
    if suffix == "hdf5":
        with h5py.File(path, "w") as f:
            pcm = soundfile.read(str(tmp_path / "rec.wav"), dtype="int16", always_2d=True)[0]
            f.create_dataset("rec", data=pcm, chunks=(1024, channels)).attrs["sample_rate"] = SR
        path = f"{path}:rec"
    for start, end in RANGES:
        value = f"{path}#t={start}" + ("" if end is None else f",{end}")
        first, count = rule(start, end, full.shape[0], SR)
        x = read_feat(value)
        assert x.dtype == np.float32 and x.shape == (count, channels)
        np.testing.assert_array_equal(x, full[first:first + count])
        assert data_num_frames(value) == (count, SR)


def test_segment_is_resampled_like_a_file(tmp_path):
    full = write_recording(tmp_path / "rec.flac", 2.0)
    first, count = rule(0.5, 1.5, full.shape[0], SR)
    soundfile.write(str(tmp_path / "cut.wav"), full[first:first + count], SR, subtype="PCM_16")
    np.testing.assert_array_equal(read_feat(f"{tmp_path / 'rec.flac'}#t=0.5,1.5", 16000),
                                  read_feat(str(tmp_path / "cut.wav"), 16000))


@pytest.mark.parametrize("value, message", [
    ("rec.wav#t=2,1", "ends at 1.0 s, not after its start"),
    ("rec.wav#t=5,6", "starts at 5.0 s, at or past the end of the file"),
    ("rec.wav#t=1,4", "more than 0.5 s past the end"),
])
def test_bad_ranges_name_the_file(tmp_path, value, message):
    write_recording(tmp_path / "rec.wav", 3.0)
    for read in (read_feat, data_num_frames):
        with pytest.raises(DataError, match=message) as e:
            read(str(tmp_path / value))
        assert "rec.wav" in str(e.value) and "\n" not in str(e.value)


def test_npy_and_unrated_hdf5_ranges_are_refused(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((100, 1), np.float32))
    with h5py.File(tmp_path / "p.hdf5", "w") as f:
        f["k"] = np.zeros(100, np.int16)
    with pytest.raises(DataError, match="npy/npz files store none"):
        read_feat(f"{tmp_path / 'a.npy'}#t=0,0.001")
    with pytest.raises(DataError, match="needs the dataset's sample_rate attribute"):
        read_feat(f"{tmp_path / 'p.hdf5'}:k#t=0,0.001")
    with pytest.raises(DataError, match="needs a sample rate"):
        data_num_frames(f"{tmp_path / 'a.npy'}#t=0,0.001")


def test_split_time_range_and_paths():
    assert split_time_range("a.wav#t=1.5,2") == ("a.wav", (1.5, 2.0))
    assert split_time_range("a.wav#t=npt:3") == ("a.wav", (3.0, None))
    assert split_time_range("a#b.wav") == ("a#b.wav", None)
    assert resolve_data_path("x/a.wav#t=1,2", "/d/idx2wav") == "/d/x/a.wav#t=1,2"
    assert resolve_data_path("p.hdf5:k#t=1", "/d/idx2wav") == "/d/p.hdf5:k#t=1"
    assert resolve_data_path("s3://b/a.wav#t=1,2", "/d/idx2wav") == "s3://b/a.wav#t=1,2"


# ----------------------------------------------------------------- Kaldi dirs

SEGMENTS = [  # utt, recording, start, end (Kaldi text)
    ("a-001", "a", "0.00", "1.37"), ("a-002", "a", "1.37", "2.905"), ("a-003", "a", "3.1", "-1"),
    ("b-001", "b", "0.25", "0.99"), ("b-002", "b", "1.0", "2.6"), ("c-001", "c", "0.5", "2.25"),
    ("c-002", "c", "2.25", "4.1"),  # c is 4 s long: 0.1 s overshoot, clipped
]


def kaldi_dir(root):
    """A Kaldi data dir of three recordings (flac, wav) and, beside it, the
    same segments cut into separate wav files with idx2 files."""
    data, cut = root / "kaldi", root / "cut"
    data.mkdir()
    cut.mkdir()
    full = {"a": write_recording(root / "a.flac", 4.5, seed=1), "b": write_recording(root / "b.wav", 3.0, seed=2),
            "c": write_recording(root / "c.flac", 4.0, seed=3)}
    (data / "wav.scp").write_text(f"a {root / 'a.flac'}\nb {root / 'b.wav'}\nc {root / 'c.flac'}\n")
    (data / "segments").write_text("".join(f"{u} {r} {s} {e}\n" for u, r, s, e in SEGMENTS))
    (data / "text").write_text("".join(f"{u} words of {u}\n" for u, *_ in SEGMENTS))
    for utt, rec, start, end in SEGMENTS:
        first, count = rule(float(start), None if end == "-1" else float(end), full[rec].shape[0], SR)
        soundfile.write(str(cut / f"{utt}.wav"), full[rec][first:first + count], SR, subtype="PCM_16")
    (cut / "idx2wav").write_text("".join(f"{u} {u}.wav\n" for u, *_ in SEGMENTS))
    (cut / "idx2text").write_text((data / "text").read_text())
    return data, cut


def write_data_cfg(cfg, feat, text, data_len):
    """A test set ``set1`` (shuffled, speed-perturbed blocks) over the given files."""
    iterator = entry(None, data={"feat": str(feat), "text": str(text)}, data_len=str(data_len), shuffle=True,
                     dataset_conf={"sample_rate": 16000, "use_speed_perturb": True}, batch_len=60000)
    return write_recipe(cfg, None, train=False, valid=None, test={"set1": iterator})


def load_batches(tmp_path, name, feat, text, data_len, workers=0):
    cfg = tmp_path / f"{name}.yaml"
    write_data_cfg(cfg, feat, text, data_len)
    iterator = speechiter.build_iterators(speechiter.load_config(cfg), seed=3, num_workers=workers)["test"]["set1"]
    return [(list(b["text"]), checksum(b)) for epoch in (1, 2) for b in iterator.build_loader(epoch=epoch)]


PIPED_WAV_SCP = "a flac -c -d -s {d}/a.flac |\nb cat {d}/b.wav |\nc sox {d}/c.flac -t wav - |\n"


@pytest.mark.slow  # process workers
@pytest.mark.timeout(120)
@pytest.mark.parametrize("piped", [False, True], ids=["paths", "pipes"])
def test_kaldi_dir_loads_the_same_batches_as_cut_files(tmp_path, piped):
    data, cut = kaldi_dir(tmp_path)
    if piped:  # NOTE [ Piped values ] in speechiter/io/pipes.py: read natively, no shell
        (data / "wav.scp").write_text(PIPED_WAV_SCP.format(d=tmp_path))
    data_len = load_tool("data_len")
    data_len.data_len(data / "segments", sample_rate=16000)
    data_len.data_len(cut / "idx2wav", sample_rate=16000)
    assert (data / "segments_len").read_text() == (cut / "idx2wav_len").read_text()
    kaldi = load_batches(tmp_path, "kaldi", data / "segments", data / "text", data / "segments_len")
    files = load_batches(tmp_path, "cut", cut / "idx2wav", cut / "idx2text", cut / "idx2wav_len")
    assert kaldi == files and len(files) > 4
    assert load_batches(tmp_path, "kaldi2", data / "segments", data / "text", data / "segments_len", 2) == files


@pytest.mark.parametrize("line, expected", [
    ("a a.wav", "{d}/a.wav#t=0.1"),
    ("a flac -c -d -s a.wav |", "flac -c -d -s {d}/a.wav |#t=0.1"),  # the input of a pipe read natively
    ("a mycmd a.wav |", "mycmd a.wav |#t=0.1"),  # an unknown command: as written
])
def test_relative_wav_scp_paths_resolve_against_the_current_folder(tmp_path, monkeypatch, line, expected):
    full = write_recording(tmp_path / "a.wav", 1.0)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "wav.scp").write_text(f"{line}\n")
    monkeypatch.chdir(tmp_path)
    value = resolve_data_path("a 0.1 -1", tmp_path / "d" / "segments")
    assert value == expected.format(d=tmp_path)
    if "mycmd" not in line:
        np.testing.assert_array_equal(read_feat(value), full[2205:])


@pytest.mark.parametrize("wav_scp, segment, message", [
    ("b b.wav\na foo.ark:123\n", "a 0 1", r"wav.scp:2: recording 'a' is an ark offset"),
    ("a a.wav\na b.wav\n", "a 0 1", r"wav.scp:2: duplicate recording id 'a'"),
    ("a\n", "a 0 1", r"wav.scp:1: recording 'a' has no path"),
    ("a a.wav\n", "b 0 1", r"segments: recording 'b' is not in the wav.scp beside it"),
    ("a a.wav\n", "a 0", r"segments: expected '<utt> <recording> <start> <end>'"),
    ("a a.wav\n", "a 0 x", r"segments: recording 'a': 'x' is not a number of seconds"),
    (None, "a 0 1", r"wav.scp: no such file \(a Kaldi segments file needs the wav.scp beside it\)"),
])
def test_kaldi_errors_name_the_file_and_line(tmp_path, wav_scp, segment, message):
    marker = tmp_path / "ran"
    if wav_scp is not None:
        (tmp_path / "wav.scp").write_text(wav_scp.replace("sox", f"touch {marker};"))
    with pytest.raises(DataError, match=message):
        resolve_data_path(segment, tmp_path / "segments")
    assert not marker.exists()


def test_piped_wav_scp_is_refused_when_the_dataset_is_built(tmp_path):
    data, cut = kaldi_dir(tmp_path)
    marker = tmp_path / "ran"
    (data / "wav.scp").write_text(f"a touch {marker} |\n")
    cfg = tmp_path / "p.yaml"
    write_data_cfg(cfg, data / "segments", data / "text", cut / "idx2wav_len")
    load_tool("data_len").data_len(cut / "idx2wav")
    with pytest.raises(DataError, match=r"1 piped command that speechiter does not read natively, never run by "
                                        r"default: \S+wav.scp:1 \(program 'touch'\)"):
        speechiter.build_iterators(speechiter.load_config(cfg), num_workers=0)
    assert not marker.exists()


def test_data_len_tool_on_segment_values(tmp_path, capsys):
    full = write_recording(tmp_path / "rec.wav", 2.0)
    (tmp_path / "idx2wav").write_text("u1 rec.wav#t=0.01,0.02\nu2 rec.wav#t=1.5\nu3 rec.wav#t=0.5,9\n")
    tool = load_tool("data_len")
    assert tool.main([str(tmp_path / "idx2wav"), "-o", str(tmp_path / "out")]) == 2
    assert "utterance 'u3'" in capsys.readouterr().err
    (tmp_path / "idx2wav").write_text("u1 rec.wav#t=0.01,0.02\nu2 rec.wav#t=1.5\n")
    assert tool.main([str(tmp_path / "idx2wav")]) == 0
    assert (tmp_path / "idx2wav_len").read_text() == f"u1 221\nu2 {full.shape[0] - 33075}\n"
