"""Piped values in a dataset: given directly in idx2wav, and in the wav.scp behind a Kaldi segments file."""
import os
import sys

import pytest

import speechiter
from speechiter.dump import checksum
from speechiter.errors import ConfigError, DataError

from tests.conftest import load_tool
from tests.io.test_pipes import WAV_WRITER
from tests.io.test_segments import SEGMENTS, kaldi_dir
from tests.recipes import entry, write_recipe


def batches(tmp_path, corpus, idx2wav, workers=0, **dataset_conf):
    iterator = entry(None, data={"feat": str(idx2wav), "text": str(corpus / "idx2text")},
                     data_len=str(corpus / "idx2wav_len"), shuffle=True, batch_len=40000,
                     dataset_conf={"sample_rate": 16000, **dataset_conf})
    cfg = write_recipe(tmp_path / f"r{len(list(tmp_path.glob('r*.yaml')))}.yaml", None, train=False, valid=None,
                       test={"set1": iterator})
    loader = speechiter.build_iterators(speechiter.load_config(cfg), seed=1, num_workers=workers)["test"]["set1"]
    return [(list(b.ids), checksum(b)) for b in loader.build_loader(epoch=1)]


def piped_idx2wav(corpus, name, template):
    """idx2wav with each path (made absolute) inside ``template``."""
    lines = (corpus / "idx2wav").read_text().splitlines()
    rows = [line.split(" ", 1) for line in lines]
    (corpus / name).write_text("".join(f"{u} {template.format(corpus / p)}\n" for u, p in rows))
    return corpus / name


@pytest.mark.slow  # commands run as processes, process workers
@pytest.mark.timeout(120)
def test_piped_values_in_idx2wav_load_the_same_batches(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "corpus", num=12)
    plain = batches(tmp_path, corpus, corpus / "idx2wav")
    for i, template in enumerate(["flac -c -d -s {} |", "cat {} |", "sox {} -t wav -b 16 - |",
                                  "/opt/kaldi/tools/sph2pipe_v2.5/sph2pipe -f wav -p {} |"]):
        idx2wav = piped_idx2wav(corpus, f"idx2wav_piped{i}", template)
        assert batches(tmp_path, corpus, idx2wav) == plain, template
    assert batches(tmp_path, corpus, idx2wav, workers=2) == plain


@pytest.mark.timeout(120)
def test_a_piped_value_reads_its_relative_file_from_the_current_folder(tmp_path, make_corpus, monkeypatch):
    corpus = make_corpus(tmp_path / "corpus", num=6)
    rows = [line.split(" ", 1) for line in (corpus / "idx2wav").read_text().splitlines()]
    monkeypatch.chdir(tmp_path)  # as in Kaldi: relative to where the job runs, not to the idx2 file's folder
    relative = [os.path.relpath(corpus / p, tmp_path) for _, p in rows]
    (corpus / "idx2wav_rel").write_text("".join(f"{u} flac -c -d -s {p} |\n" for (u, _), p in zip(rows, relative)))
    assert batches(tmp_path, corpus, corpus / "idx2wav_rel") == batches(tmp_path, corpus, corpus / "idx2wav")


@pytest.mark.slow  # commands run as processes
@pytest.mark.timeout(120)
def test_allowed_commands_in_idx2wav(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "corpus", num=6)
    (tmp_path / "w.py").write_text(WAV_WRITER)
    idx2wav = piped_idx2wav(corpus, "idx2wav_cmd", f"{sys.executable} {tmp_path / 'w.py'} {{}} |")
    with pytest.raises(DataError, match=r"^6 piped commands that speechiter does not read natively, never run by "
                                        r"default: .*idx2wav_cmd:1 \(program 'python.*set the dataset's "
                                        r"allow_commands: true"):  # when the dataset is built
        batches(tmp_path, corpus, idx2wav)
    assert batches(tmp_path, corpus, idx2wav, allow_commands=True) == batches(tmp_path, corpus, corpus / "idx2wav")
    with pytest.raises(ConfigError, match="allow_commands"):
        batches(tmp_path, corpus, idx2wav, allow_commands="yes")
    (tmp_path / "w.py").write_text("import sys; sys.stderr.write('disk on fire\\n'); sys.exit(4)")
    with pytest.raises(DataError, match=r"utterance \S+ \(feat from .*failed \(exit status 4\): disk on fire"):
        batches(tmp_path, corpus, idx2wav, allow_commands=True)


def test_unknown_commands_in_wav_scp_are_refused_at_build_all_at_once(tmp_path):
    data, cut = kaldi_dir(tmp_path)
    marker = tmp_path / "ran"
    (data / "wav.scp").write_text(f"a touch {marker} |\nb {tmp_path / 'b.wav'}\nc sox x.wav -t wav - speed 2 |\n")
    load_tool("data_len").data_len(cut / "idx2wav")
    cfg = tmp_path / "p.yaml"
    write_recipe(cfg, None, train=False, valid=None, test={"set1": entry(
        None, data={"feat": str(data / "segments"), "text": str(data / "text")}, data_len=False)})
    wav_scp = data / "wav.scp"
    with pytest.raises(DataError, match=rf"2 piped commands that speechiter does not read natively, never run by "
                                        rf"default: {wav_scp}:1 \(program 'touch'\), {wav_scp}:3 \(sox effect "
                                        rf"'speed 2'\); set the dataset's allow_commands: true"):
        speechiter.build_iterators(speechiter.load_config(cfg), num_workers=0)
    assert not marker.exists() and len(SEGMENTS) == 7


def test_data_len_names_wav_scp_not_an_utterance(tmp_path, capsys):
    data, _ = kaldi_dir(tmp_path)
    (data / "wav.scp").write_text(f"a {tmp_path / 'a.flac'}\nb mycmd {tmp_path / 'b.wav'} |\n"
                                  f"c sox {tmp_path / 'c.flac'} -t wav -r 8000 - |\n")
    tool = load_tool("data_len")
    assert tool.main([str(data / "segments")]) == 2
    err = capsys.readouterr().err
    assert f"1 piped command that speechiter does not read natively, never run by default: {data}/wav.scp:2 " \
           f"(program 'mycmd'); pass --allow_commands" in err and "utterance" not in err
    (data / "wav.scp").write_text(f"a {tmp_path / 'a.flac'}\nb {tmp_path / 'b.wav'}\n"
                                  f"c sox {tmp_path / 'c.flac'} -t wav -r 8000 - |\n")
    assert tool.main([str(data / "segments")]) == 0
    lengths = dict(line.split() for line in (data / "segments_len").read_text().splitlines())
    assert lengths["c-001"] == "14000"  # 1.75 s at sox's 8000 Hz
