"""Tar shards indexed in place (WebDataset, Lhotse Shar, NeMo tarred audio): the same batches as the corpus
unpacked into plain files, locally and on S3; every input error named; a changed shard caught when read."""
import io
import json
import os
import tarfile
import uuid
from pathlib import Path

import pytest

from speechiter.errors import DataError
from speechiter.importers import nemo, shar, tar_index, webdataset
from speechiter.io import shards
from tests.io.test_pack import batches


def write_recipe(path: Path, corpus: Path) -> Path:
    path.write_text(f"""
train:
  type: block.BlockIterator
  conf:
    dataset_type: speech_text.SpeechTextDataset
    dataset_conf: {{main_data: {{feat: {corpus}/idx2wav, text: {corpus}/idx2text}}}}
    data_len: {corpus}/idx2wav_len
    batch_len: 48000
valid:
  type: abs.Iterator
  conf:
    dataset_type: speech_text.SpeechTextDataset
    dataset_conf: {{main_data: {{feat: {corpus}/idx2wav}}}}
""")
    return path


def table(path: Path) -> dict:
    return dict(line.rstrip("\n").split(" ", 1) for line in path.read_text().splitlines())


def audio_files(corpus: Path) -> dict:
    return {uid: corpus / value for uid, value in table(corpus / "idx2wav").items()}


def add_bytes(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


# ---------------------------------------------------------------- the three layouts, written as their tools do


def write_webdataset(corpus: Path, out: Path, num_shards=2, text="txt"):
    """WebDataset's layout: ``<key>.<ext>`` members, a sample's members together."""
    out.mkdir(parents=True, exist_ok=True)
    files, texts = audio_files(corpus), table(corpus / "idx2text")
    ids = sorted(files)
    names = []
    for s in range(num_shards):
        names.append(out / f"train-{s:06d}.tar")
        with tarfile.open(names[-1], "w", format=tarfile.GNU_FORMAT if s else tarfile.PAX_FORMAT) as archive:
            for uid in ids[s::num_shards]:
                archive.add(files[uid], arcname=f"{uid}{files[uid].suffix}")
                if text == "txt":
                    add_bytes(archive, f"{uid}.txt", texts[uid].encode())
                else:
                    add_bytes(archive, f"{uid}.json", json.dumps({"text": texts[uid], "id": uid}).encode())
    return names


def write_shar(corpus: Path, out: Path):
    """Lhotse's own ``CutSet.to_shar`` over cuts of the corpus's files."""
    pytest.importorskip("lhotse", reason="Shar is written with Lhotse's own to_shar: pip install lhotse")
    from lhotse import CutSet, Recording, SupervisionSegment

    texts, cuts = table(corpus / "idx2text"), []
    for uid, file in sorted(audio_files(corpus).items()):
        cut = Recording.from_file(file, recording_id=uid).to_cut()
        cut.id = uid
        cut.supervisions = [SupervisionSegment(f"{uid}-sup", uid, 0, cut.duration, text=texts[uid],
                                               speaker=uid.split("-")[0])]
        cuts.append(cut)
    out.mkdir(parents=True, exist_ok=True)
    CutSet.from_cuts(cuts).to_shar(out, fields={"recording": "flac"}, shard_size=6)
    return out


def write_nemo(corpus: Path, out: Path, num_shards=2):
    """NeMo's tarred layout: audio_N.tar and a manifest of member names with shard_id."""
    out.mkdir(parents=True, exist_ok=True)
    files, texts = audio_files(corpus), table(corpus / "idx2text")
    ids, lines = sorted(files), []
    for s in range(num_shards):
        with tarfile.open(out / f"audio_{s}.tar", "w") as archive:
            for uid in ids[s::num_shards]:
                archive.add(files[uid], arcname=files[uid].name)
                lines.append(json.dumps({"audio_filepath": files[uid].name, "duration": 1.0, "text": texts[uid],
                                         "shard_id": s}))
    (out / "tarred_audio_manifest.json").write_text("\n".join(lines) + "\n")
    return out / "tarred_audio_manifest.json"


def import_local(fmt: str, corpus: Path, root: Path) -> Path:
    out = root / "index"
    if fmt == "webdataset":
        write_webdataset(corpus, root / "wds")
        webdataset.import_webdataset([str(root / "wds" / "train-{000000..000001}.tar")], out)
    elif fmt == "shar":
        shar.import_shar(write_shar(corpus, root / "shar"), out)
    else:
        nemo.import_nemo(write_nemo(corpus, root / "nemo"), out, [str(root / "nemo" / "audio_{0..1}.tar")])
    shards.clear_shards()
    return out


@pytest.fixture(autouse=True)
def fresh_shards():
    shards.clear_shards()
    yield
    shards.clear_shards()


# --------------------------------------------------------------------------------------------- local


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fmt", ["webdataset", "shar", "nemo"])
def test_indexed_shards_give_the_batches_of_the_unpacked_corpus(tmp_path, make_corpus, fmt):
    corpus = make_corpus(tmp_path / "c", num=16, fmt="flac" if fmt == "webdataset" else "wav")
    index = import_local(fmt, corpus, tmp_path)
    assert table(index / "idx2wav_len") == table(corpus / "idx2wav_len")
    assert table(index / "idx2text") == table(corpus / "idx2text")
    assert all("#bytes=" in v for v in table(index / "idx2wav").values())
    assert len(json.loads((index / "shards.json").read_text())["shards"]) == (3 if fmt == "shar" else 2)
    original, indexed = write_recipe(tmp_path / "a.yaml", corpus), write_recipe(tmp_path / "b.yaml", index)
    want = batches(original, num_workers=0)
    assert batches(indexed, num_workers=0) == want
    assert batches(indexed, num_workers=0, engine="inline") == want
    assert batches(indexed, num_workers=2, thread_type="thread") == want


@pytest.mark.slow  # process workers
@pytest.mark.timeout(300)
@pytest.mark.parametrize("fmt", ["webdataset", "shar", "nemo"])
def test_indexed_shards_give_the_batches_of_the_unpacked_corpus_to_process_workers(tmp_path, make_corpus, fmt):
    corpus = make_corpus(tmp_path / "c", num=16, fmt="flac" if fmt == "webdataset" else "wav")
    index = import_local(fmt, corpus, tmp_path)
    original, indexed = write_recipe(tmp_path / "a.yaml", corpus), write_recipe(tmp_path / "b.yaml", index)
    want = batches(original, num_workers=0)
    assert batches(indexed, num_workers=2, thread_type="proc") == want
    assert batches(indexed, num_workers=4, thread_type="proc") == want
    assert batches(indexed, num_workers=2, engine="torch") == want
    assert batches(indexed, epoch=2, start_step=2, num_workers=2) == batches(original, epoch=2, num_workers=0)[2:]


@pytest.mark.timeout(120)
def test_webdataset_json_text_and_the_command_line(tmp_path, make_corpus, capsys):
    corpus = make_corpus(tmp_path / "c", num=6)
    names = write_webdataset(corpus, tmp_path / "wds", text="json")
    assert webdataset.main([*map(str, names), str(tmp_path / "out"), "--absolute"]) == 0
    assert "wrote idx2wav (6), idx2wav_len (6), idx2dur (6), idx2text (6), shards.json (2)" in capsys.readouterr().out
    assert table(tmp_path / "out" / "idx2text") == table(corpus / "idx2text")
    assert all(v.startswith(str(tmp_path / "wds")) for v in table(tmp_path / "out" / "idx2wav").values())


def test_brace_ranges_and_globs_expand_as_nemo_and_webdataset_do(tmp_path):
    assert tar_index.expand_shards(["a_{0..2}.tar"]) == ["a_0.tar", "a_1.tar", "a_2.tar"]
    assert tar_index.expand_shards(["s3://b/t-{008..010}.tar"]) == ["s3://b/t-008.tar", "s3://b/t-009.tar",
                                                                    "s3://b/t-010.tar"]
    assert tar_index.expand_shards(["audio__OP_0..1_CL_.tar"]) == ["audio_0.tar", "audio_1.tar"]
    for n in (1, 0):
        (tmp_path / f"x{n}.tar").write_bytes(b"")
    assert tar_index.expand_shards([str(tmp_path / "x*.tar")]) == [str(tmp_path / "x0.tar"), str(tmp_path / "x1.tar")]
    with pytest.raises(DataError, match=r"y\*.tar: matches no shard"):
        tar_index.expand_shards([str(tmp_path / "y*.tar")])
    assert tar_index.member_key("a/b.c.flac") == ("a/b", "c.flac")


# ------------------------------------------------------------------------------------------- errors


def run_webdataset(capsys, *args):
    code = webdataset.main([str(a) for a in args])
    return code, capsys.readouterr().err.strip()


@pytest.mark.timeout(120)
def test_input_errors_are_one_line_naming_the_shard_and_member(tmp_path, make_corpus, capsys):
    corpus = make_corpus(tmp_path / "c", num=6)
    names = write_webdataset(corpus, tmp_path / "wds")
    out = tmp_path / "out"
    prog = "python -m speechiter.importers.webdataset: error:"

    code, err = run_webdataset(capsys, names[0], tmp_path / "wds" / "nope.tar", out)
    assert code == 2 and err == f"{prog} {tmp_path}/wds/nope.tar: no such shard"

    code, err = run_webdataset(capsys, names[0], names[0], out)
    assert code == 2 and f"{names[0]}: sample 'spk001-0001-0001': key 'spk001-0001-0001' occurs twice (first at " \
                         f"{names[0]}: sample" in err

    bad = tmp_path / "bad.tar"
    with tarfile.open(bad, "w") as archive:
        archive.add(audio_files(corpus)["spk001-0001-0001"], arcname="u1.wav")
        add_bytes(archive, "u2.wav", b"this is text, not a WAV file" * 20)
    code, err = run_webdataset(capsys, bad, out)
    assert code == 2 and err.startswith(f"{prog} {bad}: member u2.wav: not audio speechiter reads")

    data = bytearray(names[1].read_bytes())  # GNU format: one header block before each member's data
    header = list(tar_index.TarShard(str(names[1])).members())[2].first - 512
    data[header + 3] ^= 0x55  # a byte of the name: the checksum no longer matches
    corrupt = tmp_path / "corrupt.tar"
    corrupt.write_bytes(bytes(data))
    code, err = run_webdataset(capsys, corrupt, out)
    assert code == 2 and err == (f"{prog} {corrupt}: corrupt tar header at byte {header} (bad checksum or not a tar "
                                 f"header); the members after it cannot be found"), err
    assert not out.exists()  # nothing written on an error

    notext = tmp_path / "notext.tar"
    with tarfile.open(notext, "w") as archive:
        archive.add(audio_files(corpus)["spk001-0001-0001"], arcname="u1.wav")
        archive.add(audio_files(corpus)["spk001-0001-0002"], arcname="u2.wav")
        add_bytes(archive, "u2.txt", b"HELLO")
        add_bytes(archive, "u3.txt", b"NO AUDIO")
    code, err = run_webdataset(capsys, notext, out)
    assert code == 0 and err.splitlines() == [
        "python -m speechiter.importers.webdataset: warning: 1 samples have text but no audio member and were "
        "dropped",
        "python -m speechiter.importers.webdataset: warning: 1 of 2 utterances have no entry in idx2text"]


@pytest.mark.timeout(120)
def test_shar_and_nemo_errors_name_the_cut_and_the_manifest_line(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "c", num=4)
    shar_dir = write_shar(corpus, tmp_path / "shar")
    os.unlink(shar_dir / "recording.000000.tar")
    with pytest.raises(DataError, match=r"shar/recording.000000.tar: no such shard$"):
        shar.import_shar(shar_dir, tmp_path / "out")
    manifest = write_nemo(corpus, tmp_path / "nemo")
    lines = manifest.read_text().splitlines()
    entry = json.loads(lines[1])
    entry["audio_filepath"] = "missing.wav"
    manifest.write_text("\n".join([lines[0], json.dumps(entry), *lines[2:]]) + "\n")
    with pytest.raises(DataError, match=rf"^{manifest}:2: member 'missing.wav' is not in .*audio_0.tar$"):
        nemo.import_nemo(manifest, tmp_path / "out")
    entry["shard_id"] = 7
    manifest.write_text("\n".join([lines[0], json.dumps(entry), *lines[2:]]) + "\n")
    with pytest.raises(DataError, match=rf"^{manifest}:2: shard_id 7 names no tar among the 2 given$"):
        nemo.import_nemo(manifest, tmp_path / "out")


@pytest.mark.timeout(120)
def test_a_shard_that_changed_after_indexing_is_named_when_read(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "c", num=8)
    index = import_local("nemo", corpus, tmp_path)
    recipe = write_recipe(tmp_path / "b.yaml", index)
    assert batches(recipe, num_workers=0) == batches(write_recipe(tmp_path / "a.yaml", corpus), num_workers=0)
    shards.clear_shards()
    with open(tmp_path / "nemo" / "audio_1.tar", "ab") as f:
        f.write(b"\0" * 512)
    with pytest.raises(DataError, match=r"nemo/audio_1.tar: the shard changed after it was imported \(\d+ bytes, "
                                        r"shards.json says \d+\); import the shards again \(python -m "
                                        r"speechiter.importers.nemo ... .*index\)"):
        batches(recipe, num_workers=0)


# ----------------------------------------------------------------------------------------------- S3


def upload(s3_client, bucket: str, folder: Path, prefix: str):
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        s3_client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder).as_posix()}")


@pytest.mark.slow  # the S3 server
@pytest.mark.usefixtures("localhost_only")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("fmt", ["webdataset", "shar", "nemo"])
def test_shards_on_s3_are_indexed_with_ranged_reads_and_give_the_batches(tmp_path, make_corpus, s3_client, s3_proxy,
                                                                          monkeypatch, fmt):
    corpus = make_corpus(tmp_path / "c", num=12, fmt="flac" if fmt == "webdataset" else "wav")
    bucket = f"speechiter-tars-{uuid.uuid4().hex[:12]}"
    s3_client.create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/data"
    if fmt == "webdataset":
        write_webdataset(corpus, tmp_path / "d")
    elif fmt == "shar":
        write_shar(corpus, tmp_path / "d")
    else:
        write_nemo(corpus, tmp_path / "d")
    upload(s3_client, bucket, tmp_path / "d", "data")
    total = sum(p.stat().st_size for p in (tmp_path / "d").glob("*.tar"))
    monkeypatch.setattr(tar_index, "WINDOW", 2048)  # smaller than the audio members: their data is skipped
    fetched = []
    real = tar_index.read_range
    monkeypatch.setattr(tar_index, "read_range", lambda u, s, e: fetched.append(e - s) or real(u, s, e))
    index = tmp_path / "index"
    if fmt == "webdataset":
        webdataset.import_webdataset([f"{url}/train-{{000000..000001}}.tar"], index)
    elif fmt == "shar":
        shar.import_shar(url, index)
    else:
        nemo.import_nemo(tmp_path / "d" / "tarred_audio_manifest.json", index, [f"{url}/audio_{{0..1}}.tar"])
    assert fetched and max(fetched) <= 4096 and sum(fetched) < total / 2, (fetched, total)
    assert all(v.startswith(f"{url}/") for v in table(index / "idx2wav").values())
    records = json.loads((index / "shards.json").read_text())["shards"]
    assert all(k.startswith(url) and r["etag"] for k, r in records.items())
    shards.clear_shards()
    original, indexed = write_recipe(tmp_path / "a.yaml", corpus), write_recipe(tmp_path / "b.yaml", index)
    want = batches(original, num_workers=0)
    assert batches(indexed, num_workers=0) == want
    assert batches(indexed, num_workers=2, thread_type="proc") == want
    assert batches(indexed, epoch=2, start_step=1, num_workers=2, thread_type="thread") == \
        batches(original, epoch=2, num_workers=0)[1:]
    key = next(iter(records)).split(f"{bucket}/", 1)[1]
    data = s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
    s3_client.put_object(Bucket=bucket, Key=key, Body=data[:-1] + b"\1")  # same size, another ETag
    shards.clear_shards()
    with pytest.raises(DataError, match=r"the shard changed after it was imported \(its ETag is no longer"):
        batches(indexed, num_workers=0)
