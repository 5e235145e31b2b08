"""The "Large corpora" section's examples run as written (handbook.md, or the draft beside the issue)."""
import os
import re
import shutil
import shlex
import subprocess
import sys

import h5py
import numpy as np
import pytest
import soundfile

import speechiter
from speechiter.io.read import read_feat

from ..conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # the handbook's large-corpus commands, one against an S3 server

def section():
    handbook = REPO_ROOT / "handbook.md"
    text = handbook.read_text() if handbook.is_file() else ""
    assert "## Large corpora" in text, "handbook.md has no Large corpora section"
    text = text.split("## Large corpora", 1)[1]
    return re.split(r"\n## ", text, maxsplit=1)[0]


def example(name):
    match = re.search(rf"<!-- example: {name} -->\n```[a-z]*\n(.*?)```", section(), re.S)
    assert match, f"example {name} not found"
    return match.group(1)


def commands(name):
    """The example's shell lines, minus exports and comments, as argv lists."""
    lines = example(name).replace("\\\n", " ").splitlines()
    return [shlex.split(line.split("#", 1)[0]) for line in lines if line.strip() and not line.startswith("export")]


def run(argv, cwd):
    argv = [sys.executable if argv[0] == "python" else argv[0], *argv[1:]]
    if argv[1].startswith("tools/"):
        argv[1] = str(REPO_ROOT / argv[1])
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def recording(path, seconds=20.0, sr=16000):
    x = (np.random.RandomState(0).randn(int(seconds * sr), 1) * 3000).astype(np.int16)
    soundfile.write(str(path), x, sr, subtype="PCM_16")
    return x


def test_segment_values(tmp_path):
    x = recording(tmp_path / "rec1.flac")
    with h5py.File(tmp_path / "pack.hdf5", "w") as f:
        f.create_dataset("rec2", data=x).attrs["sample_rate"] = 16000
    full = x.astype(np.float32) / 32768
    expected = {"utt1": full[197440:250720], "utt2": full[250720:], "utt3": full[24000:40000]}
    for line in example("idx2wav").splitlines():
        utt, value = line.split()
        np.testing.assert_array_equal(read_feat(str(tmp_path / value)), expected[utt])


@pytest.mark.timeout(300)
def test_kaldi_examples(tmp_path, monkeypatch):
    data = tmp_path / "data" / "train"
    data.mkdir(parents=True)
    recording(tmp_path / "rec1.wav")
    (data / "wav.scp").write_text("rec1 rec1.wav\n")
    (data / "segments").write_text("u1 rec1 0.5 3.25\nu2 rec1 3.25 7\nu3 rec1 7 -1\n")
    (data / "text").write_text("u1 a\nu2 b\nu3 c\n")
    for argv in commands("kaldi"):
        run(argv, tmp_path)
    assert (data / "segments_len").read_text() == "u1 44000\nu2 60000\nu3 208000\n"
    shutil.copytree(data, tmp_path / "data" / "dev")  # the example's valid group reads data/dev
    (tmp_path / "cfg.yaml").write_text(example("kaldi_cfg"))
    monkeypatch.chdir(tmp_path)
    train = speechiter.build_iterators(speechiter.load_config("cfg.yaml"), num_workers=0)["train"]
    assert sorted(int(n) for b in train.build_loader(epoch=1) for n in b["feat_len"]) == [44000, 60000, 208000]
    for argv in commands("import_kaldi"):
        run(argv, tmp_path)
    assert (tmp_path / "corpora" / "train" / "idx2wav").read_text().startswith("u1 ../../rec1.wav#t=0.5,3.25\n")


@pytest.mark.timeout(300)
def test_s3_example(s3_corpus, tmp_path, fresh_storage):
    corpora = tmp_path / "corpora" / "train"
    corpora.mkdir(parents=True)
    lines = (s3_corpus.local / "idx2wav").read_text().splitlines()
    (corpora / "idx2wav").write_text("".join(f"{i} {s3_corpus.url}/{p}\n" for i, p in (l.split() for l in lines)))
    (corpora / "idx2text").write_bytes((s3_corpus.local / "idx2text").read_bytes())
    (tmp_path / "asr_s3.yaml").write_text(
        "test:\n  s3:\n    type: block.BlockIterator\n    conf:\n"
        "      dataset_type: speech_text.SpeechTextDataset\n      dataset_conf:\n"
        "        main_data: {feat: corpora/train/idx2wav, text: corpora/train/idx2text}\n"
        "      data_len: corpora/train/idx2wav_len\n      batch_len: 50000\n")
    for argv in commands("s3"):
        if "speechiter.run" in argv:
            argv += ["--mode", "test", "--dump_batches", "dump.jsonl"]
        run(argv, tmp_path)
    assert (corpora / "idx2wav_len").read_text() == (s3_corpus.local / "idx2wav_len").read_text()
    dump = (tmp_path / "dump.jsonl").read_text()
    assert dump.count("\n") >= 3 and "testing-secret-key" not in dump
