"""README's training-loop example and the handbook's resume example, run as written (issue 13)."""
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.processes import own_stderr

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
    assert done.stdout.split() == ["3", "torch.float32", "1", "True"] and own_stderr(done.stderr) == ""


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


# --- every recipe of the handbook, README, recipes/ and examples/, as written (issue 31) ----------------------------
#
# A YAML block that shows a shape with `...` is a fragment; every other block is a recipe. Its /path/to/...
# placeholders, and the relative folders it names, are made in a folder of test data (``world``); the recipe
# is written to recipes/demo/ inside it (README's ../../demo/data is the shipped demo), built as written,
# and its plans checked: at least two batches for each train corpus, padding efficiency of sorted batches
# above a floor, a batch_len of 1 s to 10 min of audio in its own unit. Then each iterator loads batches.

PADDING_FLOOR = 0.7
BUDGET_SECONDS = (1.0, 600.0)


def yaml_blocks(path: Path):
    """``(name, text)`` of each YAML block, named by its document and section: ``handbook.md#augmentation``."""
    text, seen = path.read_text(), {}
    for match in re.finditer(r"```ya?ml\n(.*?)```", text, re.S):
        prose = re.sub(r"```.*?```", "", text[:match.start()], flags=re.S)  # a `# comment` in code is no heading
        heading = re.findall(r"^#+ (.+)$", prose, re.M)[-1:] or ["top"]
        name = f"{path.name}#{re.sub(r'[^a-z0-9]+', '-', heading[0].lower()).strip('-')}"
        seen[name] = seen.get(name, 0) + 1
        yield name + (f"-{seen[name]}" if seen[name] > 1 else ""), match.group(1)


RECIPE_BLOCKS = [(name, text) for doc in ("README.md", "handbook.md") for name, text in yaml_blocks(REPO / doc)
                 if "..." not in text]
SHIPPED = sorted((REPO / "recipes").rglob("*.yaml")) + sorted((REPO / "examples").rglob("*.yaml"))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A folder with every placeholder's data; returns (its recipes/demo folder, {placeholder: path})."""
    from tests.conftest import _make_corpus, load_tool
    from tests.dataset.augment_corpora import noise_waves, rir_waves, write_list
    from tests.dataset.test_random_spk import write_spk_feats
    root = tmp_path_factory.mktemp("world")
    folder = root / "recipes" / "demo"
    folder.mkdir(parents=True)
    (root / "demo").symlink_to(REPO / "demo")
    corpora = [_make_corpus(root / name, num=40, min_sec=1.0, max_sec=3.0, seed=seed)
               for seed, name in enumerate(("corpus", "corpus2"))]
    noise = write_list(root / "musan", "noise", noise_waves()).parent
    rirs = write_list(root / "rirs", "rir", rir_waves()).parent
    (noise / "idx2wav").rename(noise / "noise.list")  # the folders hold idx2wav as the recipes name them
    (noise / "idx2wav").write_text((noise / "noise.list").read_text())
    kaldi = folder / "data" / "train"  # Kaldi segments: each recording cut in two
    kaldi.mkdir(parents=True)
    wavs = dict(line.split() for line in (corpora[0] / "idx2wav").read_text().splitlines())
    lengths = dict(line.split() for line in (corpora[0] / "idx2wav_len").read_text().splitlines())
    (kaldi / "wav.scp").write_text("".join(f"{uid} {corpora[0] / path}\n" for uid, path in wavs.items()))
    cuts = [(f"{uid}-{k}", uid, k * int(lengths[uid]) / 32000, (k + 1) * int(lengths[uid]) / 32000 if k == 0 else -1)
            for uid in wavs for k in (0, 1)]
    (kaldi / "segments").write_text("".join(f"{u} {r} {s:.4f} {e if e == -1 else f'{e:.4f}'}\n" for u, r, s, e in cuts))
    (kaldi / "text").write_text("".join(f"{u} words of {u}\n" for u, *_ in cuts))
    load_tool("data_len").data_len(str(kaldi / "segments"), sample_rate=16000)
    shutil.copytree(kaldi, kaldi.parent / "dev")
    tts = folder / "datasets" / "libritts" / "data"
    (tts / "g2p" / "test-clean" / "stress" / "no-punc").mkdir(parents=True)
    (tts / "g2p" / "test-clean" / "stress" / "no-punc" / "idx2text").write_text(
        (corpora[0] / "idx2text").read_text())
    write_spk_feats(tts / "wav16000" / "train-clean-100", {"s1": ["s1_0", "s1_1"], "s2": ["s2_0"]})
    places = {"/path/to/librispeech/train": corpora[0], "/path/to/commonvoice/train": corpora[1],
              "/path/to/corpus": corpora[0], "/path/to/musan": noise, "/path/to/rirs": rirs,
              "/path/to/rirs/idx2wav": rirs / "idx2wav", "/path/to/musan/idx2wav": noise / "idx2wav",
              "/path/to/idx2wav_len": corpora[0] / "idx2wav_len", "/path/to/idx2wav": corpora[0] / "idx2wav"}
    return folder, dict(sorted(places.items(), key=lambda item: -len(item[0])))  # the longest placeholder first


def my_lab(folder: Path, text: str, name: str):
    """The handbook's my_lab modules beside a recipe that names them (its section's python block)."""
    for module in [m for m in sys.modules if m == "my_lab" or m.startswith("my_lab.")]:
        del sys.modules[module]
    sys.path[:] = [p for p in sys.path if not (Path(p) / "my_lab").is_dir()]
    handbook = (REPO / "handbook.md").read_text()
    for title, module in (("## Writing your own Iterator", "iterators"), ("## Writing your own Dataset", "datasets")):
        if f"my_lab.{module}." in text:
            section = handbook.split(title, 1)[1].split("\n## ", 1)[0]
            (folder / "my_lab").mkdir(exist_ok=True)
            (folder / "my_lab" / "__init__.py").write_text("")
            (folder / "my_lab" / f"{module}.py").write_text(re.search(r"```python\n(.*?)```", section, re.S).group(1))


def leaves(iterator):
    """A mix's corpora, else the iterator itself."""
    return list(getattr(iterator, "iterators", {}).items()) if hasattr(iterator, "source_of") else [(None, iterator)]


def check_recipe(path: Path):
    """Build ``path`` as written, check every plan, load each iterator's first batches."""
    import numpy as np
    import speechiter
    from speechiter.build import close_all, flat_iterators
    from speechiter.plot import summarize

    iterators = speechiter.build_iterators(speechiter.load_config(path), num_workers=0, out_type="null")
    try:
        for label, iterator in flat_iterators(iterators):
            for name, leaf in leaves(iterator):
                where = f"{path.name}: {label}" + (f"/{name}" if name else "")
                batches = leaf.epoch_batches(1)
                stats = summarize(batches, leaf.data_len)
                if label.startswith("train"):
                    assert len(batches) > 1, f"{where}: one batch of {stats['utterances']} utterances"
                if stats["padding_efficiency"] is not None and len(batches) > 1:
                    assert stats["padding_efficiency"] >= PADDING_FLOOR, (where, stats["padding_efficiency"])
                budget = getattr(leaf, "iter_conf", {}).get("batch_len")
                sample_rate = getattr(leaf.dataset, "sample_rate", None)
                if budget and sample_rate and leaf.data_len is not None:
                    seconds = float(budget) / float(leaf.dataset.batch_length_fn(sample_rate))
                    assert BUDGET_SECONDS[0] <= seconds <= BUDGET_SECONDS[1], \
                        f"{where}: batch_len {budget} is {seconds:.0f} s of audio per batch"
            loaded = list(iterator.build_loader(1, stop_step=min(2, len(iterator))))
            assert loaded, f"{path.name}: {label} gave no batch"
            for batch in loaded:
                for part in (batch.values() if isinstance(batch, dict) else []):
                    if isinstance(part, np.ndarray) and part.dtype.kind == "f":
                        assert np.isfinite(part).all(), f"{path.name}: {label}: a batch holds NaN or inf"
    finally:
        close_all(iterators)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name, text", RECIPE_BLOCKS, ids=[name for name, _ in RECIPE_BLOCKS])
def test_every_documented_recipe_runs_as_written_with_sensible_batches(world, name, text, monkeypatch):
    folder, places = world
    for placeholder, path in places.items():
        text = text.replace(placeholder, str(path))
    recipe = folder / f"{re.sub(r'[^A-Za-z0-9]+', '_', name)}.yaml"
    recipe.write_text(text)
    my_lab(folder, text, name)
    monkeypatch.chdir(folder.parent.parent)  # not the repository: paths resolve against the recipe's folder
    check_recipe(recipe)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("recipe", SHIPPED, ids=[str(p.relative_to(REPO)) for p in SHIPPED])
def test_every_shipped_recipe_runs_with_sensible_batches(recipe, demo_root, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_recipe(recipe)


def test_the_documents_have_recipes_to_run():
    assert len(RECIPE_BLOCKS) >= 8 and len(SHIPPED) >= 4
    assert any(name.startswith("README.md#") for name, _ in RECIPE_BLOCKS)
