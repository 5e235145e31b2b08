"""Every documented combination of extras resolves with the package index as it is today.

README's install line (``pip install torch==2.13.0 && pip install -e '.[test,plot]'``), then each other
extra added after it (``pip install -e '.[s3]'``, ``[lhotse]``, ``[tts]``, ``[g2p]``), and all of them at once.

A real install of each combination takes minutes (torch alone is 750 MB), so this checks pip's resolution
(``pip install --dry-run --ignore-installed --report``: nothing is installed, the installed packages are
ignored, as in a fresh virtual environment). "Added after" is checked as pip does it: the extra resolves with
the packages that README's line resolved to pinned (``-c``), but for those the extra names itself, and
then every requirement of the whole set must hold (what ``pip check`` reports). A real run of the same
sequence, in a fresh venv, is in README.md's Install section.

Needs the package index (or every package in pip's cache); skipped, saying so, without it.
"""
import configparser
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

pytestmark = pytest.mark.slow  # asks the package index: about a minute per resolution

REPO = Path(__file__).resolve().parents[2]
README_LINE = "test,plot"
ADDED_AFTER = ("s3", "lhotse", "tts", "g2p")
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


def resolve(project: Path, extras: str, constraints: dict = None) -> dict:
    """``{name: report item}`` that pip resolves ``torch==2.13.0`` and ``.[extras]`` to (each item's
    ``metadata`` has ``version`` and ``requires_dist``); fails with pip's answer."""
    report = project / f"report-{extras.replace(',', '-')}-{bool(constraints)}.json"
    args = ["install", "--dry-run", "--ignore-installed", "--quiet", "--report", report, TORCH, f"{project}[{extras}]"]
    try:
        import setuptools  # noqa: F401  (the build backend; without it pip fetches one)
        args.insert(1, "--no-build-isolation")
    except ImportError:
        pass
    if constraints:
        pins = project / "installed.txt"
        pins.write_text("".join(f"{name}=={version}\n" for name, version in constraints.items()))
        args += ["-c", pins]
    done = _pip(*args)
    assert done.returncode == 0, f"pip install {extras}: exit {done.returncode}\n{done.stderr[-3000:]}"
    installs = json.loads(report.read_text())["install"]
    return {canonicalize_name(item["metadata"]["name"]): item for item in installs}


@pytest.fixture(scope="module")
def readme_line(project) -> dict:
    return resolve(project, README_LINE)


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
def test_each_extra_added_after_the_readme_line_leaves_pip_check_clean(project, readme_line, extra):
    """Installed packages stay as they are, except those the extra names itself (tts: setuptools<81)."""
    own = own_requirements(extra)
    pinned = {name: item["metadata"]["version"] for name, item in readme_line.items()
              if name != "speechiter" and name not in own}
    added = resolve(project, extra, pinned)
    assert not broken({**readme_line, **added})


@pytest.mark.timeout(600)
def test_every_extra_at_once(project):
    assert not broken(resolve(project, ",".join((README_LINE, *ADDED_AFTER))))
