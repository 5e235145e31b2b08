"""Every documented combination of extras resolves with the package index as it is today.

README's install line (``pip install torch==2.13.0 && pip install -e '.[test,plot]'``), then each other
extra added after it (``pip install -e '.[s3]'``, ``[lhotse]``, ``[tts]``, ``[g2p]``, ``[parquet]``), and all of
them at once.

A real install of each combination takes minutes (torch alone is 750 MB), so this checks pip's resolution
(``pip install --dry-run --ignore-installed --report``: nothing is installed, the installed packages are
ignored, as in a fresh virtual environment). "Added after" is checked as pip does it: the extra resolves with
the packages that README's line resolved to pinned (``-c``), but for those the extra names itself, and
then every requirement of the whole set must hold (what ``pip check`` reports). A real run of the same
sequence, in a fresh venv, is in README.md's Install section.

Needs the package index (or every package in pip's cache); skipped, saying so, without it. The reports of a
run where every resolution succeeded are kept in pytest's cache for the rest of the (UTC) day, keyed by
setup.cfg, pyproject.toml, pip and Python: a rerun that day checks them without asking the index.
"""
import configparser
import hashlib
import json
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

# asks the package index (once a day): about a minute per resolution; not run by CI (`python -m pytest -m nightly`)
pytestmark = [pytest.mark.slow, pytest.mark.nightly]

REPO = Path(__file__).resolve().parents[2]
README_LINE = "test,plot"
ADDED_AFTER = ("s3", "lhotse", "tts", "g2p", "parquet")
ALL = ",".join((README_LINE, *ADDED_AFTER))
TORCH = "torch==2.13.0"


def _pip(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """The package's metadata only (setup.cfg and what it reads), so that pip leaves nothing in the checkout."""
    probe = _pip("install", "--dry-run", "--ignore-installed", "--no-deps", "--quiet", "moto[s3]>=5", timeout=120)
    if probe.returncode != 0:
        pytest.skip("cannot reach the package index (and pip's cache cannot answer): "
                    + (probe.stderr.strip().splitlines() or ["no output"])[-1])
    folder = tmp_path_factory.mktemp("extras")
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, folder / name)
    (folder / "speechiter").mkdir()
    (folder / "speechiter" / "__init__.py").write_text("")
    return folder


class Resolution:
    """One ``pip install --dry-run --report`` of ``torch==2.13.0`` and ``.[extras]``, started at once (a
    resolution waits on the index about half its time, so they run side by side)."""

    def __init__(self, project: Path, extras: str, constraints: dict = None, cached: Path = None):
        self.extras = extras
        tag = f"{extras.replace(',', '-')}-{bool(constraints)}"
        self.report = project / f"report-{tag}.json"
        self.process = None
        if cached is not None:  # today's answer, kept by an earlier run
            self.report = cached / self.report.name
            return
        args = ["install", "--dry-run", "--ignore-installed", "--quiet", "--report", self.report, TORCH,
                f"{project}[{extras}]"]
        try:
            import setuptools  # noqa: F401  (the build backend; without it pip fetches one)
            args.insert(1, "--no-build-isolation")
        except ImportError:
            pass
        if constraints:
            pins = project / f"installed-{tag}.txt"
            pins.write_text("".join(f"{name}=={version}\n" for name, version in constraints.items()))
            args += ["-c", pins]
        self.stderr = project / f"stderr-{tag}.txt"
        with open(self.stderr, "w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pip", "--disable-pip-version-check", *map(str, args)],
                stdout=subprocess.DEVNULL, stderr=stderr)

    def result(self, timeout=300) -> dict:
        """``{name: report item}`` that pip resolved to (each item's ``metadata`` has ``version`` and
        ``requires_dist``); fails with pip's answer."""
        if self.process is None:
            return self._installs()
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        assert code == 0, f"pip install {self.extras}: exit {code}\n{self.stderr.read_text()[-3000:]}"
        return self._installs()

    def _installs(self) -> dict:
        installs = json.loads(self.report.read_text())["install"]
        return {canonicalize_name(item["metadata"]["name"]): item for item in installs}


def cache_folder(request) -> Path:
    """Where pytest's cache keeps today's reports (UTC day) for this metadata, pip and Python: the index is
    asked once a day, the suite's reruns read its answer (a folder in tmp_path without the cache plugin)."""
    if getattr(request.config, "cache", None) is None:
        return request.getfixturevalue("tmp_path_factory").mktemp("extras_cache")
    key = hashlib.sha256()
    for name in ("setup.cfg", "pyproject.toml"):
        key.update((REPO / name).read_bytes())
    key.update(f"{TORCH} {version('pip')} {sys.version} {datetime.now(timezone.utc):%Y-%m-%d}".encode())
    return request.config.cache.mkdir("extras_resolve") / key.hexdigest()[:16]


@pytest.fixture(scope="module")
def resolutions(request) -> dict:
    """``{extras: Resolution}``: README's line and all extras at once side by side, then, once README's line
    is resolved, each extra added after it (side by side too); from the cache when today's are there."""
    cached = cache_folder(request)
    if (cached / "done").exists():
        yield {key: Resolution(cached, ALL if key == "all" else key, key in ADDED_AFTER, cached=cached)
               for key in (README_LINE, "all", *ADDED_AFTER)}
        return
    project = request.getfixturevalue("project")
    started = {README_LINE: Resolution(project, README_LINE), "all": Resolution(project, ALL)}
    try:
        readme = started[README_LINE].result()
        for extra in ADDED_AFTER:
            own = own_requirements(extra)
            pinned = {name: item["metadata"]["version"] for name, item in readme.items()
                      if name != "speechiter" and name not in own}
            started[extra] = Resolution(project, extra, pinned)
        yield started
    finally:
        for resolution in started.values():
            if resolution.process.poll() is None:
                resolution.process.kill()
            resolution.process.wait()
    if all(resolution.process.returncode == 0 for resolution in started.values()):
        cached.mkdir(parents=True, exist_ok=True)
        for resolution in started.values():
            shutil.copy(resolution.report, cached / resolution.report.name)
        (cached / "done").write_text("")


@pytest.fixture(scope="module")
def readme_line(resolutions) -> dict:
    return resolutions[README_LINE].result()


@pytest.mark.timeout(600)
def test_readme_line_resolves_with_the_test_extra_lean(readme_line):
    assert not broken(readme_line)
    readme_line = {name: item["metadata"]["version"] for name, item in readme_line.items()}
    assert readme_line["torch"].startswith("2.13.0")
    # the S3 server the tests start, not moto[server]'s docker and cloud linters
    assert {"moto", "flask", "flask-cors", "boto3", "s3fs"} <= set(readme_line)
    assert not {"docker", "cfn-lint", "aws-xray-sdk", "openapi-spec-validator"} & set(readme_line)
    # boto3 X.Y.Z needs botocore X.Y.*: one resolution picked them together
    assert readme_line["boto3"].split(".")[:2] == readme_line["botocore"].split(".")[:2], readme_line


def own_requirements(extra: str) -> set:
    """The names an extra lists in setup.cfg (what adding it may change)."""
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    lines = config["options.extras_require"][extra].split("\n")
    return {canonicalize_name(Requirement(line).name) for line in lines if line.strip()}


def broken(installed: dict) -> list:
    """What ``pip check`` would say of ``{name: report item}``: requirements whose package is missing or of
    another version."""
    versions = {name: Version(item["metadata"]["version"]) for name, item in installed.items()}
    problems = []
    for name, item in installed.items():
        for text in item["metadata"].get("requires_dist") or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            have = versions.get(canonicalize_name(req.name))
            if have is None or not req.specifier.contains(have, prereleases=True):
                problems.append(f"{name} requires {text}, but has {have}")
    return problems


@pytest.mark.timeout(600)
@pytest.mark.parametrize("extra", ADDED_AFTER)
def test_each_extra_added_after_the_readme_line_leaves_pip_check_clean(resolutions, readme_line, extra):
    """Installed packages stay as they are, except those the extra names itself (tts: setuptools<81)."""
    assert not broken({**readme_line, **resolutions[extra].result()})


@pytest.mark.timeout(600)
def test_every_extra_at_once(resolutions):
    assert not broken(resolutions["all"].result())
