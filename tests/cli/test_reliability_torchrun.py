"""torchrun jobs that could go silently wrong (issue 31): ranks without --distributed, and ranks left running
after a SIGKILL to torchrun (NOTE [ torchrun without --distributed ], NOTE [ Orphaned ranks ] in
speechiter/launch.py)."""
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.recipes import write_recipe

pytestmark = pytest.mark.slow  # torchrun jobs

REPO = Path(__file__).resolve().parents[2]


def torchrun(tmp_path, recipe, *args, nproc=2):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "speechiter.run", "--data_cfg", str(recipe), "--quiet", "--num_workers", "0", *map(str, args)]
    log = open(tmp_path / "log.txt", "w")
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT), log


@pytest.mark.timeout(180)
def test_torchrun_without_distributed_is_one_error_per_rank_and_writes_nothing(tmp_path, corpus):
    recipe = write_recipe(tmp_path / "recipe.yaml", corpus, "abs.Iterator", batch_size=2)
    proc, log = torchrun(tmp_path, recipe, "--dump_batches", tmp_path / "dump.jsonl", "--save_state",
                         tmp_path / "state.json")
    try:
        assert proc.wait(150) != 0
    finally:
        proc.kill()
        log.close()
    lines = [line for line in (tmp_path / "log.txt").read_text().splitlines() if line.startswith("speechiter:")]
    # One line per rank that got as far: torchrun stops the other rank once one has failed, which on a busy
    # machine can be before that rank has started.
    ranks = sorted(line.split(" and ")[0] for line in lines)
    assert ranks in (["speechiter: error: torchrun: RANK=0", "speechiter: error: torchrun: RANK=1"],
                     ["speechiter: error: torchrun: RANK=0"], ["speechiter: error: torchrun: RANK=1"]), lines
    assert all("WORLD_SIZE=2 are set, but --distributed is not given" in line for line in lines)
    assert not list(tmp_path.glob("dump*")) and not list(tmp_path.glob("state*"))


@pytest.mark.timeout(180)
def test_ranks_stop_at_their_next_step_once_torchrun_is_killed(tmp_path, corpus):
    recipe = write_recipe(tmp_path / "recipe.yaml", corpus, "abs.Iterator", batch_size=1)
    proc, log = torchrun(tmp_path, recipe, "--distributed", "--ngpu", 2, "--epochs", 100000, "--save_state",
                         tmp_path / "state.json")
    ranks = []
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("state.rank*.json"))) < 2 or len(ranks) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "log.txt").read_text()
            ranks = [p for p in psutil.Process(proc.pid).children() if "speechiter.run" in " ".join(p.cmdline())]
            time.sleep(0.1)  # waiting for the ranks to step, not for a race
        proc.kill()
        proc.wait(30)
        gone, alive = psutil.wait_procs(ranks, timeout=30)
        assert alive == [], "ranks outlived torchrun"
    finally:
        for rank in ranks:
            try:
                rank.kill()
            except psutil.NoSuchProcess:
                pass
        proc.kill()
        log.close()
    errors = [line for line in (tmp_path / "log.txt").read_text().splitlines() if line.startswith("speechiter: error")]
    assert len(errors) == 2, errors
    assert all(f"its launcher (torchrun, pid {proc.pid}) is gone (killed?), so this rank stops too" in line
               for line in errors)


BLOCKED_RANK = """
import sys, time
from speechiter import launch
launch.ORPHAN_GRACE_S = 1.0
launcher = launch.Launcher(rank=1)
print("ready", flush=True)
time.sleep(120)  # blocked (a collective with a peer that stopped): never at its next step
"""

LAUNCHER = """
import subprocess, sys
rank = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, stderr=open(sys.argv[2], "w"))
rank.stdout.readline()
print(rank.pid, flush=True)
rank.wait()
"""


@pytest.mark.timeout(60)
def test_a_rank_blocked_past_its_step_check_is_ended_by_its_watch(tmp_path):
    # a launcher process and its rank: killing the launcher leaves the rank blocked in a call
    stderr = tmp_path / "rank.err"
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, BLOCKED_RANK, str(stderr)], stdout=subprocess.PIPE,
                                text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    rank = psutil.Process(int(launcher.stdout.readline()))
    try:
        launcher.kill()
        launcher.wait(30)
        rank.wait(20)  # ended by its watch about a second after it saw its launcher gone
    finally:
        if rank.is_running():
            rank.kill()
        launcher.stdout.close()
    assert stderr.read_text().splitlines() == [
        f"speechiter: error: rank 1: its launcher (torchrun, pid {launcher.pid}) is gone (killed?), so this rank "
        f"stops too, before it writes over the files a resumed job uses (blocked 1 s past it)"]
