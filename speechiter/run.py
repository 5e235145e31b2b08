"""The command line: ``python -m speechiter.run --data_cfg recipe.yaml``.

Train mode runs epochs ``--start_epoch`` .. ``--epochs`` over the train
iterators (a dict of batches per step when there are several; the group's
``steps`` policy sets the epoch's length, see speechiter.group), then the
valid iterators. Test mode runs
every test set. Exit codes: 0 success, 2 configuration or input error (one
line on stderr), 1 any other failure, 130 Ctrl-C, 143 SIGTERM.
"""
import argparse
import sys
import time
from typing import Dict, Optional

from speechiter import interrupts
from speechiter.build import build_iterators, close_all, flat_iterators
from speechiter.config import iterator_label, load_config
from speechiter.dump import DumpWriter, earlier_dumps, rank_path
from speechiter.errors import ConfigError, SpeechiterError
from speechiter.group import GroupLoader, group_steps
from speechiter.launch import Launcher, check_launch, init_distributed
from speechiter.messages import report_error, say, warnings_as_lines
from speechiter.plot import plot_plans
from speechiter.report import RunReport
from speechiter.state import RESUME_CHANGES, GroupState
from speechiter.state_files import StateFiles
from speechiter.user_files import check_output


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m speechiter.run",
                                     description="Load the batches of a SpeeChain-style data_cfg.")
    parser.add_argument("--data_cfg", required=True, help="data_cfg or exp_cfg YAML file")
    parser.add_argument("--mode", choices=("train", "test"), help="default: train if the file has a train group")
    parser.add_argument("--epochs", type=int, default=1, help="number of the last epoch (SpeeChain's num_epochs)")
    parser.add_argument("--start_epoch", type=int, default=1)
    parser.add_argument("--start_step", type=int, default=0, help="steps of the first epoch to skip (resume)")
    parser.add_argument("--seed", type=int, help="default: the exp_cfg's seed, else 0")
    parser.add_argument("--num_workers", type=int, help="0 loads in the main process (default: the exp_cfg's "
                        "<group>_num_workers or num_workers, else 1)")
    parser.add_argument("--engine", choices=("msequence", "inline", "torch"), default="msequence")
    parser.add_argument("--thread_type", choices=("proc", "thread"), default="proc")
    parser.add_argument("--start_method", choices=("fork", "spawn", "forkserver"),
                        help="how process workers start (default: forkserver, where the OS has it)")
    parser.add_argument("--out_type", default="cpu", help="cpu, cuda, cuda:N or null")
    parser.add_argument("--no_hedge", action="store_true",
                        help="send each request to a store once, and never build a late batch again on an idle worker")
    parser.add_argument("--ngpu", type=int, help="make every batch divisible by ngpu (default: the exp_cfg's, else 1)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value (dotted key, YAML value); repeatable")
    parser.add_argument("--dump_batches", metavar="FILE", help="write one JSON line per loaded batch")
    parser.add_argument("--report", metavar="FILE", help="write a JSON summary of the run")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--distributed", action="store_true", help="run under torchrun (torch.distributed)")
    parser.add_argument("--save_state", metavar="FILE", help="write the run's state after every train step")
    parser.add_argument("--resume", metavar="FILE", help="continue a train run from a --save_state file")
    parser.add_argument("--resume_changes", action="append", default=[], choices=RESUME_CHANGES,
                        help="what --resume may find changed: mix (a mix's weights, batches_per_epoch, corpora)")
    parser.add_argument("--plot", metavar="FILE", help="draw each iterator's first-epoch batches (needs matplotlib)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    args = parser.parse_args(argv)
    if args.out_type not in ("cpu", "null") and not args.out_type.startswith("cuda"):
        parser.error(f"--out_type: expected cpu, cuda, cuda:N or null, got {args.out_type!r}")
    for name in ("epochs", "start_epoch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: expected a positive integer, got {getattr(args, name)}")
    if args.start_step < 0 or (args.num_workers or 0) < 0 or (args.ngpu or 1) < 1:
        parser.error("--start_step and --num_workers must be >= 0 and --ngpu >= 1")
    return args


class CommandLineRun:
    """One run of the command line over built iterators: the train epochs (with the valid group after
    each) or the test sets, the report, the dump and the state file."""

    def __init__(self, args, iterators: Dict, rank: int = 0, world_size: int = 1):
        self.args = args
        self.iterators = iterators
        self.rank, self.world_size = rank, world_size
        self.report = RunReport({"engine": args.engine, "num_workers": args.num_workers, "hedge": not args.no_hedge,
                                 "thread_type": args.thread_type, "out_type": args.out_type, "seed": args.seed,
                                 "ngpu": args.ngpu, "distributed": args.distributed})
        self.report.rank, self.report.world_size = rank, world_size
        self.dump = DumpWriter(args.dump_batches, rank, args.distributed) if args.dump_batches else None
        self.states = StateFiles(iterators, args.seed, args.save_state, args.distributed, rank, world_size)
        self.resumed: Optional[GroupLoader] = None  # the train group where --resume put it
        self.launcher = Launcher(rank) if args.distributed else None  # See NOTE [ Orphaned ranks ] in launch.py

    def resume(self, path: str):
        """Continue from --save_state files (see NOTE [ State files ] in speechiter/state_files.py)."""
        train = GroupLoader(self.iterators["train"])
        source, saved = self.states.resume(path, train, self.args.resume_changes)
        if source != path and not self.args.distributed:
            say(f"speechiter: --resume {path}: continuing from {source} (epoch {saved.epoch} step {saved.step}), "
                f"the earliest rank of the run that saved it")
        for line in train.resume_notes if self.rank == 0 else ():  # See NOTE [ Changed mix ]
            say(f"speechiter: resume: {line}")
        if saved.epoch > self.args.epochs:
            say(f"speechiter: {source} is at epoch {saved.epoch}, past --epochs {self.args.epochs}: nothing to run")
        self.resumed = train

    def save_state(self, train: GroupState, first: bool = False):
        if self.dump is not None and self.states.path:
            self.dump.file.flush()  # the dump holds every step the state counts as done
        self.states.save(train, first)

    def first_train_loader(self) -> GroupLoader:
        """The train group at --resume's position, else at --start_epoch / --start_step."""
        if self.resumed is not None:
            return self.resumed
        loader = GroupLoader(self.iterators["train"], self.args.start_epoch)
        loader.start_at(self.args.start_epoch, self.args.start_step, "--start_step")  # never skip the rest silently
        return loader

    def train(self):
        first = self.first_train_loader()
        self.save_state(first.state(), first=True)
        for epoch in range(first.epoch, self.args.epochs + 1):
            last = epoch == self.args.epochs
            loader = first if epoch == first.epoch else GroupLoader(self.iterators["train"], epoch)
            loader.prefetch_next = not last
            self.run_group("train", None, loader)
            if "valid" in self.iterators:
                self.run_group("valid", None, GroupLoader(self.iterators["valid"], epoch, prefetch_next=not last))
            self.save_state(loader.state_at(epoch + 1, 0))

    def test(self):
        for set_name, value in self.iterators["test"].items():
            start_step = min(self.args.start_step, group_steps(value))
            self.run_group("test", set_name, GroupLoader(value, 1, start_step, prefetch_next=False))

    def run_group(self, group: str, set_name: Optional[str], loader: GroupLoader):
        """Step through the iterators of one group or test set together, from where ``loader`` stands."""
        iterators, epoch = loader.iterators, loader.epoch
        label = iterator_label(group, set_name)
        stats = {name: self.report.stats(iterator_label(group, set_name, name), it)
                 for name, it in iterators.items()}
        if len(iterators) > 1 and not self.args.quiet:
            sizes = ", ".join(f"{name}={len(it)}" for name, it in iterators.items())
            say(f"{label} epoch {epoch}: {loader.steps} steps (steps: {loader.policy}; {sizes})")
        if not len(loader):
            return
        for name, (batches, utterances) in loader.skipped().items():
            self.report.add_skipped(iterator_label(group, set_name, name), batches, utterances)
        progress = _progress(len(loader), f"{label} epoch {epoch}", self.args.quiet)
        loader.keep_empty = True  # a step that lost every row is dumped and counted (NOTE [ Empty steps ])
        started = time.perf_counter()
        try:
            for step_batches in loader:
                interrupts.check()
                if self.launcher is not None:
                    self.launcher.check()
                for name, batch in step_batches.items():
                    ids = _ids(batch, loader, name)
                    stats[name].add(ids, batch)
                    if self.dump is not None:
                        self.dump.write(group, set_name, name, epoch, loader.step, ids, batch)
                progress.update(1)
                if group == "train":
                    self.save_state(loader.state())
        finally:
            progress.close()
        elapsed = time.perf_counter() - started  # each iterator's own time: see report.py
        for name, loaders in loader.loaders.items():
            stats[name].active_s += elapsed
            for one in loaders:
                stats[name].add_loader(one)
                if self.report.first_batch_s is None:
                    self.report.first_batch_s = one.first_batch_s

    def close(self):
        if self.launcher is not None:
            self.launcher.close()
        if self.dump is not None:
            self.dump.close()


def _ids(batch, loader: GroupLoader, name) -> list:
    """A batch's ids: ``batch.ids`` (see NOTE [ Batch attributes ] in speechiter/batch.py), or, for a collate that returns no dict,
    the plan's."""
    ids = getattr(batch, "ids", None)
    if ids is not None:
        return ids
    current = loader.loaders[name][-1]
    return current.plan[current.step - current.start_step - 1]


def _progress(total: int, desc: str, quiet: bool):
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, disable=quiet, file=sys.stderr, leave=False, dynamic_ncols=True)


def run(args) -> int:
    started = time.perf_counter()
    check_launch(args.distributed)
    if args.resume_changes and not args.resume:
        raise ConfigError("--resume_changes", "applies with --resume (what the resumed state may find changed)")
    data_cfg = load_config(args.data_cfg, args.set)
    mode = args.mode or ("train" if "train" in data_cfg else "test")
    if mode not in data_cfg:
        raise ConfigError("data_cfg", f"--mode {mode} needs a {mode} group; the file has {', '.join(data_cfg)}")
    _check_outputs(args)
    rank, world_size = init_distributed(args.out_type) if args.distributed else (0, 1)
    groups = ("train", "valid") if mode == "train" else ("test",)
    explicit_workers = args.num_workers
    _apply_exp_settings(args, data_cfg.settings, mode)
    iterators = build_iterators(data_cfg, seed=args.seed, num_workers=explicit_workers, groups=groups,
                                engine=args.engine, thread_type=args.thread_type, out_type=args.out_type,
                                start_method=args.start_method, ngpu=args.ngpu, rank=rank, world_size=world_size,
                                **({"hedge": False} if args.no_hedge else {}))
    run_ = CommandLineRun(args, iterators, rank, world_size)
    try:
        if args.plot and rank == 0:
            plot_plans(list(flat_iterators(iterators)), args.plot, args.start_epoch)
        if args.resume:
            if mode != "train":
                raise ConfigError("--resume", "applies to train mode")
            run_.resume(args.resume)
        run_.train() if mode == "train" else run_.test()
    finally:
        run_.close()
        close_all(iterators)
    wall = time.perf_counter() - started
    if args.report:
        run_.report.write(rank_path(args.report, rank) if args.distributed else args.report, wall)
    if rank == 0 and run_.report.iterators:  # nothing ran: no empty table
        print(run_.report.table(wall))
        for line in run_.report.notes():
            print(line)
    return 0


def _check_outputs(args):
    """Every file the run will write can be written, before anything runs (see NOTE [ User-given files ]
    in speechiter/user_files.py)."""
    for option in ("save_state", "dump_batches", "report", "plot"):
        path = getattr(args, option)
        if path:
            check_output(path, f"--{option}", streams=option != "save_state")
    found = earlier_dumps(args.dump_batches, args.distributed) if args.resume and args.dump_batches else []
    if found:  # See NOTE [ Dumps of a resumed run ]
        shown = ", ".join(found[:3]) + (f" ... ({len(found)} files)" if len(found) > 3 else "")
        raise ConfigError("--dump_batches", f"{shown} already holds batches, of the run being resumed or another: "
                                            f"a resumed run writes its dump into a file of its own (--dump_batches "
                                            f"with a new name), or remove the old one first")


def _apply_exp_settings(args, settings: dict, mode: str):
    """Flags the user left out take the exp_cfg's seed / ngpu / num_workers (per group in build_iterators;
    ``args.num_workers`` shows the ``mode`` group's in the report)."""
    args.seed = settings.get("seed", 0) if args.seed is None else args.seed
    args.ngpu = settings.get("ngpu", 1) if args.ngpu is None else args.ngpu
    if args.num_workers is None:
        args.num_workers = settings.get(f"{mode}_num_workers", settings.get("num_workers", 1))


def main(argv=None) -> int:
    args = parse_args(argv)
    # See NOTE [ Swallowed Ctrl-C ] in speechiter/interrupts.py, NOTE [ One line per problem ] in messages.py
    with interrupts.installed(), warnings_as_lines():
        return _main(args)


def _main(args) -> int:
    try:
        return run(args)
    except (Exception, KeyboardInterrupt, SystemExit) as error:  # one line each: see messages.report_error
        return report_error(error, args.debug)


if __name__ == "__main__":
    sys.exit(main())
