"""Packs in object storage: written straight to S3, read with one request per block batch, checked."""
import pytest

from speechiter.errors import DataError, WorkerError
from speechiter.io import shards

from .test_pack import batches, packed_in_a_bucket

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("localhost_only")]  # the S3 server


@pytest.fixture
def s3_pack(s3_client, s3_proxy, tmp_path, make_corpus):
    """A corpus packed into a fresh bucket through the counting proxy:
    ``(original recipe, packed recipe, pack URL, bucket)``."""
    corpus = make_corpus(tmp_path / "c", num=40, min_sec=0.2, max_sec=0.6)
    with packed_in_a_bucket(s3_client, tmp_path, corpus, 200 << 10, "speechiter-pack") as packed:
        yield packed


@pytest.mark.timeout(300)
def test_an_s3_pack_gives_the_batches_with_one_request_per_batch(s3_pack, s3_proxy):
    original, packed, url, _ = s3_pack
    values = (packed.parent / "index" / "idx2wav").read_text()
    assert f"{url}/shard-00000.pack#bytes=" in values
    want = batches(original, num_workers=0)
    s3_proxy.requests.clear()
    assert batches(packed, num_workers=0) == want
    ranged = [r for r in s3_proxy.gets() if r[2] and "shards.json" not in r[1]]
    others = [r for r in s3_proxy.requests if r not in ranged]
    assert len(ranged) / len(want) <= 1.05, (len(ranged), len(want))
    assert [r[1].rsplit("/", 1)[-1] for r in others] == ["shards.json"]  # once per process
    assert batches(packed, num_workers=2, thread_type="proc") == want
    assert batches(packed, num_workers=2, thread_type="thread") == want
    assert batches(packed, epoch=2, start_step=3, num_workers=2) == batches(original, epoch=2, num_workers=0)[3:]


@pytest.mark.timeout(200)
def test_an_s3_shard_that_changed_or_is_gone_is_named(s3_pack, s3_client):
    _, packed, url, bucket = s3_pack
    key = "pack/shard-00000.pack"
    data = s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
    s3_client.put_object(Bucket=bucket, Key=key, Body=data[:-1] + bytes([data[-1] ^ 1]))  # same size
    with pytest.raises(DataError, match=rf"{url}/shard-00000.pack: the pack shard changed after it was written "
                                        r"\(its ETag is no longer \w+\)") as error:
        batches(packed, num_workers=0)
    assert error.value.exit_code == 2
    shards.clear_shards()
    s3_client.delete_object(Bucket=bucket, Key=key)
    with pytest.raises(WorkerError, match=rf"DataError: utterance \S+ \(feat from .*idx2wav\): {url}/shard-00000"
                                          r".pack: cannot read: no such object"):
        batches(packed, num_workers=2)


@pytest.mark.timeout(200)
def test_an_s3_range_past_the_end_is_named(s3_pack, s3_client):
    _, packed, url, bucket = s3_pack
    size = s3_client.head_object(Bucket=bucket, Key="pack/shard-00000.pack")["ContentLength"]
    index = packed.parent / "index" / "idx2wav"
    lines = index.read_text().splitlines()
    uid = lines[5].split()[0]
    lines[5] = f"{uid} {url}/shard-00000.pack#bytes={size + 10}-{size + 20}"
    index.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=rf"^utterance {uid} \(feat from .*\): {url}/shard-00000.pack: the byte "
                                        rf"range {size + 10}-{size + 20} runs past the end of the object "
                                        rf"\({size} bytes\)$"):
        batches(packed, num_workers=0)
