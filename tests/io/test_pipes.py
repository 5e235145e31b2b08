"""Kaldi piped values (``sox a.wav -t wav -r 8000 - |``) read natively, and other commands run only when allowed
(NOTE [ Piped values ] in speechiter/io/pipes.py, NOTE [ Running commands ] in speechiter/io/commands.py)."""
import shutil
import sys

import numpy as np
import pytest
import soundfile

from speechiter.errors import DataError
from speechiter.io.commands import run_command
from speechiter.io.pipes import parse_pipe
from speechiter.io.read import data_num_frames, read_feat
from speechiter.io.resample import resample
from speechiter.io.samples import resampled_length

SR = 16000

# A command that is not read natively: writes its input file to stdout as WAV, like sox would.
WAV_WRITER = """\
import io, sys, soundfile
x, sr = soundfile.read(sys.argv[1], dtype="int16", always_2d=True)
buf = io.BytesIO()
soundfile.write(buf, x, sr, format="WAV", subtype="PCM_16")
sys.stdout.buffer.write(buf.getvalue())
"""


def write(path, seconds=1.0, sr=SR, channels=1, seed=0, subtype="PCM_16", **kw):
    x = (np.random.RandomState(seed).randn(int(seconds * sr), channels) * 4000).astype(np.int16)
    soundfile.write(str(path), x, sr, subtype=subtype, **kw)
    return soundfile.read(str(path), dtype="float32", always_2d=True)[0]


def shorten(path):
    """A NIST SPHERE file whose header says it is shorten-compressed (as LDC's are)."""
    write(path, 0.2, format="NIST")
    data = path.read_bytes()
    header = data[:1024].replace(b"sample_coding -s3 pcm\n", b"sample_coding -s26 pcm,embedded-shorten-v2.00\n")
    assert header[1024:].strip(b"\0") == b""  # only padding is pushed out
    path.write_bytes(header[:1024] + data[1024:])


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "wav_writer.py"
    path.write_text(WAV_WRITER)
    return f"{sys.executable} {path}"


@pytest.mark.parametrize("command, fields", [
    ("flac -c -d -s /x/a.flac |", dict(file="/x/a.flac")),
    ("flac --decode --stdout --silent a.flac|", dict(file="a.flac")),
    ("cat /x/a.wav |", dict(file="/x/a.wav")),
    ("/opt/kaldi/tools/sph2pipe_v2.5/sph2pipe -f wav -p -c 2 /x/a.sph |", dict(file="/x/a.sph", channel=1,
                                                                               sphere=True)),
    ("sox /x/a.wav -t wav -r 8000 - |", dict(file="/x/a.wav", rate=8000)),
    ("sox -t flac /x/a.flac -r 16k -c 1 -b 16 -e signed-integer -t wav - remix 2 |",
     dict(file="/x/a.flac", rate=16000, mono=True, pcm16=True, channel=1)),
    ("sox /x/a.wav -t wav - rate 22050 |", dict(file="/x/a.wav", rate=22050)),
    ("ffmpeg -nostdin -loglevel quiet -i /x/a.wav -ar 8000 -ac 1 -acodec pcm_s16le -f wav - |",
     dict(file="/x/a.wav", rate=8000, mono=True, pcm16=True)),
    ("'/my dir/flac' -c -d -s '/x/a b.flac' |", dict(file="/x/a b.flac")),
])
def test_common_commands_parse(command, fields):
    pipe = parse_pipe(command)
    assert pipe.native, pipe.reason
    for name, value in fields.items():
        assert getattr(pipe, name) == value, name


@pytest.mark.parametrize("command, reason", [
    ("touch x |", "program 'touch'"),
    ("sox a.wav -t wav - speed 0.9 |", "sox effect 'speed 0.9'"),
    ("sox a.wav -t wav -r 8000 - | sox -t wav - -t wav - speed 1.1 |", "a pipeline"),
    ("sox -r 8000 a.raw -t wav - |", "sox option -r"),
    ("sox a.wav -t flac - |", "sox without '-t wav -'"),
    ("sox a.wav -t wav -b 24 - |", "bits '24'"),
    ("flac -d a.flac |", "flac options"),
    ("sph2pipe -f raw a.sph |", "output format 'raw'"),
    ("sph2pipe -f wav -t 1:2 a.sph |", "sph2pipe option -t"),
    ("ffmpeg -i a.wav -ac 2 -f wav - |", "channels '2'"),
    ("ffmpeg -ar 8000 -i a.wav -f wav - |", "input option -ar"),
    ("cat a.wav b.wav |", "2 file arguments"),
    ("sph2pipe -f wav a.sph 2>/dev/null |", "redirection"),
    ("sox 'a.wav -t wav - |", "cannot split it into words"),
    (" |", "no command"),
    ("sox a.wav -t wav -r fast - |", "rate 'fast'"),
    ("sox a.wav -t wav - remix 1,2 |", "remix '1,2'"),
    ("sox a.wav -t wav -e float - |", "encoding 'float'"),
    ("ffmpeg -i a.wav -i b.wav -f wav - |", "with two inputs"),
    ("ffmpeg -i a.wav -acodec mp3 -f wav - |", "codec 'mp3'"),
    ("ffmpeg -i a.wav -f wav - -y |", "option -"),
])
def test_anything_else_is_unknown(command, reason):
    pipe = parse_pipe(command)
    assert not pipe.native and reason in pipe.reason


def test_native_reads_do_what_the_command_asks(tmp_path):
    mono = write(tmp_path / "a.flac", 1.3, seed=1)
    stereo = write(tmp_path / "s.wav", 1.1, channels=2, seed=2)
    deep = write(tmp_path / "d.wav", 0.7, subtype="PCM_24", seed=3)
    cases = {
        f"flac -c -d -s {tmp_path}/a.flac |": (mono, SR),
        f"cat {tmp_path}/a.flac |": (mono, SR),
        f"sox {tmp_path}/a.flac -t wav -r 8000 - |": (read_feat(f"{tmp_path}/a.flac", 8000), 8000),
        f"sox {tmp_path}/s.wav -t wav - remix 2 |": (stereo[:, 1:], SR),
        f"sox {tmp_path}/s.wav -t wav -c 1 - |": (stereo.mean(axis=1, keepdims=True), SR),
        f"ffmpeg -i {tmp_path}/s.wav -ar 22050 -ac 1 -f wav - |":
            (resample(stereo.mean(axis=1, keepdims=True), SR, 22050), 22050),
        f"sox {tmp_path}/d.wav -t wav -b 16 - |": (np.round(deep * 32768) / 32768, SR),
    }
    for value, (expected, rate) in cases.items():
        x = read_feat(value)
        assert x.dtype == np.float32
        np.testing.assert_allclose(x, expected, rtol=0, atol=1e-7, err_msg=value)
        assert data_num_frames(value) == (x.shape[0], rate), value
        assert read_feat(value, 16000).shape[0] == resampled_length(x.shape[0], rate, 16000)


def test_a_time_range_applies_to_the_commands_output(tmp_path):
    write(tmp_path / "a.wav", 2.0, seed=4)
    value = f"sox {tmp_path}/a.wav -t wav -r 8000 - |"
    whole = read_feat(value)
    x = read_feat(f"{value}#t=0.5,1.25")
    np.testing.assert_array_equal(x, whole[4000:10000])
    assert data_num_frames(f"{value}#t=0.5,1.25") == (6000, 8000)
    plain = read_feat(f"{tmp_path}/a.wav#t=0.5,1.25")
    np.testing.assert_array_equal(read_feat(f"cat {tmp_path}/a.wav |#t=0.5,1.25"), plain)


def test_sphere_through_sph2pipe(tmp_path):
    stereo = write(tmp_path / "a.sph", 0.5, channels=2, format="NIST", seed=5)
    np.testing.assert_array_equal(read_feat(f"sph2pipe -f wav -p -c 2 {tmp_path}/a.sph |"), stereo[:, 1:])
    assert data_num_frames(f"sph2pipe -f wav -c 1 {tmp_path}/a.sph |") == (stereo.shape[0], SR)
    for read in (read_feat, data_num_frames):
        with pytest.raises(DataError, match=r"a.sph: the command takes channel 3, but the file has 2"):
            read(f"sph2pipe -f wav -c 3 {tmp_path}/a.sph |")
    shorten(tmp_path / "b.sph")
    for read in (read_feat, data_num_frames):
        with pytest.raises(DataError, match=r"b.sph: NIST SPHERE compressed as .*convert it once"):
            read(f"{tmp_path}/b.sph")  # named directly, too
        with pytest.raises(DataError, match=r"b.sph: NIST SPHERE compressed as 'pcm,embedded-shorten-v2.00', which "
                                            r"speechiter cannot decode .*convert it once, e.g. 'sph2pipe -f wav "):
            read(f"sph2pipe -f wav -p {tmp_path}/b.sph |")


def test_unknown_commands_are_refused_and_never_run(tmp_path):
    marker = tmp_path / "ran"
    for read in (read_feat, data_num_frames):
        with pytest.raises(DataError, match=r"a piped command speechiter does not read natively \(program 'touch'\), "
                                            r"never run by default; set the dataset's allow_commands: true"):
            read(f"touch {marker} |")
    assert not marker.exists()


@pytest.mark.slow  # commands run as processes
def test_allowed_commands_run_and_agree_with_native_reads(tmp_path, script):
    full = write(tmp_path / "a.wav", 1.0, seed=6)
    value = f"{script} {tmp_path}/a.wav |"
    np.testing.assert_array_equal(read_feat(value, allow_commands=True), full)
    np.testing.assert_array_equal(read_feat(f"{value}#t=0.25,0.5", allow_commands=True), full[4000:8000])
    assert data_num_frames(value, allow_commands=True) == (full.shape[0], SR)
    assert read_feat(value, 8000, allow_commands=True).shape[0] == 8000


@pytest.mark.slow  # a command run as a process
@pytest.mark.skipif(shutil.which("cat") is None, reason="no cat")
def test_cat_run_by_the_shell_equals_the_native_read(tmp_path):
    write(tmp_path / "a.wav", 0.6, seed=7)
    np.testing.assert_array_equal(run_command(f"cat {tmp_path}/a.wav")[0], read_feat(f"cat {tmp_path}/a.wav |"))


@pytest.mark.parametrize("tool, command", [
    ("flac", "flac -c -d -s {d}/a.flac"),
    ("sox", "sox {d}/a.flac -t wav -"),
    ("sox", "sox {d}/s.wav -t wav - remix 2"),
    ("ffmpeg", "ffmpeg -nostdin -loglevel quiet -i {d}/a.flac -f wav -"),
])
def test_real_tools_give_the_native_samples(tmp_path, tool, command):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")
    write(tmp_path / "a.flac", 0.8, seed=8)
    write(tmp_path / "s.wav", 0.8, channels=2, seed=9)
    command = command.format(d=tmp_path)
    np.testing.assert_array_equal(run_command(command)[0], read_feat(f"{command} |"))


@pytest.mark.slow  # commands run as processes
@pytest.mark.timeout(60)
@pytest.mark.parametrize("code, message, timeout", [
    ("import sys; sys.stderr.write('no such corpus\\n'); sys.exit(3)",
     r"failed \(exit status 3\): no such corpus", 30),
    ("import time; time.sleep(30)", r"did not finish in 1 s \(killed\)", 1),
    ("print('not audio')", r"did not write audio to its standard output \(10 bytes", 30),
    ("import io, sys, soundfile, numpy; b = io.BytesIO(); soundfile.write(b, numpy.zeros(0), 8000, format='WAV'); "
     "sys.stdout.buffer.write(b.getvalue())", r"wrote audio with no frames", 30),
])
def test_failing_commands_say_why(tmp_path, code, message, timeout):
    """Only the command that never ends gets a short limit: on a busy machine an interpreter importing numpy
    and soundfile can take more than a second to start."""
    (tmp_path / "c.py").write_text(code)
    with pytest.raises(DataError, match=message):
        run_command(f"{sys.executable} {tmp_path}/c.py", timeout=timeout)
