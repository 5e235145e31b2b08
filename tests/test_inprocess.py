"""tests/inprocess.py's run_cli: what a fresh ``python -m`` process would give, and nothing left behind."""
import logging
import os
import sys
import warnings

from speechiter.dataset import prefetch
from speechiter.sequence import torch_rng
from tests.inprocess import REPO, run_cli

TOOL = '''
import logging, os, sys, warnings

import helper  # a module beside it, imported from the folder run_cli was given

def main(argv):
    what = argv[0]
    if what == "print":
        print("out", os.getcwd(), os.environ.get("X"), os.environ.get("HOME") is None)
        print("err", file=sys.stderr)
        return 3
    if what == "none":
        return None
    if what == "exit":
        sys.exit(argv[1] if argv[1] != "int" else 4)
    if what == "raise":
        raise ValueError("boom")
    if what == "warn":
        for _ in range(2):
            warnings.warn("careful", UserWarning)
        warnings.warn("old", DeprecationWarning)
        logging.getLogger("speechiter").warning("speechiter: logged")
        return 0
    if what == "path":
        sys.path.append("/nonexistent-folder")
        return 0
'''


def write_tool(tmp_path, helper="VALUE = 1\n"):
    folder = tmp_path / "tool"
    folder.mkdir(parents=True)
    (folder / "clitool.py").write_text(TOOL)
    (folder / "helper.py").write_text(helper)
    return folder


def test_exit_code_streams_cwd_and_environment(tmp_path, monkeypatch):
    folder = write_tool(tmp_path)
    monkeypatch.setenv("HOME", "/home/someone")
    result = run_cli("print", module="clitool", path=[folder], cwd=tmp_path, env={"X": "1", "HOME": None})
    assert (result.code, result.returncode) == (3, 3)
    assert result.out == f"out {tmp_path.resolve()} 1 True\n" and result.stdout == result.out
    assert result.err == "err\n" == result.stderr
    assert os.getcwd() != str(tmp_path.resolve()) and "X" not in os.environ and os.environ["HOME"] == "/home/someone"


def test_sys_exit_none_and_exceptions_end_as_in_a_process(tmp_path):
    folder = write_tool(tmp_path)
    assert run_cli("none", module="clitool", path=[folder]).code == 0
    assert run_cli("exit", "int", module="clitool", path=[folder]).code == 4
    message = run_cli("exit", "bye", module="clitool", path=[folder])
    assert (message.code, message.err) == (1, "bye\n")
    raised = run_cli("raise", module="clitool", path=[folder])
    assert raised.code == 1 and raised.err.startswith("Traceback") and raised.err.endswith("ValueError: boom\n")


def test_warnings_and_the_speechiter_logger_go_to_stderr_once(tmp_path):
    folder = write_tool(tmp_path)
    for _ in range(2):  # each call is a fresh process: the warning comes again
        result = run_cli("warn", module="clitool", path=[folder])
        assert result.err.count("UserWarning: careful") == 1, result.err
        assert "DeprecationWarning" not in result.err and "speechiter: logged\n" in result.err
    assert not any(isinstance(h, logging.StreamHandler) and h.stream is not sys.stderr
                   for h in logging.getLogger("speechiter").handlers)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("here", UserWarning)
    assert len(caught) == 1  # the test's own filters are back


def test_sys_path_and_user_modules_are_taken_back(tmp_path):
    before = list(sys.path)
    first = write_tool(tmp_path / "a")
    assert run_cli("path", module="clitool", path=[first]).code == 0
    assert sys.path == before and "clitool" not in sys.modules and "helper" not in sys.modules
    second = write_tool(tmp_path / "b", helper="raise ImportError('the second helper')\n")
    assert "the second helper" in run_cli("none", module="clitool", path=[second]).err  # not the first one's


def test_a_script_runs_as_main_from_its_folder(tmp_path):
    folder = write_tool(tmp_path)
    script = folder / "script.py"
    script.write_text("import sys, helper\nprint(sys.argv[1:], helper.VALUE)\nsys.exit(0 if __name__ == '__main__' else 9)\n")
    result = run_cli("a", 2, script=script)
    assert (result.code, result.out) == (0, "['a', '2'] 1\n")
    assert "helper" not in sys.modules


def test_the_speechiter_cli_by_default_and_notices_rearmed(tmp_path):
    torch_rng._warned = True
    prefetch._local.started = []
    cwd = os.getcwd()
    result = run_cli("--data_cfg", "recipes/no-such-recipe.yaml")  # relative to the repository root
    assert result.code == 2 and result.out == ""
    assert result.err.startswith(f"speechiter: error: {REPO / 'recipes' / 'no-such-recipe.yaml'}: no such file "
                                 f"(looked in the current folder {REPO})"), result.err
    assert torch_rng._warned is False and not hasattr(prefetch._local, "started") and os.getcwd() == cwd
