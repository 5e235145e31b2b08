"""What a dataset refuses when it is built, not when a batch first reads it: unknown piped commands of an
imported idx2wav, wav.scp files missing from the folder the run started in; and a piped value behind
segments, which is a command, never a path joined to the idx2 file's folder."""
import os
import sys

import numpy as np
import pytest
import soundfile

import speechiter
from speechiter.errors import DataError
from speechiter.importers import kaldi

from tests.io.test_pipes import WAV_WRITER
from tests.recipes import entry, write_recipe


def _loader(tmp_path, feat, name="r.yaml", **dataset_conf):
    cfg = write_recipe(tmp_path / name, None, train=False, valid=None, test={"set1": entry(
        None, type="abs.Iterator", data={"feat": str(feat)}, data_len=False,
        dataset_conf={"sample_rate": 16000, **dataset_conf})})
    return speechiter.build_iterators(speechiter.load_config(cfg), num_workers=0)["test"]["set1"]


def _batches(loader):
    return {uid: b["feat"][0, :b["feat_len"][0]] for b in loader.build_loader(epoch=1) for uid in b.ids}


@pytest.fixture
def kaldi_on_path(tmp_path, monkeypatch):
    """A Kaldi data dir whose wav.scp pipes through ``mywav``, a program found on PATH only, with segments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "mywav"
    program.write_text(f"#!{sys.executable}\n{WAV_WRITER}")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    x = (np.random.default_rng(3).standard_normal(16000) * 3000).astype(np.int16)
    soundfile.write(tmp_path / "r.wav", x, 16000)
    data = tmp_path / "data"
    data.mkdir()
    (data / "wav.scp").write_text(f"r mywav {tmp_path / 'r.wav'} |\n")
    (data / "segments").write_text("u1 r 0.1 0.5\nu2 r 0.5 0.9\n")
    return data


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_piped_value_behind_segments_runs_its_command_from_path(tmp_path, kaldi_on_path, capsys):
    out = tmp_path / "out"
    assert kaldi.main([str(kaldi_on_path), str(out), "--allow_commands"]) == 0
    assert (out / "idx2wav").read_text().startswith(f"u1 mywav {tmp_path / 'r.wav'} |#t=0.1,0.5\n")
    got = _batches(_loader(tmp_path, out / "idx2wav", allow_commands=True))
    x = soundfile.read(tmp_path / "r.wav", dtype="float32")[0]
    np.testing.assert_array_equal(got["u1"][:, 0], x[1600:8000])
    np.testing.assert_array_equal(got["u2"][:, 0], x[8000:14400])


def imported(tmp_path):
    """The idx2wav the Kaldi importer writes for kaldi_on_path's directory with --allow_commands (written
    here, without running the command for its lengths)."""
    out = tmp_path / "out"
    out.mkdir()
    wav = tmp_path / "r.wav"
    (out / "idx2wav").write_text(f"u1 mywav {wav} |#t=0.1,0.5\nu2 mywav {wav} |#t=0.5,0.9\n")
    return out / "idx2wav"


def test_unknown_commands_of_an_imported_idx2wav_are_refused_at_build(tmp_path):
    idx2wav = imported(tmp_path)
    with idx2wav.open("a") as f:
        f.write(f"v1 sox {tmp_path / 'r.wav'} -t wav -r 8000 - |#t=0,0.5\n")  # native: not refused
        f.write("".join(f"w{i} touch {tmp_path / 'ran'} |#t=0,1\n" for i in range(3)))
    with pytest.raises(DataError, match=rf"^5 piped commands that speechiter does not read natively, never run by "
                                        rf"default: {idx2wav}:1 \(program 'mywav'\), {idx2wav}:2 \(program "
                                        rf"'mywav'\), {idx2wav}:4 \(program 'touch'\) and 2 more; set the "
                                        rf"dataset's allow_commands: true"):
        _loader(tmp_path, idx2wav)
    assert not (tmp_path / "ran").exists()
    (tmp_path / "sel").write_text("u1 no\nu2 no\nv1 yes\nw0 no\nw1 no\nw2 no\n")  # a selection without them:
    _loader(tmp_path, idx2wav, name="s.yaml", data_selection=["group", "yes", str(tmp_path / "sel")]).close()


def test_unknown_commands_are_found_in_a_mapped_idx2wav(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEECHITER_INDEX_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPEECHITER_INDEX_MIN_ROWS", "0")
    idx2wav = imported(tmp_path)
    os.utime(idx2wav, ns=(0, 0))  # settled: the cache maps it
    for name in ("a.yaml", "b.yaml"):  # the first run writes the entry, the second maps it
        with pytest.raises(DataError, match=r"^2 piped commands .*idx2wav:1 \(program 'mywav'\)"):
            _loader(tmp_path, idx2wav, name=name)
    assert any(p.suffix == ".idx2" for p in (tmp_path / "cache").iterdir())


def test_wav_scp_files_missing_from_the_current_folder_are_named_at_build(tmp_path, monkeypatch):
    data = tmp_path / "s5" / "data"
    data.mkdir(parents=True)
    (tmp_path / "s5" / "db").mkdir()
    x = np.zeros(16000, np.int16) + 100
    for name in ("a", "b", "c", "d"):
        soundfile.write(tmp_path / "s5" / "db" / f"{name}.wav", x, 16000)
    (data / "wav.scp").write_text("a db/a.wav\nb cat db/b.wav |\nc db/c.wav\nd db/d.wav\n")
    (data / "segments").write_text("u1 a 0 0.5\nu2 b 0 0.5\nu3 c 0 0.5\nu4 d 0 0.5\n")
    monkeypatch.chdir(tmp_path / "s5")
    assert len(_batches(_loader(tmp_path, data / "segments"))) == 4
    monkeypatch.chdir(tmp_path)  # the run starts elsewhere
    scp = data / "wav.scp"
    with pytest.raises(DataError, match=rf"^4 audio files of {scp} do not exist: {scp}:1 \(db/a.wav\), {scp}:2 "
                                        rf"\(db/b.wav\), {scp}:3 \(db/c.wav\) and 1 more; relative paths are read "
                                        rf"from the current folder, as in Kaldi, and were tried in {tmp_path}: "
                                        rf"start the run from the recipe's folder"):
        _loader(tmp_path, data / "segments", name="elsewhere.yaml")
    (tmp_path / "s5" / "db" / "d.wav").unlink()
    monkeypatch.chdir(tmp_path / "s5")
    with pytest.raises(DataError, match=rf"^1 audio file of {scp} does not exist: {scp}:4 \(db/d.wav\); relative"):
        _loader(tmp_path, data / "segments", name="gone.yaml")


def test_commands_with_shell_metacharacters_are_refused_at_build_and_never_run(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "c", num=5)
    rows = [line.split() for line in (corpus / "idx2wav").read_text().splitlines()]
    marker = tmp_path / "ran"
    tricks = [f"cat {{}} ; touch {marker} |", f"cat {{}} && touch {marker} |", f"cat $(touch {marker}) {{}} |",
              f"cat `touch {marker}` {{}} |", f"flac -c -d -s {{}} > {marker} |"]
    idx2wav = corpus / "idx2wav_tricks"
    idx2wav.write_text("".join(f"{u} {trick.format(corpus / v)}\n" for (u, v), trick in zip(rows, tricks)))
    with pytest.raises(DataError, match=rf"^5 piped commands .*{idx2wav}:1 \(a pipeline, redirection or shell "
                                        rf"variable\), {idx2wav}:2 \(a pipeline"):
        _loader(tmp_path, idx2wav)
    assert not marker.exists()
