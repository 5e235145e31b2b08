"""README's training-loop example and the handbook's resume example, run as written (issue 13)."""
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the examples run as scripts

REPO = Path(__file__).resolve().parents[2]


def python_block_after(path: Path, marker: str) -> str:
    text = path.read_text().split(marker, 1)[1]
    return textwrap.dedent(re.search(r"```python\n(.*?)```", text, re.S).group(1))


def run(code: str, tmp_path: Path):
    script = tmp_path / "example.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, str(script)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=240)


@pytest.mark.timeout(300)
def test_readme_training_loop(tmp_path, demo_root):
    code = python_block_after(REPO / "README.md", "From a training loop:")
    done = run(code + "\nprint(epoch, feat.dtype, feat.shape[-1], len(text) == len(feat_len))\n", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "torch.float32", "1", "True"] and done.stderr == ""


@pytest.mark.timeout(300)
def test_handbook_resume_example(tmp_path, demo_root):
    code = python_block_after(REPO / "handbook.md", "- Python: `loader.state_dict()` and `loader.load_state_dict(state)`:")
    prelude = textwrap.dedent("""\
        import speechiter
        train = speechiter.build_iterators(speechiter.load_config("recipes/demo/asr.yaml"), num_workers=2)["train"]
        epoch, checkpoint = 1, {}
        """)
    check = textwrap.dedent("""\
        state = checkpoint["data"]
        assert state["epoch"] == 1 and state["step"] == len(train), state
        assert list(loader) == []  # the saved epoch had ended: nothing is left of it
        print("resumed at", state["step"])
        """)
    done = run(prelude + code + check, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("resumed at ")
