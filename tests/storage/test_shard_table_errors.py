"""A store that cannot be read while a pack's shard table (shards.json) is looked up: the error names the
object the recipe names, never only shards.json, which the user never wrote (issue 31)."""
import pytest

from speechiter.errors import DataError


@pytest.mark.slow  # s3fs and botocore, and a connection refused after their own tries
@pytest.mark.parametrize("endpoint", [None, "http://127.0.0.1:9"], ids=["no-endpoint", "closed-port"])
def test_an_unreachable_store_names_the_shard_not_its_table(monkeypatch, fresh_storage, endpoint):
    pytest.importorskip("s3fs")
    from speechiter.io.read import read_feat
    from speechiter.io.shards import clear_shards
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    monkeypatch.setenv("SPEECHITER_STORAGE_ATTEMPTS", "1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    if endpoint is None:
        monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)  # AWS itself: blocked here (localhost_only)
    else:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    clear_shards()
    with pytest.raises(DataError) as caught:
        read_feat("s3://bucket/pack/shard-00000.pack#bytes=0-99")
    assert str(caught.value).startswith("s3://bucket/pack/shard-00000.pack: cannot read shards.json beside it "
                                        "(the shard table of a pack): ")
