"""Distributed evaluation: valid/test cover each utterance once across ranks, equal steps, marked padding.

Real torch.distributed (gloo on 127.0.0.1) in processes with 2 and 3 ranks, the CLI under torchrun,
and the rank/world_size keyword path without a process group.
"""
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.iterator.abs import Iterator
from speechiter.iterator.block import BlockIterator
from speechiter.plan.ordered import reorder
from speechiter.plan.view import BatchView, eval_share, merge_small
from tests.iterator.test_loop import handbook_code, run_example
from tests.recipes import entry, write_recipe

REPO = Path(__file__).resolve().parents[2]

WORKER = textwrap.dedent("""\
    import json, sys
    import torch.distributed as dist
    import speechiter
    dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=60))
    cfg, out = sys.argv[1], sys.argv[2]
    iterators = speechiter.build_iterators(speechiter.load_config(cfg), num_workers=1, distributed=True)
    steps = {}
    for label, value in (("valid", iterators["valid"]), ("test", iterators["test"]["clean"])):
        steps[label] = [{"ids": b.ids, "pad": b.is_padding, "rows": int(b["feat"].shape[0])}
                        for b in value.build_loader(epoch=1)]
        value.close()
    iterators["train"].close()
    with open(f"{out}.{dist.get_rank()}", "w") as f:
        json.dump(steps, f)
    dist.barrier()
    dist.destroy_process_group()
    """)


def write_cfg(tmp_path, corpus):
    return write_recipe(tmp_path / "cfg.yaml", corpus, "abs.Iterator", data_len=False, batch_size=4,
                        valid=entry(corpus, "abs.Iterator", shuffle=False),
                        test={"clean": entry(corpus, batch_len=60000)})


def check_cover(per_rank, all_ids):
    """Every id once across ranks (padding rows left out), equal step counts, padding only repeats."""
    assert len({len(steps) for steps in per_rank}) == 1
    real = [uid for steps in per_rank for s in steps for uid, pad in zip(s["ids"], s["pad"]) if not pad]
    assert sorted(real) == sorted(all_ids)
    for steps in per_rank:
        for s in steps:
            assert len(s["ids"]) == len(s["pad"]) == s["rows"] >= 1
            assert all(uid in all_ids for uid in s["ids"])


@pytest.mark.slow  # gloo ranks as processes
@pytest.mark.timeout(240)
@pytest.mark.parametrize("ranks", [2, 3])
def test_gloo_ranks_cover_each_evaluation_utterance_once(tmp_path, make_corpus, ranks):
    corpus = make_corpus(tmp_path / "corpus", num=7)
    cfg = write_cfg(tmp_path, corpus)
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    # the ranks forked from one process that imported torch (tests/forked_ranks.py), each with its own stderr
    result = subprocess.run([sys.executable, "-m", "tests.forked_ranks", "--stderr", str(tmp_path / "stderr"),
                             str(ranks), str(script), str(cfg), str(tmp_path / "out")], cwd=REPO, timeout=180,
                            env=dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1"))
    errors = [(tmp_path / f"stderr.{r}").read_text() for r in range(ranks)]
    assert result.returncode == 0, "\n".join(e[-2000:] for e in errors)
    ids = [line.split()[0] for line in (corpus / "idx2wav").read_text().splitlines()]
    results = [json.loads((tmp_path / f"out.{r}").read_text()) for r in range(ranks)]
    for label in ("valid", "test"):
        check_cover([res[label] for res in results], ids)
    # valid has one utterance per batch: 7 utterances need ceil(7 / ranks) steps, not 7 on every rank
    assert len(results[0]["valid"]) == -(-7 // ranks)
    pads = sum(p for res in results for s in res["valid"] for p in s["pad"])
    assert pads == (-7) % ranks
    assert "ngpu=1 but the world size" in errors[0] and all("ngpu=1" not in e for e in errors[1:])


def make(root, rank, world_size, cls=Iterator, **conf):
    return cls(dataset_type=SpeechTextDataset, dataset_conf={"main_data": {"feat": str(root / "idx2wav")}},
               data_len=str(root / "idx2wav_len"), engine="inline", rank=rank, world_size=world_size, **conf)


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize("conf", [{"batch_size": 1}, {"batch_size": 5}, {"cls": BlockIterator, "batch_len": 50000}])
def test_keyword_ranks_without_a_process_group(tmp_path, make_corpus, world_size, conf):
    corpus = make_corpus(tmp_path / "corpus", num=11)
    ids = [line.split()[0] for line in (corpus / "idx2wav").read_text().splitlines()]
    per_rank = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the ngpu warning is tested below
        for rank in range(world_size):
            iterator = make(corpus, rank, world_size, evaluation=True, shuffle=False, **dict(conf))
            per_rank.append([{"ids": b.ids, "pad": b.is_padding, "rows": len(b["feat"])}
                             for b in iterator.build_loader()])
    check_cover(per_rank, ids)


def test_training_keeps_the_split_each_batch_rule(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "corpus", num=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shares = [make(corpus, rank, 3, batch_size=1, name="train_rule").batches for rank in range(3)]
    assert all(len(s) == 5 for s in shares)  # every rank loads every one-utterance batch (SpeeChain)
    batch = next(iter(make(corpus, 0, 3, batch_size=1, name="train_rule", shuffle=False).build_loader()))
    assert batch.is_padding == [False]  # training repeats are real training rows


def test_merge_and_share_rules_on_a_view():
    view = BatchView.from_lists([["a", "b", "c"], ["d"], ["e"], ["f"], ["g"]])
    assert merge_small(view, 2).tolist() == [["a", "b", "c"], ["d", "e"], ["f", "g"]]
    assert merge_small(view, 3).tolist() == [["a", "b", "c"], ["d", "e", "f"], ["g"]]
    shares = [eval_share(view, rank, 3, descending=False) for rank in range(3)]
    assert [s.tolist() for s in shares] == [[["a"], ["d"], ["g"]], [["b"], ["e"], ["g"]], [["c"], ["f"], ["g"]]]
    assert [s.padding.tolist() for s in shares] == [[False] * 3, [False, False, True], [False, False, True]]
    taken = reorder(shares[1], np.array([2, 0]))
    assert taken.tolist() == [["g"], ["b"]] and taken.padding.tolist() == [True, False]


def test_ngpu_world_size_mismatch_warns_once_with_its_cost(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "corpus", num=5)
    with pytest.warns(UserWarning, match=r"ngpu=1 but the world size is 3: .* 5 of 5 batches split unevenly.*"
                                         r"10 utterances are loaded twice.*set ngpu to 3"):
        make(corpus, 0, 3, batch_size=1, name="mismatch_train")
    with pytest.warns(UserWarning, match=r"mismatch_eval: ngpu=1 .* merged and up to 2 padding rows"):
        make(corpus, 0, 3, batch_size=1, name="mismatch_eval", evaluation=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make(corpus, 0, 3, batch_size=1, name="mismatch_train")  # once per iterator and setting
        make(corpus, 1, 3, batch_size=1, name="other_rank")  # only rank 0 warns
        make(corpus, 0, 3, batch_size=1, ngpu=3, name="matched")


@pytest.mark.slow  # torchrun
@pytest.mark.timeout(300)
def test_cli_under_torchrun_names_its_rank_and_writes_a_report_per_rank(tmp_path, make_corpus):
    corpus = make_corpus(tmp_path / "corpus", num=6)
    cfg = write_cfg(tmp_path, corpus)
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=3",
                             "-m", "speechiter.run", "--data_cfg", str(cfg), "--quiet", "--distributed",
                             "--num_workers", "0", "--ngpu", "3", "--report", str(tmp_path / "report.json"),
                             "--dump_batches", str(tmp_path / "dump.jsonl")],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rank 0 of 3 shown" in result.stdout
    reports = [json.loads((tmp_path / f"report.rank{r}.json").read_text()) for r in range(3)]
    assert [(r["rank"], r["world_size"]) for r in reports] == [(0, 3), (1, 3), (2, 3)]
    assert sum(r["iterators"]["valid"]["utterances"] for r in reports) == 6  # 6 utterances, not 18
    valid = [json.loads(line) for r in range(3)
             for line in (tmp_path / f"dump.rank{r}.jsonl").read_text().splitlines()]
    valid = [u for rec in valid if rec["group"] == "valid" for u in rec["ids"]]
    assert len(valid) == len(set(valid)) == 6


@pytest.mark.slow  # the handbook's example under torchrun
@pytest.mark.timeout(300)
def test_handbook_distributed_evaluation_example(tmp_path, demo_root):
    code = handbook_code("## Distributed evaluation")
    result = run_example(code, tmp_path, sys.executable, "-m", "torch.distributed.run", "--standalone",
                         "--nproc_per_node=3")
    assert result.returncode == 0, result.stderr[-3000:]
    valid = len((demo_root / "valid" / "idx2wav").read_text().splitlines())
    assert f"valid: {valid} utterances" in result.stdout
