"""python -m speechiter.importers.kaldi on data directories as real recipes write them: piped wav.scp entries of
each kind (no shell), SPHERE files, reco2dur, empty transcripts, mixed sample rates, and commands run only when
allowed."""
import sys

import numpy as np
import pytest
import soundfile

from speechiter.io.read import read_feat
from speechiter.paths import resolve_data_path

from tests.importers.test_kaldi import (PROG, command, kaldi, read_idx2, run, tone, write_audio,  # noqa: F401
                                        write_files)
from tests.io.test_pipes import WAV_WRITER, shorten


def write_sphere(path, seconds, channels=1, seed=0):
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, tone(seconds, channels=channels, seed=seed), 16000, format="NIST", subtype="PCM_16")
    return path


@pytest.fixture
def recipe(tmp_path):
    """A recipe folder whose data/train wav.scp uses each common pipe, with segments on piped recordings,
    reco2dur, an empty transcript and one 8 kHz recording."""
    root = tmp_path / "s5"
    write_audio(root / "db" / "a.flac", 2.0, seed=1)
    write_audio(root / "db" / "b.wav", 1.5, seed=2)
    write_sphere(root / "db" / "c.sph", 1.25, channels=2, seed=3)
    write_sphere(root / "db" / "d.sph", 1.0, seed=4)
    write_audio(root / "db" / "e.wav", 1.0, sample_rate=8000, seed=5)
    write_audio(root / "db" / "f.wav", 1.0, seed=6)
    wav_scp = ("a flac -c -d -s db/a.flac |\n"
               "b sox db/b.wav -t wav -r 8000 - |\n"
               "c /opt/kaldi/tools/sph2pipe_v2.5/sph2pipe -f wav -p -c 2 db/c.sph |\n"
               "d sph2pipe -f wav -p db/d.sph |\n"
               "e ffmpeg -nostdin -i db/e.wav -f wav - |\n"
               "f cat db/f.wav |\n")
    data = write_files(root / "data" / "train", **{
        "wav.scp": wav_scp,
        "segments": "a-1 a 0.0 1.2\na-2 a 1.2 2.0\nb-1 b 0.25 1.5\nc-1 c 0 -1\nd-1 d 0.1 0.9\ne-1 e 0 1\n"
                    "f-1 f 0.5 1\n",
        "text": "a-1 HELLO\na-2\nb-1 GOOD MORNING\nc-1 YES\nd-1 NO\ne-1 MAYBE\nf-1 SO\n",
        "reco2dur": "a 2.0\nb 1.5\nc 1.25\nd 1.00\ne 1.0\nf 1.0\ng 3.0\n"})
    return root, data


def test_a_recipe_with_pipes_imports_with_no_shell(kaldi, recipe, tmp_path, capsys, monkeypatch):
    root, data = recipe
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))  # no flac, sox, sph2pipe or ffmpeg, not even cat
    out = tmp_path / "out"
    assert run(kaldi, data, out, "--root", root) == 0
    err = capsys.readouterr().err.splitlines()
    wav = read_idx2(out / "idx2wav")
    db = root / "db"
    assert wav == {"a-1": "../s5/db/a.flac#t=0.0,1.2", "a-2": "../s5/db/a.flac#t=1.2,2.0",
                   "b-1": f"sox {db}/b.wav -t wav -r 8000 - |#t=0.25,1.5",
                   "c-1": f"/opt/kaldi/tools/sph2pipe_v2.5/sph2pipe -f wav -p -c 2 {db}/c.sph |#t=0",
                   "d-1": "../s5/db/d.sph#t=0.1,0.9", "e-1": "../s5/db/e.wav#t=0,1", "f-1": "../s5/db/f.wav#t=0.5,1"}
    lengths = {u: int(n) for u, n in read_idx2(out / "idx2wav_len").items()}
    for utt, value in wav.items():
        x = read_feat(resolve_data_path(value, out / "idx2wav"))
        assert x.shape == (lengths[utt], 1), utt
    assert lengths["b-1"] == 10000  # 1.25 s at sox's -r 8000
    np.testing.assert_array_equal(read_feat(resolve_data_path(wav["c-1"], out / "idx2wav"))[:, 0],
                                  tone(1.25, channels=2, seed=3)[:, 1] / 32768)
    assert "a-2" not in read_idx2(out / "idx2text") and read_idx2(out / "idx2text")["b-1"] == "GOOD MORNING"
    assert any("1 of 7 utterances have an empty transcript (first: 'a-2', " in line and "an idx2 line needs a value"
               in line for line in err), err
    assert not any("no entry in idx2text" in line for line in err)
    assert any("1 in reco2dur" in line for line in err)
    assert any("utterances at several sample rates: 16000 Hz (5), 8000 Hz (2); idx2wav_len counts each at its "
               "own rate" in line and "--sample_rate" in line for line in err), err


def test_sample_rate_writes_the_lengths_a_dataset_reads(kaldi, recipe, tmp_path, capsys):
    root, data = recipe
    out = tmp_path / "out"
    assert run(kaldi, data, out, "--root", root, "--sample_rate", "16000") == 0
    assert "several sample rates" not in capsys.readouterr().err
    lengths = read_idx2(out / "idx2wav_len")
    for utt, value in read_idx2(out / "idx2wav").items():
        assert read_feat(resolve_data_path(value, out / "idx2wav"), 16000).shape[0] == int(lengths[utt]), utt
    assert lengths["b-1"] == "20000" and lengths["e-1"] == "16000"
    with pytest.raises(SystemExit) as exit:
        run(kaldi, data, out, "--root", root, "--sample_rate", "0")
    assert exit.value.code == 2 and "--sample_rate should be a positive integer, but got 0" in capsys.readouterr().err


def test_unknown_commands_are_refused_all_at_once(tmp_path):
    marker = tmp_path / "ran"
    write_audio(tmp_path / "r.wav", 0.5)
    lines = ["r r.wav"] + [f"p{i} touch {marker}{i} |" for i in range(4)] + ["q sox r.wav -t wav - speed 1.1 |"]
    data = write_files(tmp_path / "d", **{"wav.scp": "\n".join(lines) + "\n"})
    done = command("speechiter.importers.kaldi", data, tmp_path / "out", "--root", tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    scp = data / "wav.scp"
    assert (f"{PROG}: error: 5 piped commands that speechiter does not read natively, never run by default: "
            f"{scp}:2 (program 'touch'), {scp}:3 (program 'touch'), {scp}:4 (program 'touch') and 2 more; "
            f"pass --allow_commands to run them (they run as shell commands: only for data you trust)") \
        in done.stderr
    assert not list(tmp_path.glob("ran*")) and not (tmp_path / "out").exists()


@pytest.mark.slow  # commands run as processes
@pytest.mark.timeout(120)
def test_allowed_commands_run_with_a_timeout(kaldi, tmp_path, capsys):
    write_audio(tmp_path / "r.wav", 0.75, seed=7)
    (tmp_path / "w.py").write_text(WAV_WRITER)
    data = write_files(tmp_path / "d", **{"wav.scp": f"r {sys.executable} {tmp_path / 'w.py'} {tmp_path / 'r.wav'} |\n",
                                          "segments": "u r 0.25 0.75\n"})
    out = tmp_path / "out"
    assert run(kaldi, data, out, "--allow_commands") == 0
    value = read_idx2(out / "idx2wav")["u"]
    assert value == f"{sys.executable} {tmp_path / 'w.py'} {tmp_path / 'r.wav'} |#t=0.25,0.75"
    assert read_idx2(out / "idx2wav_len")["u"] == "8000"
    np.testing.assert_array_equal(read_feat(value, allow_commands=True), read_feat(f"{tmp_path / 'r.wav'}#t=0.25,0.75"))
    (tmp_path / "w.py").write_text("import time; time.sleep(30)")
    capsys.readouterr()
    assert run(kaldi, data, tmp_path / "out2", "--allow_commands", "--command_timeout", "0.5") == 2
    err = capsys.readouterr().err
    assert f"{data / 'wav.scp'}:1: command " in err and "did not finish in 0.5 s (killed)" in err
    (tmp_path / "w.py").write_text("import sys; sys.stderr.write('no disk\\n'); sys.exit(5)")
    assert run(kaldi, data, tmp_path / "out2", "--allow_commands") == 2
    assert "failed (exit status 5): no disk" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit:
        run(kaldi, data, tmp_path / "out2", "--allow_commands", "--command_timeout", "0")
    assert exit.value.code == 2
    assert "--command_timeout should be a positive number of seconds, but got 0.0" in capsys.readouterr().err


@pytest.mark.parametrize("files, message", [
    ({"reco2dur": "r 1.5\n"}, "reco2dur:1: recording 'r' is 1.000 s long (16000 samples at 16000 Hz), but reco2dur "
                              "says 1.5 s: more than 0.1 s apart"),
    ({"reco2dur": "r x\n"}, "reco2dur:1: duration should be a number of seconds, but got 'x'"),
    ({"segments": "u r 0.2 1.6\n"}, "segments:1: segment 'u' ends at 1.6 s, more than 0.5 s past the end of "
                                    "recording 'r' (1.000 s)"),
    ({"wav.scp": "r sph2pipe -f wav s.sph |\n"}, "s.sph: NIST SPHERE compressed as 'pcm,embedded-shorten-v2.00', "
                                                 "which speechiter cannot decode"),
    ({"wav.scp": "r ffmpeg -i a.m4a -f wav - |\n"}, "a.m4a: cannot read audio header"),
    ({"wav.scp": "r sph2pipe -f wav -c 2 r.wav |\n"}, "r.wav: the command takes channel 2, but the file has 1"),
    ({"wav.scp": "r flac -c -d -s gone.flac |\n"}, "wav.scp:1: no such audio file: "),
    ({"wav.scp": "r cat empty.wav |\n"}, "empty.wav has no audio frames"),
    ({"wav.scp": "r sox empty.wav -t wav -r 8000 - |\n"}, "empty.wav -t wav -r 8000 - | gives no audio frames"),
    ({"wav.scp": "".join(f"r{i} r.wav\n" for i in range(5)), "reco2dur": "".join(f"r{i} 9\n" for i in range(5))},
     "reco2dur:3: recording 'r2' is 1.000 s long (16000 samples at 16000 Hz), but reco2dur says 9 s (and 2 more): "
     "more than 0.1 s apart"),
])
def test_bad_input_names_the_line(kaldi, tmp_path, capsys, files, message):
    write_audio(tmp_path / "r.wav", 1.0)
    shorten(tmp_path / "s.sph")
    soundfile.write(tmp_path / "empty.wav", np.zeros(0, np.int16), 16000)
    (tmp_path / "a.m4a").write_bytes(b"\0\0\0 ftypM4A not really")
    data = write_files(tmp_path / "d", **{"wav.scp": "r r.wav\n", **files})
    assert run(kaldi, data, tmp_path / "out", "--root", tmp_path) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
