"""Shared fixtures: small real corpora made on the fly, and the shipped demo.

- ``make_corpus(root, num=20, fmt="wav", sample_rate=16000, seed=0, min_sec=0.2,
  max_sec=1.5, speakers=3) -> Path``: writes idx2wav, idx2wav_len, idx2text,
  idx2spk, idx2gen and spk_list into ``root`` with tools/make_corpus.py
  (uniform durations in [min_sec, max_sec]; fmt wav, flac or hdf5).
- ``corpus``: ``make_corpus(tmp_path / "corpus")``.
- ``demo_root``: the shipped demo corpus, ``demo/data`` (train/valid/test).
- ``load_tool(name)``: imports ``tools/<name>.py`` as a module.
- ``make_recipe(corpus, type="block.BlockIterator", *, name="recipe.yaml", **options) -> Path``:
  a data_cfg over ``corpus`` written to ``tmp_path / name`` (tests/recipes.py's ``write_recipe``).
- ``shared_corpus(**options) -> Path`` (session): ``make_corpus``'s corpus for those options, made once
  per session (per xdist worker) in a folder of its own; for tests that only read it.
- ``run_cli(*argv, cwd=None, env=None, path=()) -> Result(code, out, err)``: the command line in this
  process (tests/inprocess.py); a subprocess only where the process boundary is the point.
- The S3 fixtures of tests/s3.py (``s3_server`` once per session, ``s3_client``, ``s3_corpus``,
  ``s3_proxy``, ``fresh_storage``, ``localhost_only``).
- Markers (setup.cfg): ``slow`` (processes, servers), ``nightly`` (measures, or resolves against the
  package index): nightly tests run only when ``-m`` names them (``-m nightly``), never by default;
  ``cuda`` (needs a GPU): skipped where torch sees none.
- Under pytest-xdist the tests of ``long_tests.txt`` run first (measured with ``--durations``).
- ``no_leaks`` (autouse): after every test (at its module's end when it uses a
  module- or session-scoped fixture), no child process or loading worker, no
  /dev/shm segment of this process and no engine thread (``speechiter-*``).
"""
from __future__ import annotations

import importlib.util
import multiprocessing.forkserver
import os
import sys
import threading
from pathlib import Path

import psutil
import pytest

from tests import inprocess
from tests.processes import children
from tests.recipes import write_recipe
from tests.s3 import fresh_storage, localhost_only, s3_client, s3_corpus, s3_proxy, s3_server  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parents[1]
TOOLS_DIR = REPO_ROOT / "tools"
DEMO_DATA = REPO_ROOT / "demo" / "data"


def load_tool(name):
    """Import ``tools/<name>.py`` (tools/ is not a package) once per session."""
    module_name = f"_speechiter_tools_{name}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, TOOLS_DIR / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
    return module


@pytest.fixture(name="load_tool")
def load_tool_fixture():
    return load_tool


def _make_corpus(root, num=20, fmt="wav", sample_rate=16000, seed=0, min_sec=0.2, max_sec=1.5, speakers=3):
    return load_tool("make_corpus").make_corpus(
        Path(root), num, fmt=fmt, sample_rate=sample_rate, seed=seed, speakers=speakers,
        min_sec=min_sec, max_sec=max_sec)


@pytest.fixture(name="make_corpus")
def make_corpus_fixture():
    """Factory: ``make_corpus(root, num=20, fmt="wav", sample_rate=16000,
    seed=0, min_sec=0.2, max_sec=1.5, speakers=3) -> Path``."""
    return _make_corpus


@pytest.fixture(scope="session")
def shared_corpus(tmp_path_factory):
    """Factory: ``shared_corpus(**options) -> Path``, ``make_corpus``'s corpus for those options, made once
    per session; tests must not change it."""
    made = {}

    def get(**options):
        key = tuple(sorted(options.items()))
        if key not in made:
            made[key] = _make_corpus(tmp_path_factory.mktemp("shared") / "corpus", **options)
        return made[key]
    return get


@pytest.fixture
def run_cli():
    """``run_cli(*argv, cwd=None, env=None, path=()) -> Result(code, out, err)``: tests/inprocess.py."""
    return inprocess.run_cli


@pytest.fixture
def corpus(tmp_path, make_corpus):
    """A 20-utterance wav corpus (3 speakers, 0.2-1.5 s) in tmp_path/corpus."""
    return make_corpus(tmp_path / "corpus")


@pytest.fixture
def make_recipe(tmp_path):
    """Factory: ``make_recipe(corpus, type="block.BlockIterator", *, name="recipe.yaml", **options) -> Path``,
    the options of tests/recipes.py's ``write_recipe``."""
    def make(corpus, type="block.BlockIterator", *, name="recipe.yaml", **options):
        return write_recipe(tmp_path / name, corpus, type, **options)
    return make


@pytest.fixture
def demo_root():
    """Path to demo/data (train/, valid/, test/, spk_list)."""
    if not DEMO_DATA.is_dir():
        pytest.skip("demo/data is missing; run tools/make_demo.py")
    return DEMO_DATA


def shm_leftovers():
    prefix = f"speechiter_{os.getpid()}_"
    try:
        return [name for name in os.listdir("/dev/shm") if name.startswith(prefix)]
    except OSError:
        return []


def engine_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("speechiter-") and t.is_alive()]


def fork_server_workers():
    """Worker processes of this process's fork server (``children()`` leaves them out with the server)."""
    server = getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)
    try:
        return [] if server is None else [p for p in psutil.Process(server).children() if p.status() != "zombie"]
    except psutil.NoSuchProcess:
        return []


def check_no_leaks():
    workers = fork_server_workers()
    assert workers == [], "loading workers outlived the test"
    assert children() == []  # Python's resource tracker and fork server live as long as this process
    assert shm_leftovers() == []
    assert engine_threads() == []


# Module- or session-scoped fixtures that hold no iterator, worker or segment: a test that uses only these is
# checked after itself (this module's own check, the tmp_path folders, read-only corpora, the S3 server).
HOLD_NOTHING = {"no_leaks_at_module_end", "tmp_path_factory", "shared_corpus", "s3_server", "worker_id",
                "testrun_uid"}


def _shares_fixtures(item) -> bool:
    """Whether the test uses a module- or session-scoped fixture (which may hold iterators across tests)."""
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(defs and defs[-1].scope != "function" and name not in HOLD_NOTHING
                                    for name, defs in info.name2fixturedefs.items())


@pytest.fixture(autouse=True, scope="module")
def no_leaks_at_module_end():
    """Once a module's own fixtures are torn down: nothing of it is left (see no_leaks)."""
    yield
    check_no_leaks()


@pytest.fixture(autouse=True)
def no_leaks(request):
    """After every test: no child process (workers included), no segment of this process, no engine thread.

    A test that uses a module- or session-scoped fixture is checked at its module's end instead.
    """
    yield
    if not _shares_fixtures(request.node):
        check_no_leaks()


def pytest_collection_modifyitems(config, items):
    """``nightly`` tests run only when ``-m`` names them (``-m nightly``); see setup.cfg's markers. Tests marked
    ``cuda`` skip without a GPU (they run on a GPU machine: tools/bench_node.py --tests)."""
    cuda = [item for item in items if item.get_closest_marker("cuda") is not None]
    if cuda:
        import torch
        if not torch.cuda.is_available():
            for item in cuda:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        _long_tests_first(items)
    if "nightly" in (config.option.markexpr or ""):
        return
    kept = [item for item in items if item.get_closest_marker("nightly") is None]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("nightly")])
        items[:] = kept


def _long_tests_first(items) -> None:
    """Under pytest-xdist, the tests of tests/long_tests.txt first (each worker collects the same order): the
    long ones spread over the workers at the start instead of one of them running the last alone."""
    listed = (Path(__file__).parent / "long_tests.txt").read_text().split("\n")
    rank = {node_id: index for index, node_id in enumerate(line for line in listed if line and line[0] != "#")}
    items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))  # stable: the rest keep their order
