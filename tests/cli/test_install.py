"""A non-editable install works on its own (issue 13, item 6).

Builds a wheel from a copy of the repository, installs it into a fresh virtual environment (with the
system site-packages, so torch and the other dependencies are not downloaded again), and runs a recipe
that names a shipped log-mel preset, ``config/feat/log_mel/80bin_25ms_10ms.yaml``, from a folder outside
the repository: the presets must come from the installed package, not from the checkout.
"""
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.recipes import entry, write_recipe

pytestmark = pytest.mark.slow  # builds a wheel and a virtual environment

REPO = Path(__file__).resolve().parents[2]
PRESET = "config/feat/log_mel/80bin_25ms_10ms.yaml"


def _run(args, cwd, env, timeout=180):
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python of a fresh venv holding the built wheel, env, a work folder outside the repo)."""
    root = tmp_path_factory.mktemp("install")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    # build from a copy: what ships is what the sources declare, and the checkout gets no build/ folder
    src = root / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "out", ".whl", ".gl",
        ".venv*", "venv"))
    dist = root / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", dist, src]
    try:
        import setuptools  # noqa: F401  (the build backend; torch brings it on Python >= 3.12)
        build.insert(5, "--no-build-isolation")
    except ImportError:
        pass
    _run(build, root, env)
    wheels = sorted(dist.glob("speechiter-*.whl"))
    assert len(wheels) == 1, wheels
    # A fresh venv that also sees this interpreter's site-packages (torch & co. are not installed again),
    # after its own. A .pth of paths rather than --system-site-packages, which would give the base
    # Python's packages only when the tests themselves run in a venv. Paths, not site dirs: the .pth
    # files there (an editable install of the checkout) are not run. pip, too, comes from there.
    venv.create(root / "venv", with_pip=False, symlinks=os.name != "nt")
    python = root / "venv" / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    own_site = _run([python, "-c", "import site; print(site.getsitepackages()[0])"], root, env).stdout.strip()
    outer = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]
    (Path(own_site) / "_outer_env.pth").write_text("".join(f"{p}\n" for p in outer))
    _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", wheels[0]], root, env)
    work = root / "elsewhere"
    work.mkdir()
    return python, env, work


@pytest.mark.timeout(300)
def test_wheel_ships_the_presets(installed):
    python, env, work = installed
    probe = ("import json, speechiter, speechiter.features as f;"
             f"print(json.dumps([speechiter.__file__, str(f.CONFIG_DIR), f.load_feat_conf({PRESET!r})]))")
    module_file, presets, conf = json.loads(_run([python, "-c", probe], work, env).stdout)
    venv_dir = python.parents[1]
    # the installed copy, not the checkout (an editable install of it sits on the system site-packages)
    assert Path(module_file).is_relative_to(venv_dir), module_file
    assert Path(presets).is_relative_to(venv_dir), presets
    assert sorted(p.name for p in (Path(presets) / "feat" / "log_mel").glob("*.yaml")) == [
        "40bin_25ms_10ms.yaml", "80bin_25ms_10ms.yaml", "80bin_25ms_10ms_train.yaml"]
    assert conf["n_mels"] == 80


@pytest.mark.timeout(300)
def test_installed_run_with_a_preset_from_another_folder(installed, make_corpus, tmp_path):
    python, env, work = installed
    corpus = make_corpus(tmp_path / "corpus", num=6)
    recipe = tmp_path / "recipe" / "asr.yaml"
    recipe.parent.mkdir()
    speech = dict(data=("feat", "text"), dataset_conf={"sample_rate": 16000, "feat_conf": PRESET})
    write_recipe(recipe, corpus, **speech, batch_len=3.2e4, valid=entry(corpus, "abs.Iterator", **speech))
    report = tmp_path / "report.json"
    proc = _run([python, "-m", "speechiter.run", "--data_cfg", recipe, "--epochs", "1", "--num_workers", "1",
                 "--out_type", "null", "--report", report, "--quiet"], work, env)
    iterators = json.loads(report.read_text())["iterators"]
    assert iterators["train"]["utterances"] == iterators["valid"]["utterances"] == 6, proc.stdout
    # frames, not samples: the log-mel preset was applied
    probe = ("import json, speechiter, sys; cfg = speechiter.load_config(sys.argv[1]);"
             "b = next(iter(speechiter.build_iterators(cfg, num_workers=0)['train'].build_loader(1)));"
             "print(json.dumps(list(b['feat'].shape)))")
    shape = json.loads(_run([python, "-c", probe, recipe], work, env).stdout.strip().splitlines()[-1])
    assert len(shape) == 3 and shape[2] == 80, shape
