"""Byte-range values, coalesced batch reads, shard integrity and the pack writer, on local disk."""
import contextlib
import json
import os
import uuid
from pathlib import Path

import numpy as np
import pytest
import soundfile

from speechiter import build_iterators, load_config
from speechiter.dump import checksum
from speechiter.errors import DataError, WorkerError
from speechiter.io import coalesce, shards
from speechiter.io.coalesce import Span, merge_ranges
from speechiter.io.read import data_num_frames, read_feat
from speechiter.io.source import ByteRange, parse_source
from speechiter.pack.__main__ import main as pack_main, parse_size
from speechiter.pack.writer import write_pack
from tests.inprocess import run_cli

REPO = Path(__file__).resolve().parents[2]


def write_recipe(path: Path, corpus: Path, iterator="block.BlockIterator", conf="batch_len: 48000") -> Path:
    path.write_text(f"""
train:
  type: {iterator}
  conf:
    dataset_type: speech_text.SpeechTextDataset
    dataset_conf: {{main_data: {{feat: {corpus}/idx2wav, text: {corpus}/idx2text}}, use_speed_perturb: true}}
    data_len: {corpus}/idx2wav_len
    group_info: {{spk: {corpus}/idx2spk}}
    {conf}
valid:
  type: abs.Iterator
  conf:
    dataset_type: speech_text.SpeechTextDataset
    dataset_conf: {{main_data: {{feat: {corpus}/idx2wav}}}}
""")
    return path


def train_iterator(recipe, **settings):
    return build_iterators(load_config(recipe), groups=("train",), **settings)["train"]


def batches(recipe, epoch=1, start_step=0, **settings):
    iterator = train_iterator(recipe, **settings)
    try:
        return [(list(b.ids), checksum(b)) for b in iterator.build_loader(epoch, start_step)]
    finally:
        iterator.close()


@contextlib.contextmanager
def packed_in_a_bucket(s3_client, tmp_path, corpus, shard_bytes: int, prefix: str):
    """``corpus`` packed into a fresh bucket named ``<prefix>-<random>``, removed after:
    ``(original recipe, packed recipe, pack URL, bucket)``."""
    bucket = f"{prefix}-{uuid.uuid4().hex[:12]}"
    s3_client.create_bucket(Bucket=bucket)
    original = write_recipe(tmp_path / "recipe.yaml", corpus)
    iterator = train_iterator(original, num_workers=0)
    try:
        write_pack(iterator, f"s3://{bucket}/pack", shard_bytes, idx2_out=str(tmp_path / "index"))
    finally:
        iterator.close()
    shards.clear_shards()
    try:
        yield original, write_recipe(tmp_path / "packed.yaml", tmp_path / "index"), f"s3://{bucket}/pack", bucket
    finally:
        shards.clear_shards()
        for o in s3_client.list_objects_v2(Bucket=bucket).get("Contents", []):
            s3_client.delete_object(Bucket=bucket, Key=o["Key"])
        s3_client.delete_bucket(Bucket=bucket)


def pack(tmp_path, corpus, shard_size="64K", **recipe):
    recipe_file = write_recipe(tmp_path / "recipe.yaml", corpus, **recipe)
    iterator = train_iterator(recipe_file, num_workers=0)
    try:
        write_pack(iterator, str(tmp_path / "pack"), parse_size(shard_size))
    finally:
        iterator.close()
    shards.clear_shards()
    return recipe_file, write_recipe(tmp_path / "packed.yaml", tmp_path / "pack", **recipe)


# ------------------------------------------------------------------ values


def test_a_byte_range_is_parsed_beside_a_time_range():
    source = parse_source("s3://b/p.pack#bytes=10-19#t=0.5,1")
    assert source.file == "s3://b/p.pack" and source.byte_range == ByteRange(10, 19)
    assert source.time_range == (0.5, 1.0) and source.entry == "s3://b/p.pack#bytes=10-19"
    assert parse_source("a.wav").byte_range is None
    with pytest.raises(DataError, match=r"p.pack#bytes=9-3: the byte range ends at byte 3, before its first"):
        parse_source("p.pack#bytes=9-3")


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_a_file_in_a_byte_range_reads_as_the_file(tmp_path, make_corpus, fmt):
    corpus = make_corpus(tmp_path / "c", num=3, fmt=fmt)
    file = corpus / (corpus / "idx2wav").read_text().split()[1]
    np.save(tmp_path / "a.npy", np.arange(12, dtype=np.int16).reshape(6, 2))
    blob = tmp_path / "blob.bin"
    parts = [b"junk" * 10, file.read_bytes(), (tmp_path / "a.npy").read_bytes()]
    blob.write_bytes(b"".join(parts))
    audio = f"{blob}#bytes={len(parts[0])}-{len(parts[0]) + len(parts[1]) - 1}"
    np.testing.assert_array_equal(read_feat(audio), read_feat(str(file)))
    np.testing.assert_array_equal(read_feat(audio, 8000), read_feat(str(file), 8000))  # resampled alike
    np.testing.assert_array_equal(read_feat(audio + "#t=0.05,0.1"), read_feat(f"{file}#t=0.05,0.1"))
    assert data_num_frames(audio) == data_num_frames(str(file))
    start = len(parts[0]) + len(parts[1])
    array = f"{blob}#bytes={start}-{start + len(parts[2]) - 1}"
    np.testing.assert_array_equal(read_feat(array), read_feat(str(tmp_path / "a.npy")))
    assert data_num_frames(array) == (6, None)


def test_ranges_are_merged_per_object_within_the_gap():
    ranges = [("a", 100, 199), ("b", 0, 9), ("a", 0, 99), ("a", 300, 399), ("a", 2000, 2099)]
    assert merge_ranges(ranges, gap=100) == [Span("a", 0, 399), Span("a", 2000, 2099), Span("b", 0, 9)]
    assert merge_ranges(ranges, gap=0) == [Span("a", 0, 199), Span("a", 300, 399), Span("a", 2000, 2099),
                                           Span("b", 0, 9)]
    assert coalesce.LOCAL_GAP == 64 << 10 and coalesce.REMOTE_GAP == 1 << 20
    assert merge_ranges([("s3://b/x", 0, 9), ("s3://b/x", 500_000, 500_009)]) == [Span("s3://b/x", 0, 500_009)]


def test_sizes_take_suffixes():
    assert parse_size("256M") == 256 << 20 and parse_size("1G") == 1 << 30 and parse_size("100k") == 102400
    assert parse_size("1.5MB") == 3 << 19 and parse_size("4096") == 4096
    for bad in ("", "-1M", "12X", "0"):
        with pytest.raises(ValueError, match="shard_size should be a positive size"):
            parse_size(bad)


# -------------------------------------------------------------------- packs


@pytest.mark.timeout(300)
@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_a_pack_gives_the_batches_of_its_corpus(tmp_path, make_corpus, fmt):
    corpus = make_corpus(tmp_path / "c", num=24, fmt=fmt)
    original, packed = pack(tmp_path, corpus)
    pack_dir = tmp_path / "pack"
    assert len(list(pack_dir.glob("shard-*.pack"))) > 1
    assert sorted(json.loads((pack_dir / "shards.json").read_text())["shards"]) == \
        sorted(p.name for p in pack_dir.glob("shard-*.pack"))
    assert (pack_dir / "idx2spk").read_bytes() == (corpus / "idx2spk").read_bytes()
    want = batches(original, num_workers=0)
    assert batches(packed, num_workers=0) == want
    assert batches(packed, num_workers=0, engine="inline") == want
    assert batches(packed, num_workers=2, thread_type="thread") == want


@pytest.mark.slow  # process workers
@pytest.mark.timeout(300)
@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_a_pack_gives_the_batches_of_its_corpus_to_process_workers(tmp_path, make_corpus, fmt):
    original, packed = pack(tmp_path, make_corpus(tmp_path / "c", num=24, fmt=fmt))
    want = batches(original, num_workers=0)
    assert batches(packed, num_workers=2, thread_type="proc") == want
    assert batches(packed, num_workers=4, thread_type="proc") == want
    assert batches(packed, num_workers=2, engine="torch") == want
    assert batches(packed, epoch=2, start_step=2, num_workers=2) == batches(original, epoch=2, num_workers=0)[2:]


@pytest.mark.timeout(120)
def test_a_block_batch_of_a_pack_is_one_read(tmp_path, make_corpus, monkeypatch):
    _, packed = pack(tmp_path, make_corpus(tmp_path / "c", num=24), shard_size="1M")
    reads = []
    real = coalesce.read_bytes
    monkeypatch.setattr(coalesce, "read_bytes", lambda *a: reads.append(a) or real(*a))
    monkeypatch.setattr(shards, "read_bytes", lambda *a: pytest.fail(f"a read of its own: {a}"))
    got = batches(packed, num_workers=0)
    multi = [ids for ids, _ in got if len(ids) > 1]
    assert len(reads) == len(multi)  # batches of one utterance are read without the pool


@pytest.mark.timeout(120)
def test_utterances_the_batches_skip_keep_their_values(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "c", num=12)
    original, packed = pack(tmp_path, corpus, conf="batch_len: 48000\n    batches_per_epoch: 2")
    assert batches(packed, num_workers=0) == batches(original, num_workers=0)
    values = dict(line.split() for line in (tmp_path / "pack" / "idx2wav").read_text().splitlines())
    plain = [v for v in values.values() if "#bytes=" not in v]
    assert len(plain) < len(values) and all(os.path.isabs(v) for v in plain)


# ------------------------------------------------------------------- errors


def edit_value(pack_dir: Path, row: int, value: str) -> str:
    lines = (pack_dir / "idx2wav").read_text().splitlines()
    uid = lines[row].split()[0]
    lines[row] = f"{uid} {value}"
    (pack_dir / "idx2wav").write_text("\n".join(lines) + "\n")
    return uid


@pytest.mark.slow  # process workers
@pytest.mark.timeout(120)
def test_bad_ranges_name_the_utterance_and_the_object(tmp_path, make_corpus):
    _, packed = pack(tmp_path, make_corpus(tmp_path / "c", num=12), shard_size="10M")
    pack_dir = tmp_path / "pack"
    shard = pack_dir / "shard-00000.pack"
    size = shard.stat().st_size
    uid = edit_value(pack_dir, 3, f"shard-00000.pack#bytes={size - 10}-{size + 99}")
    with pytest.raises(DataError, match=rf"^utterance {uid} \(feat from .*idx2wav\): .*shard-00000.pack: the byte "
                                        rf"range {size - 10}-{size + 99} runs past the end of the object "
                                        rf"\({size} bytes\)$") as error:
        batches(packed, num_workers=0)
    assert error.value.exit_code == 2
    edit_value(pack_dir, 3, "shard-00000.pack#bytes=1-2000")  # inside a file, not at its start
    with pytest.raises(DataError, match=rf"^utterance {uid} \(feat from .*\): .*shard-00000.pack#bytes=1-2000: "
                                        r"cannot read audio"):
        batches(packed, num_workers=0)
    edit_value(pack_dir, 3, "shard-00009.pack#bytes=0-99")
    with pytest.raises(WorkerError, match=rf"raised .*DataError: utterance {uid} \(feat from .*\): "
                                          r".*shard-00009.pack: no such file") as error:
        batches(packed, num_workers=2)
    assert error.value.exit_code == 2


@pytest.mark.slow  # a process worker sees the change
@pytest.mark.timeout(120)
def test_a_shard_that_changed_is_named_never_read(tmp_path, make_corpus):
    _, packed = pack(tmp_path, make_corpus(tmp_path / "c", num=12), shard_size="10M")
    shard = tmp_path / "pack" / "shard-00000.pack"
    with open(shard, "ab") as f:
        f.write(b"\0")
    with pytest.raises(DataError, match=r"shard-00000.pack: the pack shard changed after it was written "
                                        r"\(\d+ bytes, shards.json says \d+\)"):
        batches(packed, num_workers=0)
    shards.clear_shards()
    with open(shard, "r+b") as f:
        f.truncate(shard.stat().st_size - 1)
    os.utime(shard, ns=(0, 12345))
    with pytest.raises(WorkerError, match=r"shard-00000.pack: the pack shard changed .*mtime_ns 12345, shards"):
        batches(packed, num_workers=2, thread_type="proc")
    shards.clear_shards()
    assert pack_main(["--reseal", str(tmp_path / "pack")]) == 0  # a deliberate copy
    assert batches(packed, num_workers=0)


@pytest.mark.timeout(120)
def test_the_command_packs_and_a_bad_pack_exits_2(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "c", num=8, fmt="flac")
    recipe = write_recipe(tmp_path / "recipe.yaml", corpus)
    run = ["--data_cfg", recipe, "--out", tmp_path / "p"]
    done = run_cli(*run, "--shard_size", "1M", module="speechiter.pack")
    assert done.returncode == 0, done.stderr
    assert "wrote shards (1), utterances (8)" in done.stdout
    done = run_cli(*run, "--group", "test", module="speechiter.pack")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no 'test' group" in done.stderr
    packed = write_recipe(tmp_path / "packed.yaml", tmp_path / "p")
    (tmp_path / "p" / "shard-00000.pack").write_bytes(b"not the pack")
    done = run_cli("--data_cfg", packed, "--epochs", 1, "--num_workers", 0, "--quiet")
    assert done.returncode == 2 and "shard-00000.pack: the pack shard changed after it was written" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_bucket_iterator_packs_and_gives_its_batches(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "c", num=16)
    original, packed = pack(tmp_path, corpus, iterator="bucket.BucketIterator", conf="batch_len: 48000")
    for epoch in (1, 2):
        assert batches(packed, epoch=epoch, num_workers=0) == batches(original, epoch=epoch, num_workers=0)
    assert soundfile.info(str(next(corpus.rglob("*.wav")))).frames > 0
