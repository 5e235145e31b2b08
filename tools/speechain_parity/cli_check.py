"""Spot check through the command line: `python -m speechiter.run ... --dump_batches` loads every batch
(audio, text, speaker features) and its dumped ids must be SpeeChain's (or SpeeChain's with fix 2).

    SPEECHAIN_ROOT=... python cli_check.py speechain.json

Runs chosen to cover each dataset class and iterator kind without pitch extraction (slow on long audio):
ASR block train + valid and test (ngpu 1), LM block train + valid with ngpu 2 (fix 2), RandomSpkFeatDataset
test sets (LibriTTS, VCTK), LJSpeech/VCTK test sets of an ASR recipe.
"""
import collections
import json
import os
import subprocess
import sys
import tempfile

from runs import parity_seed

RUNS = ["recipes/asr/librispeech/train-clean-100/exp_cfg/100-bpe5k_conformer-medium_lr2e-3.yaml:train",
        "recipes/asr/librispeech/train-clean-100/exp_cfg/100-bpe5k_conformer-medium_lr2e-3.yaml:test",
        "recipes/lm/librispeech/lm_text/exp_cfg/100-bpe5k_transformer.yaml:train",
        "recipes/tts/libritts/train-clean-100/exp_cfg/16khz_ecapa_mfa_fastspeech2.yaml:test",
        "recipes/tts/vctk/data_cfg/test_ecapa_g2p_punc_valid+test_mic2.yaml:test",
        "recipes/asr/libritts_librispeech/train-960/data_cfg/test_ljspeech_valid+test.yaml:test"]


def dumped(recipe, mode):
    """{"group/set/iterator": [epoch 1 batches, epoch 2 ...]} from the CLI's --dump_batches."""
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "batches.jsonl")
        cmd = [sys.executable, "-m", "speechiter.run", "--data_cfg", recipe, "--mode", mode, "--epochs", "3",
               "--num_workers", "2", "--quiet", "--dump_batches", dump]
        if parity_seed() is not None:  # as speechain_batches.py's runs
            cmd += ["--seed", str(parity_seed())]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
        out = collections.defaultdict(lambda: collections.defaultdict(list))
        for line in open(dump):
            b = json.loads(line)
            key = "/".join(k for k in (b["group"], b["set"], b["iterator"]) if k)
            out[key][b["epoch"]].append(b["ids"])
    return {key: [epochs[e] for e in sorted(epochs)] for key, epochs in out.items()}


def main():
    speechain = json.load(open(sys.argv[1]))
    bad = 0
    for run in RUNS:
        recipe, mode = run.rsplit(":", 1)
        got = dumped(recipe, mode)
        for key, sc in speechain[run]["iterators"].items():
            n = len(sc["global"]["epochs"])
            cli = got.get(key, [])[:n]  # valid is loaded every epoch; SpeeChain's epoch 1 is compared
            verdict = ("identical" if cli == sc["global"]["epochs"] else
                       "fix 2" if "global_fix2" in sc and cli == sc["global_fix2"]["epochs"] else "REAL")
            bad += verdict == "REAL"
            print(f"cli {verdict:9s} {run} {key} ({sum(len(e) for e in cli)} batches loaded)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
