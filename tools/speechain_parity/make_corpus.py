"""Write one synthetic corpus holding every file SpeeChain's recipes read, under $SPEECHAIN_ROOT.

    python make_corpus.py recipes.json        (recipes.json from scan_recipes.py)

Every idx2 path the recipes name is written; its content follows from the file name. Utterances come from
one pool per (dataset, set), e.g. (librispeech, train-clean-100), so idx2wav, idx2no-punc_text, the MFA
idx2text/idx2duration and the tts_syn_speech files of one set share ids. Per pool: 14-30 ids in the
corpus' own style (LibriSpeech 19-198-0001, LibriTTS, LJ001-0001, VCTK p225_001, LM "0".."29"), files in a
scrambled line order (a different one per file), length ties, one id missing from every text file and one
extra id in every length file. Lengths are sized so that the recipes' batch_len gives 3-8 utterances a
batch. Audio: real FLAC files (digital silence, the exact length idx2wav_len gives; one file per length).
"""
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(os.environ["SPEECHAIN_ROOT"])
SETS = {"train-960", "train-clean-100", "train-clean-360", "train-clean-460", "train-other-500", "dev",
        "dev-clean", "dev-other", "test-clean", "test-other", "train", "valid", "test", "train-mic2",
        "valid-mic2", "test-mic2", "lm_text"}
SECONDS = {("libritts", "train-clean-100"): 90, ("libritts", "train-clean-360"): 90,
           ("libritts", "train-other-500"): 90, ("libritts", "train-clean-460"): 700}  # default 250 s
WORDS = "the a of speech chain model cat dog sat on mat quietly over there bright morning light".split()
PHONES = "HH AH0 L OW1 W ER1 D K AE1 T S IH1 N IY1 DH AE0 M".split()


def rng_for(*key):  # $CORPUS_SALT draws another corpus of the same layout
    key = "/".join(key) + os.environ.get("CORPUS_SALT", "")
    return np.random.default_rng(int(hashlib.md5(key.encode()).hexdigest()[:8], 16))


def pool_key(path):
    parts = [p for p in path.split("/") if p]
    anchor = next(i for i, p in enumerate(parts) if p in ("datasets", "tts_syn_speech"))
    return parts[anchor + 1], next(p for p in parts[anchor + 2:] if p in SETS)


def make_ids(dataset, subset, rng):
    n = 30 if subset.startswith("train") or subset == "lm_text" else int(rng.integers(14, 21))
    n = 60 if (dataset, subset) == ("libritts", "train-clean-100") else n  # TTS and offline_tts2asr batch it
    if subset == "lm_text":
        return [str(i) for i in range(n)]
    spk = [int(s) for s in rng.choice([19, 103, 1089, 2, 7, 250, 26, 8842, 60], 4, replace=False)]
    out = set()
    while len(out) < n:
        s, c, u = int(rng.choice(spk)), int(rng.integers(1, 300)), int(rng.integers(0, 120))
        out.add({"librispeech": f"{s}-{c}-{u:04d}", "libritts": f"{s}_{c}_{u:06d}_{c % 7:06d}",
                 "ljspeech": f"LJ{c % 50:03d}-{u:04d}", "vctk": f"p{220 + s % 40}_{u:03d}"}[dataset])
    return sorted(out)


class Pool:
    def __init__(self, dataset, subset):
        self.rng = rng_for(dataset, subset)
        self.ids = make_ids(dataset, subset, self.rng)
        n, mean = len(self.ids), SECONDS.get((dataset, subset), 250)
        secs = np.round(np.exp(self.rng.uniform(np.log(0.3 * mean), np.log(1.7 * mean), n)), 2)
        secs[1] = secs[5] = secs[9]  # ties (same length: id order decides)
        self.secs = dict(zip(self.ids, secs))
        self.spk = {i: (i.split("-")[0] if "-" in i else i.split("_")[0]) for i in self.ids}
        ntok = self.rng.integers(4, 40, n)
        ntok[2] = ntok[6]
        self.tokens = {i: ["<space>"] * (k % 2) + [PHONES[j % len(PHONES)] if j % 3 else "<space>"
                                                   for j in range(k)] + ["<space>"] for i, k in zip(self.ids, ntok)}
        nchar = self.rng.integers(3000, 15000, n) if subset == "lm_text" else self.rng.integers(10, 200, n)
        nchar[4] = nchar[7]
        self.text = {i: " ".join(WORDS[j % len(WORDS)] for j in range(c))[:c].rstrip() for i, c in zip(self.ids, nchar)}


POOLS = {}


def pool(path):
    key = pool_key(path)
    if key not in POOLS:
        POOLS[key] = Pool(*key)
    return POOLS[key]


def sample_rate(path):
    if "wav22050" in path or ("ljspeech" in path and "/wav/" in path):
        return 22050
    return 16000


def audio(n, sr):
    path = ROOT / "datasets" / "_audio" / str(sr) / f"{n}.flac"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        sf.write(str(path), np.zeros(n, np.int16), sr, subtype="PCM_16")
    return str(path)


def npy(path, name, dim):
    out = ROOT / path / "spk_feat" / f"{name}.npy"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        np.save(out, rng_for(name).standard_normal((1, dim)).astype(np.float32))
    return str(out)


def content(path):
    """{id: value} for the idx2 file at ``path`` (relative to $SPEECHAIN_ROOT)."""
    p, name, folder = pool(path), os.path.basename(path), os.path.dirname(path)
    sr, ids = sample_rate(path), p.ids
    no_text = ids[:3] + ids[4:]  # every text file lacks the 4th id
    if name.endswith("wav_len"):
        return {**{i: int(p.secs[i] * sr) for i in ids}, ids[0] + "x": 12345}  # + an id no dataset has
    if name.endswith("wav"):
        return {i: audio(int(p.secs[i] * sr), sr) for i in ids}
    if name in ("idx2text", "idx2duration", "idx2text_len"):
        tok = {i: p.tokens[i] for i in no_text}
        if name == "idx2text":
            return {i: repr(t) for i, t in tok.items()}
        if name == "idx2duration":
            return {i: repr([round(0.05 + 0.01 * (j % 9), 2) for j in range(len(t))]) for i, t in tok.items()}
        return {**{i: len(t) for i, t in tok.items()}, ids[0] + "x": 7}
    if name.endswith("_text"):
        return {i: p.text[i] for i in no_text}
    if name == "idx2spk":
        return {i: p.spk[i] for i in ids}
    if name == "idx2gen":
        return {i: "MF"[len(p.spk[i]) % 2] for i in ids}
    if name.endswith("_spk_feat"):
        model = name.split("2")[-1].split("_")[0]
        dim = 192 if model == "ecapa" else 512
        write(os.path.join(folder, "idx2spk"), {i: p.spk[i] for i in ids})
        write(os.path.join(folder, f"spk2aver_{model}_spk_feat"),
              {s: npy(folder, f"aver_{s}", dim) for s in sorted(set(p.spk.values()))})
        return {i: npy(folder, p.spk[i], dim) for i in ids}
    if name == "idx2feat_token_len_ratio":  # thresholds around 8 (the recipes' '!str 8'), 3 ids missing
        vals = np.round(p.rng.uniform(3, 13, len(ids)), 1)
        vals[:2] = 8.0
        return dict(list(zip(ids, vals.tolist()))[:-3])
    raise ValueError(f"no rule for {path}")


def write(path, table):
    out = ROOT / path
    out.parent.mkdir(parents=True, exist_ok=True)
    keys = list(table)
    order = rng_for(path).permutation(len(keys))
    out.write_text("".join(f"{keys[k]} {table[keys[k]]}\n" for k in order), encoding="utf-8")


def paths_of(node, key=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from paths_of(v, k)
    elif isinstance(node, list):
        for v in node:
            yield from paths_of(v, key)
    elif isinstance(node, str) and "/" in node:
        yield node


def main():
    recipes = json.load(open(sys.argv[1]))
    files = sorted({p for r in recipes for its in r["iterators"].values() for _, it in its
                    for p in paths_of(it["conf"])})
    for path in files:
        write(path, content(path))
    print(f"make_corpus: {len(files)} idx2 files, {len(POOLS)} utterance pools under {ROOT}")


if __name__ == "__main__":
    main()
