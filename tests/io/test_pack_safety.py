"""python -m speechiter.pack against bad arguments and a store that refuses or stops answering while a pack is
written: one line naming the argument, folder or URL, exit 2, never a traceback, never a hang, and never the
recipe's own idx2 files overwritten."""
import json
import time
import uuid

import pytest

from speechiter.pack.__main__ import main as pack_main
from tests.io.test_adversary import BadProxy  # noqa: F401 (bad_proxy's class)
from tests.io.test_adversary import bad_proxy  # noqa: F401
from tests.io.test_pack import pack, write_recipe

pytestmark = pytest.mark.usefixtures("localhost_only")  # only 127.0.0.1 (tests/s3.py)

PROG = "python -m speechiter.pack: error:"


def run(capsys, *argv):
    try:
        code = pack_main([str(a) for a in argv])
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return code, err.strip()


@pytest.fixture
def recipe(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "c", num=4)
    (tmp_path / "afile").write_text("a file")
    return corpus, write_recipe(tmp_path / "r.yaml", corpus)


@pytest.mark.parametrize("args, message", [
    (["--shard_size", "9" * 400 + "G"], "argument --shard_size: shard_size should be a positive size up to 1024T, "
                                        "such as 256M or 1G, but got '999999999999"),
    (["--shard_size", "0.1"], "argument --shard_size: shard_size should be a positive size up to 1024T"),
    (["--out", "{tmp}/afile"], "{tmp}/afile: cannot write the pack there: a file is there"),
    (["--out", "{tmp}/afile/sub"], "{tmp}/afile/sub: cannot write the pack there: Not a directory"),
    (["--out", "{tmp}/p", "--idx2_out", "{tmp}/afile"], "{tmp}/afile: cannot write the pack there: a file is there"),
    (["--out", "{tmp}/c"], "{tmp}/c/idx2wav: the pack's idx2 files would replace the recipe's own; give --out (or "
                           "--idx2_out) another folder than {tmp}/c"),
    (["--group", "test"], "the recipe has no 'test' group (it has train, valid)"),
    (["--group", "tset"], "argument --group: invalid choice: 'tset'"),
])
def test_bad_arguments_are_one_line(tmp_path, recipe, capsys, args, message):
    corpus, cfg = recipe
    before = {p.name: p.read_bytes() for p in corpus.iterdir() if p.is_file()}
    args = [a.format(tmp=tmp_path) for a in args]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "p")]
    code, err = run(capsys, "--data_cfg", cfg, *args)
    assert code == 2 and err.startswith(f"{PROG} {message.format(tmp=tmp_path)}"), err
    assert {p.name: p.read_bytes() for p in corpus.iterdir() if p.is_file()} == before


def test_reseal_of_what_is_not_a_pack_is_one_line(tmp_path, make_corpus, capsys):
    corpus = make_corpus(tmp_path / "c", num=4)
    code, err = run(capsys, "--reseal", corpus)
    assert code == 2 and err == (f"{PROG} {corpus}: no pack to reseal there (shards.json: No such file or directory); "
                                 f"give the folder or URL that python -m speechiter.pack wrote")
    _, packed = pack(tmp_path, corpus)
    table = tmp_path / "pack" / "shards.json"
    for text, message in (("{not json", "not a pack's shard table"),
                          (json.dumps({"shards": {"../../etc/passwd": {}}}), "lists '../../etc/passwd', not a shard "
                                                                             "name of this folder"),
                          (json.dumps({"shards": {"shard-00099.pack": {}}}), "shard-00099.pack: cannot read the shard "
                                                                             "(No such file or directory)")):
        table.write_text(text)
        code, err = run(capsys, "--reseal", tmp_path / "pack")
        assert code == 2 and message in err, err


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode, problem", [("deny", "access denied"), ("stall", "connection failed or timed out")])
def test_a_store_that_refuses_or_stalls_a_pack_write_is_one_line(tmp_path, recipe, bad_proxy, s3_client,
                                                                 monkeypatch, capsys, mode, problem):
    _, cfg = recipe
    bucket = f"speechiter-packw-{uuid.uuid4().hex[:12]}"
    s3_client.create_bucket(Bucket=bucket)
    monkeypatch.setenv("SPEECHITER_STORAGE_TIMEOUT", "2")
    bad_proxy.mode = mode
    started = time.monotonic()
    try:
        code, err = run(capsys, "--data_cfg", cfg, "--out", f"s3://{bucket}/p", "--idx2_out", tmp_path / "index")
    finally:
        bad_proxy.mode = "ok"
        for o in s3_client.list_objects_v2(Bucket=bucket).get("Contents", []):
            s3_client.delete_object(Bucket=bucket, Key=o["Key"])
        s3_client.delete_bucket(Bucket=bucket)
    assert code == 2 and err.startswith(f"{PROG} s3://{bucket}/p/shard-00000.pack: cannot write: {problem}"), err
    assert time.monotonic() - started < 60
    assert not (tmp_path / "index").exists() or not list((tmp_path / "index").iterdir())
