"""Train a small CTC ASR model (ctc_model.py) on the corpora of recipe.yaml, loaded by speechiter.

    python examples/asr_ctc/train.py --out runs/asr_ctc --plot            # about 30 epochs of 10 steps
    python examples/asr_ctc/train.py --out runs/asr_ctc --resume          # after a kill: continues exactly
    python examples/asr_ctc/train.py --out runs/gpu --out_type cuda       # batches land on the GPU

Writes OUT/loss.csv (one row per step: epoch, step, global_step, source, loss), OUT/valid.csv (one row per
epoch: epoch, loss, cer), OUT/checkpoint.pt (every --save_every steps and at each epoch's end: the model, the
optimizer, torch's generator and speechiter's loader state together) and, with --plot, OUT/loss.png.
On the CPU (torch.use_deterministic_algorithms, one torch thread by default) a run killed at any point and
resumed with --resume writes the same loss.csv and valid.csv, byte for byte, as a run never interrupted.
"""
import argparse
import contextlib
import csv
import os
import signal
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
if str(HERE.parents[1]) not in sys.path:  # run from a checkout without installing speechiter
    sys.path.append(str(HERE.parents[1]))

import speechiter  # noqa: E402
import speechiter.errors  # noqa: E402
from ctc_model import CTCModel, edit_distance, encode, greedy_decode  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default=str(HERE / "recipe.yaml"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a recipe value, as speechiter.run's --set (e.g. batch_len=2000)")
    parser.add_argument("--out", type=Path, default=Path("runs/asr_ctc"))
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--max_steps", type=int, help="stop after this many steps in all (a short run)")
    parser.add_argument("--num_workers", type=int, default=2)
    parser.add_argument("--out_type", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--threads", type=int, default=1, help="torch's CPU threads (fixed: results depend on it)")
    parser.add_argument("--save_every", type=int, default=5, help="steps between checkpoints")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    parser.add_argument("--kill_at", type=int, default=-1, help=argparse.SUPPRESS)  # SIGKILL after this step
    parser.add_argument("--plot", action="store_true", help="draw OUT/loss.png (needs matplotlib)")
    parser.add_argument("--quiet", action="store_true")
    return parser.parse_args(argv)


@contextlib.contextmanager
def deterministic(threads: int, on: bool = True):
    """torch's deterministic algorithms and a fixed number of CPU threads, as they were afterwards."""
    before = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    torch.use_deterministic_algorithms(on)
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0])
        torch.set_num_threads(before[1])


def ctc_loss(model, batch, device):
    """The batch's mean CTC loss per target character, and the model's (log-probabilities, lengths)."""
    log_probs, lengths = model(batch["feat"].to(device), batch["feat_len"].to(device))
    targets, target_lengths = encode(batch["text"])
    loss = torch.nn.functional.ctc_loss(log_probs, targets.to(device), lengths, target_lengths.to(device),
                                        reduction="sum", zero_infinity=True) / target_lengths.sum()
    return loss, (log_probs, lengths)


def validate(model, iterator, epoch, device):
    """Mean loss per character and character error rate (greedy decoding) over the valid set."""
    model.eval()
    loss = errors = characters = 0.0
    with torch.no_grad():
        for batch in iterator.build_loader(epoch):
            batch_loss, (log_probs, lengths) = ctc_loss(model, batch, device)
            count = sum(len(text) for text in batch["text"])
            loss += float(batch_loss) * count
            for hypothesis, text in zip(greedy_decode(log_probs, lengths), batch["text"]):
                errors += edit_distance(hypothesis, text)
            characters += count
    model.train()
    return loss / characters, errors / characters


def write_csv(path: Path, header, rows):
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w", newline="") as out:
        csv.writer(out).writerows([header, *rows])
    os.replace(temporary, path)


class Run:
    """The model, the optimizer and the curves, saved with the loader's state as one checkpoint."""

    def __init__(self, args, device):
        torch.manual_seed(args.seed)
        self.out, self.device = args.out, device
        self.model = CTCModel().to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=args.lr)
        self.curve, self.valid = [], []  # loss.csv and valid.csv rows

    def save(self, loader):
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "rng": torch.get_rng_state(), "data": loader.state_dict(), "curve": self.curve, "valid": self.valid}
        torch.save(state, self.out / "checkpoint.pt.tmp")
        os.replace(self.out / "checkpoint.pt.tmp", self.out / "checkpoint.pt")
        self.write()

    def load(self, loader):
        state = torch.load(self.out / "checkpoint.pt", map_location=self.device, weights_only=False)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        loader.load_state_dict(state["data"])  # the next batch is the one after the saved step
        self.curve, self.valid = state["curve"], state["valid"]

    def write(self):
        write_csv(self.out / "loss.csv", ("epoch", "step", "global_step", "source", "loss"), self.curve)
        write_csv(self.out / "valid.csv", ("epoch", "loss", "cer"), self.valid)


def train(args) -> Run:
    device = torch.device("cuda" if args.out_type == "cuda" else "cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    iterators = speechiter.build_iterators(speechiter.load_config(args.recipe, args.set), seed=args.seed,
                                           num_workers=args.num_workers, out_type=args.out_type)
    try:
        run, train_iterator = Run(args, device), iterators["train"]
        loader = train_iterator.build_loader(1)
        if args.resume:
            run.load(loader)
        for epoch in range(loader.epoch, args.epochs + 1):
            loader = loader if epoch == loader.epoch else train_iterator.build_loader(epoch)
            started = time.perf_counter()
            for batch in loader:
                if len(run.curve) == args.kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)  # the kill-and-resume test's crash
                loss, _ = ctc_loss(run.model, batch, device)
                run.optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(run.model.parameters(), 5.0)
                run.optimizer.step()
                run.curve.append((epoch, loader.step, len(run.curve) + 1, batch.source, f"{loss.item():.6f}"))
                if len(run.curve) % args.save_every == 0:
                    run.save(loader)
                if len(run.curve) == args.max_steps:
                    run.write()
                    return run
            if not any(row[0] == epoch for row in run.valid):  # a resume at an epoch's end has it already
                valid_loss, cer = validate(run.model, iterators["valid"], epoch, device)
                run.valid.append((epoch, f"{valid_loss:.6f}", f"{cer:.4f}"))
                run.save(loader)
            if not args.quiet:
                train_loss = [float(row[4]) for row in run.curve if row[0] == epoch]
                print(f"epoch {epoch}: train loss {sum(train_loss) / len(train_loss):.3f} ({len(train_loss)} steps, "
                      f"{time.perf_counter() - started:.1f} s), valid loss {run.valid[-1][1]}, "
                      f"CER {run.valid[-1][2]}", flush=True)
        run.write()
        return run
    finally:
        speechiter.build.close_all(iterators)


def plot(out: Path, curve, valid):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("--plot needs matplotlib: pip install 'speechiter[plot]'")
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.plot([int(row[2]) for row in curve], [float(row[4]) for row in curve], lw=0.8, label="train (per step)")
    ends = {int(row[0]): int(row[2]) for row in curve}  # the last step of each epoch
    axes.plot([ends[int(row[0])] for row in valid], [float(row[1]) for row in valid], "o-", label="valid")
    axes.set(xlabel="step", ylabel="CTC loss per character", yscale="log")
    axes.legend()
    figure.tight_layout()
    figure.savefig(out / "loss.png", dpi=120)


def main(argv=None):
    args = parse_args(argv)
    try:
        with deterministic(args.threads, on=args.out_type == "cpu"):  # CUDA's CTC backward is not deterministic
            run = train(args)
    except speechiter.errors.SpeechiterError as error:  # a bad recipe or corpus: one line, as the CLI
        print(f"train.py: error: {error}", file=sys.stderr)
        return getattr(error, "exit_code", 1)
    if args.plot:
        plot(args.out, run.curve, run.valid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
