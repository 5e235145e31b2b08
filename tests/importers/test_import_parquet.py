"""Parquet files (Hugging Face datasets) indexed in place: the same batches as the corpus as plain files, for
byte-range rows (uncompressed PLAIN audio, as datasets 3+ writes it) and cells (snappy row groups), locally and
on S3; each row group read once per batch; every input error one line naming the file and row."""
import json
import sys
import uuid
from pathlib import Path

import pytest

from speechiter.errors import DataError
from speechiter.io import parquet as parquet_io, shards
from speechiter.run import main as run_main
from tests.io.test_pack import batches, write_recipe

pa = pytest.importorskip("pyarrow", reason="Parquet needs pyarrow: pip install 'speechiter[parquet]'")
pq = pytest.importorskip("pyarrow.parquet")
from speechiter.importers import parquet  # noqa: E402

pytestmark = pytest.mark.usefixtures("localhost_only")  # only 127.0.0.1 (tests/s3.py)

HF_META = {b"huggingface": json.dumps({"info": {"features": {
    "id": {"dtype": "string", "_type": "Value"}, "audio": {"_type": "Audio"},
    "text": {"dtype": "string", "_type": "Value"}, "speaker_id": {"dtype": "string", "_type": "Value"},
    "gender": {"dtype": "string", "_type": "Value"}}}}).encode()}
#: how files are written: datasets 3+ (media uncompressed, PLAIN, one row group) and datasets 2 (snappy, small groups)
LAYOUTS = {"plain": dict(compression={"audio.bytes": "none", "audio.path": "snappy", "id": "snappy",
                                      "text": "snappy", "speaker_id": "snappy", "gender": "snappy"},
                         use_dictionary=["id", "text", "speaker_id", "gender", "audio.path"],
                         column_encoding={"audio.bytes": "PLAIN"}, data_page_size=64 << 10),
           "snappy": dict(row_group_size=3)}


def table(path: Path) -> dict:
    return dict(line.rstrip("\n").split(" ", 1) for line in path.read_text().splitlines())


def corpus_table(corpus: Path, ids=None):
    """The corpus as datasets' layout: id, audio {bytes, path}, text, speaker_id, gender."""
    wavs, texts, spks = table(corpus / "idx2wav"), table(corpus / "idx2text"), table(corpus / "idx2spk")
    ids = sorted(wavs) if ids is None else ids
    audio = pa.array([{"bytes": (corpus / wavs[i]).read_bytes(), "path": Path(wavs[i]).name} for i in ids],
                     pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    return pa.table({"id": ids, "audio": audio, "text": [texts[i] for i in ids],
                     "speaker_id": [spks[i] for i in ids], "gender": ["f" if "1" in i[3:6] else "m" for i in ids]}
                    ).replace_schema_metadata(HF_META)


def write_parquet(corpus: Path, out: Path, layout: str, num_files=2):
    out.mkdir(parents=True, exist_ok=True)
    ids = sorted(table(corpus / "idx2wav"))
    names = []
    for n in range(num_files):
        names.append(out / f"train-{n:05d}-of-{num_files:05d}.parquet")
        pq.write_table(corpus_table(corpus, ids[n::num_files]), names[-1], **LAYOUTS[layout])
    return names


def import_files(names, out, **options):
    written = parquet.import_parquet([str(n) for n in names], out, **options)
    shards.clear_shards()
    parquet_io.clear_metadata()
    return written


@pytest.fixture(autouse=True)
def fresh_tables():
    shards.clear_shards()
    parquet_io.clear_metadata()
    yield
    shards.clear_shards()
    parquet_io.clear_metadata()


@pytest.mark.parametrize("layout", ["plain", "snappy"])
def test_parquet_rows_give_the_batches_of_the_corpus_as_files(tmp_path, make_corpus, monkeypatch, layout):
    corpus = make_corpus(tmp_path / "c", num=12, fmt="flac" if layout == "snappy" else "wav")
    index = tmp_path / "index"
    write_parquet(corpus, tmp_path / "pq", layout)
    monkeypatch.chdir(tmp_path)  # relative names: values relative to the index's folder
    written = import_files(["pq/train-0000[01]-of-00002.parquet"], index)
    assert written == {"idx2wav": 12, "idx2wav_len": 12, "idx2dur": 12, "idx2text": 12, "idx2spk": 12,
                       "spk_list": 3, "idx2gender": 12, "shards.json": 2}
    values = table(index / "idx2wav")
    mark = "#bytes=" if layout == "plain" else ":audio#row="
    assert all(v.startswith("../pq/train-0000") and mark in v for v in values.values()), values
    for name in ("idx2wav_len", "idx2text", "idx2spk"):
        assert table(index / name) == table(corpus / name)
    original, indexed = write_recipe(tmp_path / "a.yaml", corpus), write_recipe(tmp_path / "b.yaml", index)
    want = batches(original, num_workers=0)
    assert batches(indexed, num_workers=0) == want
    assert batches(indexed, num_workers=0, engine="inline") == want
    assert batches(indexed, num_workers=2, thread_type="thread") == want


def test_a_batch_decodes_each_row_group_once_and_reads_it_with_its_neighbours(tmp_path, make_corpus, monkeypatch):
    corpus = make_corpus(tmp_path / "c", num=12)
    import_files(write_parquet(corpus, tmp_path / "pq", "snappy", num_files=1), tmp_path / "index")
    monkeypatch.setenv("SPEECHITER_PARQUET_CACHE_MB", "0")  # no row group kept from batch to batch
    decoded, reads = [], []
    real_decode, real_read = parquet_io._decode_chunk, parquet_io.read_bytes
    monkeypatch.setattr(parquet_io, "_decode_chunk", lambda s, m, g, *a: decoded.append(g) or real_decode(s, m, g, *a))
    monkeypatch.setattr(parquet_io, "read_bytes", lambda *a: reads.append(a) or real_read(*a))
    got = batches(write_recipe(tmp_path / "b.yaml", tmp_path / "index"), num_workers=0)
    rows = {uid: n for n, uid in enumerate(sorted(table(corpus / "idx2wav")))}  # 3 rows a group
    groups = [sorted({rows[uid] // 3 for uid in ids}) for ids, _ in got]
    assert sorted(decoded) == sorted(g for batch in groups for g in batch) and len(got) > 1
    assert len(reads) == 1  # the footer: each batch's chunks come from its merged reads, none alone
    assert got == batches(write_recipe(tmp_path / "a.yaml", corpus), num_workers=0)


def test_a_process_keeps_decoded_row_groups_for_later_batches(tmp_path, make_corpus, monkeypatch):
    corpus = make_corpus(tmp_path / "c", num=12)
    import_files(write_parquet(corpus, tmp_path / "pq", "snappy", num_files=1), tmp_path / "index")
    decoded, real_decode = [], parquet_io._decode_chunk
    monkeypatch.setattr(parquet_io, "_decode_chunk", lambda s, m, g, *a: decoded.append(g) or real_decode(s, m, g, *a))
    recipe = write_recipe(tmp_path / "b.yaml", tmp_path / "index")
    want = batches(recipe, num_workers=0)
    assert sorted(decoded) == [0, 1, 2, 3]  # each once: later batches take them from the process's cache
    assert batches(recipe, num_workers=0) == want and len(decoded) == 4
    monkeypatch.setenv("SPEECHITER_PARQUET_CACHE_MB", "0.0001")  # smaller than a row group: none kept
    parquet_io.clear_metadata()
    assert batches(recipe, num_workers=0) == want and len(decoded) > 8
    monkeypatch.setenv("SPEECHITER_PARQUET_CACHE_MB", "lots")
    parquet_io.clear_metadata()
    with pytest.raises(DataError, match=r"SPEECHITER_PARQUET_CACHE_MB should be a number of megabytes \(0: keep no "
                                        r"row group\), but got 'lots'"):
        batches(recipe, num_workers=0)


def test_the_command_line_and_dump_batches(tmp_path, make_corpus, capsys):
    corpus = make_corpus(tmp_path / "c", num=6)
    names = write_parquet(corpus, tmp_path / "pq", "snappy")
    assert parquet.main([*map(str, names), str(tmp_path / "out"), "--absolute", "--columns", "--sample_rate",
                         "8000"]) == 0
    assert "wrote idx2wav (6), idx2wav_len (6), idx2dur (6), idx2text (6), idx2spk (6), spk_list (3), shards.json " \
           "(2) to" in capsys.readouterr().out
    assert all(v.startswith(str(tmp_path / "pq")) for v in table(tmp_path / "out" / "idx2wav").values())
    lengths = table(tmp_path / "out" / "idx2wav_len")
    assert lengths == {k: str((int(v) + 1) // 2) for k, v in table(corpus / "idx2wav_len").items()}
    shards.clear_shards()
    import_files(names, tmp_path / "index")
    dumps = []
    for name, folder in (("a", corpus), ("b", tmp_path / "index")):
        recipe = write_recipe(tmp_path / f"{name}.yaml", folder)
        assert run_main(["--data_cfg", str(recipe), "--mode", "train", "--epochs", "1", "--num_workers", "0",
                         "--quiet", "--dump_batches", str(tmp_path / f"{name}.jsonl")]) == 0
        dumps.append([json.loads(line)["checksum"] for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()])
    assert dumps[0] == dumps[1] and len(dumps[0]) > 1


def test_ids_from_the_audio_paths_or_the_file_and_row(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "c", num=4)
    data = corpus_table(corpus).drop_columns(["id"])
    pq.write_table(data, tmp_path / "a.parquet")
    import_files([tmp_path / "a.parquet"], tmp_path / "out", columns=[])
    assert sorted(table(tmp_path / "out" / "idx2wav")) == sorted(table(corpus / "idx2wav"))
    plain = pa.table({"speech": pa.array([r["bytes"] for r in data.column("audio").to_pylist()], pa.binary()),
                      "sentence": data.column("text")})
    pq.write_table(plain, tmp_path / "b.parquet")
    import_files([tmp_path / "b.parquet"], tmp_path / "out2")
    assert sorted(table(tmp_path / "out2" / "idx2text")) == [f"b-{n:06d}" for n in range(4)]
    assert list(table(tmp_path / "out2" / "idx2text").values()) == data.column("text").to_pylist()


def test_datasets_writes_files_that_import_and_give_the_same_batches(tmp_path, make_corpus):
    datasets = pytest.importorskip("datasets", reason="optional: pip install datasets")
    corpus = make_corpus(tmp_path / "c", num=8, fmt="flac")
    rows = corpus_table(corpus).to_pylist()
    data = datasets.Dataset.from_list(rows).cast_column("audio", datasets.Audio())
    data.to_parquet(str(tmp_path / "hf" / "train.parquet"))
    import_files([tmp_path / "hf" / "train.parquet"], tmp_path / "index")
    assert all("#bytes=" in v for v in table(tmp_path / "index" / "idx2wav").values())
    assert batches(write_recipe(tmp_path / "b.yaml", tmp_path / "index"), num_workers=0) == \
        batches(write_recipe(tmp_path / "a.yaml", corpus), num_workers=0)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("layout", ["plain", "snappy"])
def test_process_workers_and_a_resume(tmp_path, make_corpus, layout):
    corpus = make_corpus(tmp_path / "c", num=12)
    import_files(write_parquet(corpus, tmp_path / "pq", layout), tmp_path / "index")
    original, indexed = write_recipe(tmp_path / "a.yaml", corpus), write_recipe(tmp_path / "b.yaml", tmp_path / "index")
    want = batches(original, num_workers=0)
    assert batches(indexed, num_workers=2, thread_type="proc") == want
    assert batches(indexed, num_workers=2, engine="torch") == want
    assert batches(indexed, epoch=2, start_step=2, num_workers=2) == batches(original, epoch=2, num_workers=0)[2:]


# ------------------------------------------------------------------------------------------- errors


def run(capsys, *args):
    code = parquet.main([str(a) for a in args])
    return code, capsys.readouterr().err.strip()


PROG = "python -m speechiter.importers.parquet: error:"


def test_input_errors_are_one_line_naming_the_file_and_row(tmp_path, make_corpus, capsys):
    corpus = make_corpus(tmp_path / "c", num=4)
    good = write_parquet(corpus, tmp_path / "pq", "snappy", num_files=1)[0]
    out = tmp_path / "out"
    data = corpus_table(corpus)

    pq.write_table(data.drop_columns(["audio"]).replace_schema_metadata(None), tmp_path / "noaudio.parquet")
    code, err = run(capsys, tmp_path / "noaudio.parquet", out)
    assert code == 2 and err == f"{PROG} {tmp_path}/noaudio.parquet: no column holds audio (id, text, speaker_id, " \
                                f"gender); name it with --audio_column"
    code, err = run(capsys, good, out, "--audio_column", "speech")
    assert code == 2 and err == f"{PROG} {good}: no column 'speech' (the file has id, audio, text, speaker_id, gender)"
    code, err = run(capsys, good, out, "--audio_column", "text")
    assert code == 2 and err == f"{PROG} {good}: column 'text' is string, not audio: expected binary, or a struct " \
                                f"with a binary 'bytes' field (the Audio feature of datasets)"

    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(good.read_bytes()[:-100])
    code, err = run(capsys, truncated, out)
    assert code == 2 and err.startswith(f"{PROG} {truncated}: not a Parquet file, or a truncated one (")
    code, err = run(capsys, tmp_path / "missing.parquet", out)
    assert code == 2 and err == f"{PROG} {tmp_path}/missing.parquet: no such shard"

    rows = data.to_pylist()
    rows[2]["audio"] = {"bytes": b"not audio at all" * 30, "path": "x.wav"}
    rows[3]["audio"] = {"bytes": None, "path": "y.wav"}
    pq.write_table(pa.Table.from_pylist(rows, data.schema), tmp_path / "bad.parquet")
    code, err = run(capsys, tmp_path / "bad.parquet", out)
    assert code == 2 and err.startswith(f"{PROG} {tmp_path}/bad.parquet: row 2 (id {rows[2]['id']!r}): not audio "
                                        f"speechiter reads ("), err
    pq.write_table(pa.Table.from_pylist(rows[3:], data.schema), tmp_path / "bad.parquet")
    code, err = run(capsys, tmp_path / "bad.parquet", out)
    assert code == 2 and err == f"{PROG} {tmp_path}/bad.parquet: row 0 (id {rows[3]['id']!r}): no audio bytes in " \
                                f"column 'audio' (only a path, 'y.wav': the audio is not in the file)"
    code, err = run(capsys, good, good, out)
    assert code == 2 and "occurs twice" in err
    assert not out.exists()


def test_a_file_changed_or_truncated_after_import_is_named_when_read(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "c", num=6)
    names = write_parquet(corpus, tmp_path / "pq", "snappy")
    import_files(names, tmp_path / "index")
    recipe = write_recipe(tmp_path / "b.yaml", tmp_path / "index")
    data = names[1].read_bytes()
    names[1].write_bytes(data[:-10])
    with pytest.raises(DataError, match=r"pq/train-00001-of-00002.parquet: the shard changed after it was "
                                        r"imported \(\d+ bytes, shards.json says \d+\); import the shards again "
                                        r"\(python -m speechiter.importers.parquet ... "):
        batches(recipe, num_workers=0)
    (tmp_path / "index" / "shards.json").unlink()  # no record: the footer tells
    shards.clear_shards()
    with pytest.raises(DataError, match=r"train-00001-of-00002.parquet: not a Parquet file, or a truncated one"):
        batches(recipe, num_workers=0)


def test_bad_cell_values_name_the_value():
    from speechiter.io.read import read_feat
    from speechiter.io.source import parse_source

    with pytest.raises(DataError, match=r"^x.parquet:a#row=1#bytes=1-2: a value names a byte range or a Parquet row"):
        parse_source("x.parquet:a#row=1#bytes=1-2")
    with pytest.raises(DataError, match=r"names a cell: <file>.parquet:<column>#row=<row>$"):
        parquet_io.read_cell(parse_source("x.parquet:audio"), None)
    assert parse_source("d/t.parquet:audio#row=7#t=1,2").entry == "d/t.parquet:audio#row=7"
    with pytest.raises(DataError, match=r"no such file"):
        read_feat("/nonexistent/t.parquet:audio#row=7")


def test_a_cell_past_the_end_or_of_another_column_is_named(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "c", num=3)
    name = write_parquet(corpus, tmp_path / "pq", "snappy", num_files=1)[0]
    from speechiter.io.read import data_num_frames, read_feat

    assert data_num_frames(f"{name}:audio#row=2")[0] == int(sorted(table(corpus / "idx2wav_len").items())[2][1])
    with pytest.raises(DataError, match=r"audio#row=3: the file has 3 rows$"):
        read_feat(f"{name}:audio#row=3")
    with pytest.raises(DataError, match=r"column 'gender' holds BYTE_ARRAY|no column 'sex'"):
        read_feat(f"{name}:sex#row=0")
    pq.write_table(pa.table({"n": [1, 2]}), tmp_path / "n.parquet")
    with pytest.raises(DataError, match=r"n.parquet:n#row=0: column 'n' holds INT64 values, not the bytes"):
        read_feat(f"{tmp_path}/n.parquet:n#row=0")


def test_without_pyarrow_the_error_says_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    code, err = run(capsys, tmp_path / "a.parquet", tmp_path / "out")
    assert code == 2 and err == f"{PROG} {tmp_path}/a.parquet: reading Parquet files needs pyarrow: " \
                                f"pip install 'speechiter[parquet]'"


# ----------------------------------------------------------------------------------------------- S3


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("layout", ["plain", "snappy"])
def test_parquet_on_s3_gives_the_batches_and_a_changed_object_is_named(tmp_path, make_corpus, s3_client, layout):
    corpus = make_corpus(tmp_path / "c", num=8)
    bucket = f"speechiter-parquet-{uuid.uuid4().hex[:12]}"
    s3_client.create_bucket(Bucket=bucket)
    names = write_parquet(corpus, tmp_path / "pq", layout)
    for name in names:
        s3_client.upload_file(str(name), bucket, f"data/{name.name}")
    url = f"s3://{bucket}/data"
    import_files([f"{url}/train-{{00000..00001}}-of-00002.parquet"], tmp_path / "index")
    assert all(v.startswith(f"{url}/") for v in table(tmp_path / "index" / "idx2wav").values())
    records = json.loads((tmp_path / "index" / "shards.json").read_text())["shards"]
    assert all(k.startswith(url) and r["etag"] for k, r in records.items())
    original, indexed = write_recipe(tmp_path / "a.yaml", corpus), write_recipe(tmp_path / "b.yaml", tmp_path / "index")
    want = batches(original, num_workers=0)
    assert batches(indexed, num_workers=0) == want
    assert batches(indexed, num_workers=2, thread_type="thread") == want
    key = f"data/{names[0].name}"
    data = s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
    s3_client.put_object(Bucket=bucket, Key=key, Body=data[:-1] + b"\1")  # same size, another ETag
    shards.clear_shards()
    parquet_io.clear_metadata()
    with pytest.raises(DataError, match=r"the shard changed after it was imported \(its ETag is no longer"):
        batches(indexed, num_workers=0)
