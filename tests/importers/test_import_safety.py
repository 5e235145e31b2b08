"""Tar shards an adversary would hand the WebDataset, Shar and NeMo importers: truncated (locally and on S3),
compressed, with sparse members, links, names that climb out with '..', absolute or not UTF-8, and header
sizes that lie. Each is one line naming the shard (and member), exit 2, never a traceback and nothing written;
and a shard changed after its import says to import it again."""
import gzip
import io
import shutil
import subprocess
import tarfile
import uuid

import pytest

from speechiter.errors import DataError
from speechiter.importers import shar, webdataset
from speechiter.io import shards
from tests.importers.test_import_tars import audio_files, import_local, write_recipe, write_shar, write_webdataset
from tests.io.test_pack import batches

pytestmark = pytest.mark.usefixtures("localhost_only")  # only 127.0.0.1 (tests/s3.py)

WDS = "python -m speechiter.importers.webdataset: error:"


@pytest.fixture(autouse=True)
def fresh_shards():
    shards.clear_shards()
    yield
    shards.clear_shards()


def import_wds(capsys, *shard_paths, out):
    code = webdataset.main([*map(str, shard_paths), str(out)])
    err = capsys.readouterr().err
    assert err.count("\n") <= 1 and "Traceback" not in err, err
    assert code == 0 or not out.exists(), "nothing is written on an error"
    return code, err.strip()


def add(archive, name, data=b"", **fields):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in fields.items():
        setattr(info, key, value)
    archive.addfile(info, io.BytesIO(data))


@pytest.fixture
def wds(tmp_path, make_corpus):
    """Two WebDataset shards of six utterances, and one utterance's wav bytes."""
    corpus = make_corpus(tmp_path / "c", num=6)
    names = write_webdataset(corpus, tmp_path / "wds")
    return names, audio_files(corpus)["spk001-0001-0001"].read_bytes()


def test_a_truncated_shard_is_named_truncated(tmp_path, wds, capsys):
    names, _ = wds
    data = names[0].read_bytes()
    members = [m for m in webdataset.TarShard(str(names[0])).members()]
    for label, size in (("in a member", members[0].first + 100), ("in a header", members[1].first - 300),
                        ("at a member's end", members[1].first + -(-members[1].size // 512) * 512),
                        ("in the middle", len(data) // 2)):
        cut = tmp_path / "cut.tar"
        cut.write_bytes(data[:size])
        code, err = import_wds(capsys, cut, out=tmp_path / "out")
        assert code == 2 and err.startswith(f"{WDS} {cut}: ") and "truncated" in err, (label, err)


@pytest.mark.timeout(120)
def test_a_truncated_shar_recording_tar_is_named_truncated(tmp_path, make_corpus, capsys):
    shar_dir = write_shar(make_corpus(tmp_path / "c", num=4), tmp_path / "shar")
    tar = shar_dir / "recording.000000.tar"
    tar.write_bytes(tar.read_bytes()[:3000])
    assert shar.main([str(shar_dir), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"python -m speechiter.importers.shar: error: {tar}: member ")
    assert "truncated: its data runs to byte" in err and "but the shard has 3000 bytes" in err


def test_tars_that_cannot_be_read_in_place_are_refused(tmp_path, wds, capsys):
    names, wav = wds
    gz = tmp_path / "train.tar.gz"
    gz.write_bytes(gzip.compress(names[0].read_bytes()))
    code, err = import_wds(capsys, gz, out=tmp_path / "out")
    assert code == 2 and err == (f"{WDS} {gz}: is compressed (gzip); members are read as byte ranges of the shard, "
                                 f"so it must be an uncompressed tar: decompress it once")
    second = 512 + -(-len(wav) // 512) * 512  # where the member after u0.wav starts
    cases = {
        "dotdot": (lambda a: add(a, "../../etc/u1.wav", wav), "member '../../etc/u1.wav': an absolute name, or one "
                                                              "that climbs out with '..'"),
        "absolute": (lambda a: add(a, "/tmp/u1.wav", wav), "member '/tmp/u1.wav': an absolute name"),
        "symlink": (lambda a: add(a, "u1.wav", type=tarfile.SYMTYPE, linkname="/etc/passwd"),
                    "member 'u1.wav': a symbolic link (to '/etc/passwd'); members are read as their own bytes"),
        "hardlink": (lambda a: add(a, "u1.wav", type=tarfile.LNKTYPE, linkname="u0.wav"),
                     "member 'u1.wav': a hard link (to 'u0.wav')"),
        "not utf-8": (lambda a: add(a, b"u\xff1.wav".decode("utf-8", "surrogateescape"), wav),
                      f"member b'u\\xff1.wav' (header at byte {second}): its name is not UTF-8"),
    }
    for label, (member, message) in cases.items():
        bad = tmp_path / f"{label.replace(' ', '')}.tar"
        with tarfile.open(bad, "w", format=tarfile.GNU_FORMAT) as archive:
            add(archive, "u0.wav", wav)
            member(archive)
        code, err = import_wds(capsys, bad, out=tmp_path / "out")
        assert code == 2 and err.startswith(f"{WDS} {bad}: {message}"), (label, err)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar writes the sparse members")
@pytest.mark.parametrize("fmt", ["gnu", "pax"])
def test_a_sparse_member_is_refused(tmp_path, wds, capsys, fmt):
    _, wav = wds
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "u1.wav", "wb") as f:  # a hole after the header: tar --sparse stores the data blocks only
        f.write(wav[:44])
        f.seek(len(wav) + 64 << 10)
        f.write(wav[44:])
    sparse = tmp_path / "sparse.tar"
    subprocess.run(["tar", "--sparse", f"--format={fmt}", "-cf", str(sparse), "-C", str(src), "u1.wav"], check=True)
    code, err = import_wds(capsys, sparse, out=tmp_path / "out")
    assert code == 2 and err == (f"{WDS} {sparse}: member 'u1.wav': a sparse file (tar --sparse): its bytes are not "
                                 f"one range of the shard; write the tar without --sparse")


def _set_size(data: bytearray, header: int, size: int) -> None:
    """Write a member's size into its header and fix the header's checksum."""
    data[header + 124:header + 136] = b"%011o\0" % size
    data[header + 148:header + 156] = b" " * 8
    data[header + 148:header + 156] = b"%06o\0 " % sum(data[header:header + 512])


def test_header_sizes_that_lie_are_named(tmp_path, wds, capsys):
    names, _ = wds
    data = bytearray(names[1].read_bytes())  # GNU format: each member's header right before its data
    first = next(webdataset.TarShard(str(names[1])).members())
    for size, message in ((len(data) * 2, "truncated: its data runs to byte"), (100, "corrupt tar header at byte")):
        lying = bytearray(data)
        _set_size(lying, first.first - 512, size)
        bad = tmp_path / "lying.tar"
        bad.write_bytes(bytes(lying))
        code, err = import_wds(capsys, bad, out=tmp_path / "out")
        assert code == 2 and err.startswith(f"{WDS} {bad}: ") and message in err, err


@pytest.mark.timeout(120)
def test_a_shard_changed_after_import_says_to_import_it_again(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "c", num=6)
    for fmt in ("webdataset", "shar"):
        index = import_local(fmt, corpus, tmp_path / fmt)
        tar = sorted((tmp_path / fmt / ("wds" if fmt == "webdataset" else "shar")).glob("*.tar"))[0]
        with open(tar, "ab") as f:
            f.write(b"\0" * 512)
        shards.clear_shards()
        with pytest.raises(DataError) as error:
            batches(write_recipe(tmp_path / f"{fmt}.yaml", index), num_workers=0)
        message = str(error.value)
        assert f"{tar}: the shard changed after it was imported (" in message and "--reseal" not in message
        assert message.endswith(f"; import the shards again (python -m speechiter.importers.{fmt} ... {index}), "
                                f"which indexes their members anew")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_truncated_shard_on_s3_is_named_truncated(tmp_path, wds, s3_client, s3_proxy, capsys):
    names, _ = wds
    bucket = f"speechiter-trunc-{uuid.uuid4().hex[:12]}"
    s3_client.create_bucket(Bucket=bucket)
    try:
        data = names[0].read_bytes()
        for size in (len(data) // 2, 5000):
            s3_client.put_object(Bucket=bucket, Key="t.tar", Body=data[:size])
            code, err = import_wds(capsys, f"s3://{bucket}/t.tar", out=tmp_path / "out")
            assert code == 2 and err.startswith(f"{WDS} s3://{bucket}/t.tar: ") and "truncated" in err, err
            assert "requested range" not in err.lower()
    finally:
        s3_client.delete_object(Bucket=bucket, Key="t.tar")
        s3_client.delete_bucket(Bucket=bucket)
