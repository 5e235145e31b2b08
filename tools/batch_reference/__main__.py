"""Write the batches and state files of a fixed set of runs into a folder, to compare two versions of the code.

    python tools/batch_reference OUT_DIR [--data DATA_DIR] [--only NAME ...] [--engines inline ...]
                                 [--skip cli api dist]
    diff -r BEFORE_DIR AFTER_DIR

For a refactor that must not change behaviour: run it on the code before and after, into two folders, and
compare them. Each run writes ``<name>.jsonl`` (``--dump_batches``), ``<name>.state.json`` (the state files,
Python API states included) and ``<name>.err`` (the last stderr line of a run that failed, e.g. a refused
resume). The runs: the shipped recipes (recipes/demo) and generated ones (block, bucket, abs, piece, a list
hook, an own epoch_view, groups under both steps policies, mixes alone and in a group, ngpu 2, a clipped
epoch, distributed evaluation with explicit ranks), each with every engine (inline; msequence with process
and thread workers; torch); a resume from the middle of an epoch with every engine; the Python API's loader
and group states at a few steps and what loading them gives; elastic resumes (a state of 2 ranks continued
on 1 and 3, at mid-epoch through the Python API and at an epoch's start through torchrun).
The corpora are generated into DATA_DIR (default OUT_DIR/../data): keep it fixed between the two runs, as
state files name their paths.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[2]
ENGINES = {"inline": ["--engine", "inline", "--num_workers", "0"],
           "proc": ["--engine", "msequence", "--thread_type", "proc", "--num_workers", "2"],
           "thread": ["--engine", "msequence", "--thread_type", "thread", "--num_workers", "2"],
           "torch": ["--engine", "torch", "--num_workers", "2"]}

CODE = Path(__file__).resolve().parent  # refstop.py, refhooks.py, api.py


def make_data(data: Path) -> dict:
    """The corpora: ``wav`` (24 utterances, 3 speakers) and ``text`` (40 text utterances with lengths)."""
    marker = data / "done"
    if not marker.exists():
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True)
        sys.path.insert(0, str(REPO / "tools"))  # make_corpus
        from make_corpus import make_corpus
        make_corpus(data / "wav", 24, fmt="wav", sample_rate=16000, seed=3, speakers=3, min_sec=0.2, max_sec=1.2)
        make_corpus(data / "wav2", 10, fmt="flac", sample_rate=16000, seed=4, speakers=2, min_sec=0.3, max_sec=1.0)
        rng = np.random.default_rng(11)
        text = data / "text"
        text.mkdir()
        ids = [f"utt{i:03d}" for i in range(40)]
        (text / "idx2text").write_text("".join(f"{u} words {i}\n" for i, u in enumerate(ids)))
        (text / "idx2len").write_text("".join(f"{u} {n}\n" for u, n in zip(ids, rng.integers(100, 1000, 40))))
        marker.write_text("")
    return {"wav": data / "wav", "wav2": data / "wav2", "text": data / "text", "recipes": data / "recipes"}


def speech(corpus: Path, type_: str = "block.BlockIterator", dataset="refstop.StopAt", text=True, **conf) -> dict:
    main = {"feat": str(corpus / "idx2wav")}
    if text:
        main["text"] = str(corpus / "idx2text")
    return {"type": type_, "conf": {"dataset_type": dataset, "dataset_conf": {"main_data": main, "sample_rate": 16000},
                                    "data_len": str(corpus / "idx2wav_len"), **conf}}


def text_it(corpus: Path, type_: str = "block.BlockIterator", **conf) -> dict:
    return {"type": type_, "conf": {"dataset_type": "refstop.StopAt",
                                    "dataset_conf": {"main_data": {"text": str(corpus / "idx2text")}},
                                    "data_len": str(corpus / "idx2len"), **conf}}


def recipes(paths: dict, folder: Path) -> dict:
    """``{name: recipe file}``: the shipped ones (dataset_type set to refstop.StopAt by --set) and ours."""
    wav, wav2, text = paths["wav"], paths["wav2"], paths["text"]
    valid = speech(wav2, "abs.Iterator", shuffle=False)
    cfgs = {
        "block": {"train": speech(wav, batch_len=40000), "valid": valid},
        "block_clip": {"train": speech(wav, batch_len=30000, batches_per_epoch=5), "valid": valid},
        "block_never": {"train": speech(wav, batch_len=40000, batch_len_rule="never_exceed")},
        "bucket": {"train": speech(wav, "bucket.BucketIterator", batch_len=50000), "valid": valid},
        "abs_text": {"train": text_it(text, "abs.Iterator", batch_size=3)},
        "piece_text": {"train": text_it(text, "piece.PieceIterator", batch_size=4, is_descending=False)},
        "block_ngpu2": {"train": speech(wav, batch_len=40000, ngpu=2)},
        "listhook": {"train": text_it(text, "refhooks.LongestFirst", max_utts=5)},
        "ownview": {"train": text_it(text, "refhooks.Rotating", batch_len=2500)},
        "semi_longest": {"train": {"steps": "longest",
                                   "sup": text_it(text, "abs.Iterator", batch_size=1,
                                                  dataset_conf={"main_data": {"text": str(text / "idx2text")},
                                                                "data_selection": ["order", 0.25]}),
                                   "unsup": text_it(text, batch_len=2500)}},
        "semi_shortest": {"train": {"sup": text_it(text, "abs.Iterator", batch_size=2),
                                    "unsup": text_it(text, batch_len=2500)}, "valid": valid},
        "mix3": {"train": {"type": "mix.MixIterator", "conf": {
            "batches_per_epoch": 13, "weights": {"a": 0.5, "b": 0.3, "c": 0.2},
            "iterators": {"a": speech(wav, batch_len=40000), "b": speech(wav2, batch_len=30000),
                          "c": text_it(text, batch_len=2000)}}}},
        "mix_group": {"train": {"steps": "longest", "mixed": {"type": "mix.MixIterator", "conf": {
            "batches_per_epoch": 7, "weights": {"a": 2, "b": 1},
            "iterators": {"a": text_it(text, batch_len=2500), "b": speech(wav2, "abs.Iterator", batch_size=2)}}},
            "plain": speech(wav, batch_len=40000)}},
        "eval_groupinfo": {"test": {"one": {"type": "abs.Iterator", "conf": {
            "dataset_type": "refstop.StopAt",
            "dataset_conf": {"main_data": {"feat": str(wav / "idx2wav")}, "sample_rate": 16000},
            "data_len": str(wav / "idx2wav_len"), "batch_size": 5, "shuffle": False,
            "group_info": {"speaker": str(wav / "idx2spk"), "gender": str(wav / "idx2gen")}}},
            "two": {"x": text_it(text, "piece.PieceIterator", batch_size=7), "y": text_it(text, batch_len=3000)}}},
    }
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, cfg in cfgs.items():
        if "train" in cfg:
            cfg.setdefault("valid", valid)
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        files[name] = path
    for name in ("asr", "tts", "semi", "mix"):
        files[f"demo_{name}"] = REPO / "recipes" / "demo" / f"{name}.yaml"
    return files


def demo_sets(name: str) -> list:
    """--set options that make a shipped recipe's train datasets refstop.StopAt."""
    if name == "demo_semi":
        keys = ["train.sup", "train.unsup"]
    elif name == "demo_mix":
        keys = ["train.conf.iterators.main", "train.conf.iterators.extra"]
    else:
        keys = ["train"]
    out = []
    for key in keys:
        out += ["--set", f"{key}.conf.dataset_type=refstop.StopAt"]
    return out


class Runner:
    def __init__(self, out: Path, paths: dict):
        self.out, self.paths = out, paths
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(CODE)]))
        self.env.pop("STOP_ID", None)

    def cli(self, name: str, args: list, env=None, torchrun: int = 0) -> int:
        cmd = [sys.executable, "-m", "speechiter.run"] if not torchrun else [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(torchrun), "--master_port",
            str(29600 + torchrun), "-m", "speechiter.run", "--distributed"]
        done = subprocess.run(cmd + args + ["--quiet"], env={**self.env, **(env or {})}, cwd=str(self.out),
                              capture_output=True, text=True, timeout=600)
        if done.returncode:
            lines = [line for line in done.stderr.splitlines() if line.startswith("speechiter:")]
            (self.out / f"{name}.err").write_text((lines[-1] if lines else done.stderr[-2000:]) + "\n")
        return done.returncode


def train_mode(path: Path) -> bool:
    return "train" in yaml.safe_load(Path(path).read_text().replace("!ref", ""))


def stop_point(dump: Path, step: int):
    """(id, count) that stops a run before step ``step`` of epoch 1 of the train group: the first id of that
    step and how often it was loaded before it, plus one."""
    records = [json.loads(line) for line in dump.read_text().splitlines()]
    train = [r for r in records if r["group"] == "train"]
    target = next(r for r in train if r["epoch"] == 1 and r["step"] == step)
    index = records.index(target)
    uid = target["ids"][0]
    before = sum(r["ids"].count(uid) for r in records[:index] if r["group"] == "train")
    return uid, before + 1


def run_cli(runner: Runner, files: dict, only, engines) -> None:
    for name, path in files.items():
        if only and name not in only:
            continue
        extra = demo_sets(name) if name.startswith("demo_") else []
        is_train = train_mode(path)
        epochs = ["--epochs", "3"] if is_train else []
        for engine, flags in engines.items():
            tag = f"{name}.{engine}"
            state = ["--save_state", f"{tag}.state.json"] if is_train else []
            runner.cli(tag, ["--data_cfg", str(path), *epochs, "--dump_batches", f"{tag}.jsonl", *state,
                             *flags, *extra])
        if not is_train:
            continue
        # a run stopped before step 3 of epoch 1 (inline), resumed with every engine
        uid, count = stop_point(runner.out / f"{name}.inline.jsonl", 3)
        stopped = f"{name}.stopped"
        runner.cli(stopped, ["--data_cfg", str(path), "--epochs", "3", "--dump_batches", f"{stopped}.jsonl",
                             "--save_state", f"{stopped}.state.json", *ENGINES["inline"], *extra],
                   env={"STOP_ID": uid, "STOP_COUNT": str(count)})
        for engine, flags in engines.items():
            tag = f"{name}.resumed.{engine}"
            shutil.copy(runner.out / f"{stopped}.state.json", runner.out / f"{tag}.state.json")
            runner.cli(tag, ["--data_cfg", str(path), "--epochs", "3", "--dump_batches", f"{tag}.jsonl",
                             "--save_state", f"{tag}.state.json", "--resume", f"{tag}.state.json", *flags, *extra])


def run_distributed(runner: Runner, files: dict, only) -> None:
    """torchrun: 2 ranks for epoch 1, resumed on 1 and 3 ranks (the state of epoch 2's start, 2-rank layout)."""
    for name in ("block", "semi_shortest", "mix3", "demo_asr"):
        if only and name not in only:
            continue
        path, extra = files[name], demo_sets(name) if name.startswith("demo_") else []
        tag = f"{name}.dist2"
        runner.cli(tag, ["--data_cfg", str(path), "--epochs", "1", "--dump_batches", f"{tag}.jsonl",
                         "--save_state", f"{tag}.state.json", *ENGINES["inline"], *extra], torchrun=2)
        for ranks in (1, 3):
            resumed = f"{name}.dist2to{ranks}"
            for r in range(2):
                shutil.copy(runner.out / f"{tag}.state.rank{r}.json", runner.out / f"{resumed}.state.rank{r}.json")
            runner.cli(resumed, ["--data_cfg", str(path), "--epochs", "2", "--dump_batches", f"{resumed}.jsonl",
                                 "--save_state", f"{resumed}.state.json", "--resume", f"{resumed}.state.json",
                                 *ENGINES["inline"], *extra], torchrun=ranks)
        full = f"{name}.dist3"
        runner.cli(full, ["--data_cfg", str(path), "--epochs", "2", "--dump_batches", f"{full}.jsonl",
                          *ENGINES["inline"], *extra], torchrun=3)


def run_api(runner: Runner, files: dict, only) -> None:
    for name, path in files.items():
        if (only and name not in only) or not train_mode(path) or name.startswith("demo_tts"):
            continue
        done = subprocess.run([sys.executable, str(CODE / "api.py"), str(path), f"{name}.api.state.json"],
                              env=runner.env, cwd=str(runner.out), capture_output=True, text=True, timeout=600)
        if done.returncode:
            (runner.out / f"{name}.api.err").write_text(done.stderr[-3000:])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--data")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--skip", nargs="*", default=[], choices=("cli", "api", "dist"))
    parser.add_argument("--engines", nargs="*", default=list(ENGINES), choices=list(ENGINES))
    args = parser.parse_args(argv)
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    paths = make_data(Path(args.data).absolute() if args.data else out.parent / "data")
    files = recipes(paths, paths["recipes"])
    runner = Runner(out, paths)
    if "cli" not in args.skip:
        run_cli(runner, files, args.only, {name: ENGINES[name] for name in args.engines})
    if "api" not in args.skip:
        run_api(runner, files, args.only)
    if "dist" not in args.skip:
        run_distributed(runner, files, args.only)
    print(f"wrote {len(list(out.iterdir()))} files in {out}")


if __name__ == "__main__":
    main()
