"""speech_text.RandomSpkFeatDataset: a balanced reference speaker per utterance."""
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import speechiter
from speechiter.dataset.random_spk import balanced_assignment, embedding_model, text_weight
from speechiter.dataset.random_spk import RandomSpkFeatDataset
from speechiter.errors import ConfigError, DataError
from tests.processes import stop_resource_tracker
from tests import recipes

REPO = Path(__file__).resolve().parents[2]
DIM = 8
SPEAKERS = {"spkA": 3, "spkB": 1, "spkC": 2, "spkD": 4, "spkE": 2}  # speaker -> embeddings
WORDS = ["HH AH0", "L OW1", "W ER1 L D", "T EH1 S T", "AH0", "K AE1 T", "D AO1 G"]


def tokens_of(i):
    words = WORDS[i % 7:i % 7 + 1 + i % 4] or WORDS[:2]
    tokens = ["<space>"]  # SpeeChain's MFA lists start and end with <space>
    for word in words:
        tokens += word.split() + ["<space>"]
    return tokens


def write_spk_feats(folder: Path, spk2ids: dict, model: str = "ecapa", seed: int = 0) -> Path:
    """idx2<model>_spk_feat (.npy of shape (1, D), listed out of order, paths relative to the folder),
    idx2spk and spk2aver_<model>_spk_feat (absolute paths) in ``folder``."""
    rng = np.random.default_rng(seed)
    (folder / "emb").mkdir(parents=True, exist_ok=True)
    feat_lines, spk_lines, aver_lines = [], [], []
    for spk, ids in spk2ids.items():
        vectors = []
        for uid in ids:
            vector = rng.normal(size=(1, DIM)).astype(np.float32)
            np.save(folder / "emb" / f"{uid}.npy", vector)
            vectors.append(vector)
            feat_lines.append(f"{uid} emb/{uid}.npy")
            spk_lines.append(f"{uid} {spk}")
        np.save(folder / "emb" / f"{spk}_aver.npy", np.mean(vectors, axis=0))
        aver_lines.append(f"{spk} {folder / 'emb' / f'{spk}_aver.npy'}")
    (folder / f"idx2{model}_spk_feat").write_text("\n".join(feat_lines[::-1]) + "\n")
    (folder / "idx2spk").write_text("\n".join(spk_lines) + "\n")
    (folder / f"spk2aver_{model}_spk_feat").write_text("\n".join(aver_lines) + "\n")
    return folder / f"idx2{model}_spk_feat"


def make_reference_set(folder: Path) -> Path:
    return write_spk_feats(folder, {spk: [f"{spk}_{k}" for k in range(n)] for spk, n in SPEAKERS.items()})


@pytest.fixture
def tts_set(tmp_path):
    spk_feat = make_reference_set(tmp_path / "train")
    (tmp_path / "test").mkdir()
    lines = [f"t{i:02d} [{', '.join(repr(t) for t in tokens_of(i))}]" for i in range(23)]
    (tmp_path / "test" / "idx2text").write_text("\n".join(lines[::-1]) + "\n")
    return tmp_path, spk_feat


def write_config(root, spk_feat, **options):
    """``options`` are more dataset options, as YAML text ("false", "2")."""
    text = {"text": f"{root}/test/idx2text"}
    dataset_conf = {"spk_feat": spk_feat, **recipes.options("".join(f"{k}: {v}\n" for k, v in options.items()))}
    return recipes.write_recipe(root / "cfg.yaml", root, "abs.Iterator", data=text,
                                dataset_type="speech_text.RandomSpkFeatDataset", dataset_conf=dataset_conf,
                                data_len=False, batch_size=3, shuffle=True,
                                valid=recipes.entry(root, "abs.Iterator", data=text, data_len=False), exp_cfg={})


def load(config, epoch=1, start_step=0, num_workers=0, thread_type="proc", start_method=None):
    train = speechiter.build_iterators(speechiter.load_config(str(config)), seed=3, num_workers=num_workers,
                                       thread_type=thread_type, start_method=start_method,
                                       out_type="null")["train"]
    try:
        plan = [list(ids) for ids in train.epoch_batches(epoch)][start_step:]
        return plan, list(train.build_loader(epoch, start_step)), train.dataset
    finally:
        train.close()


def summary(batches):
    return [(b["spk_ids"], b["spk_feat_ids"], b["spk_feat"].tobytes()) for b in batches]


@pytest.mark.slow  # a fresh process: what importing one module imports
def test_resolves_under_speechains_name_without_an_import_circle():
    """speech_text.py does not import random_spk.py (no circle); the registry's alias gives SpeeChain's name."""
    code = ("import sys; import speechiter.dataset.speech_text;"
            "assert 'speechiter.dataset.random_spk' not in sys.modules;"
            "from speechiter.registry import resolve_class; from speechiter.dataset.abs import Dataset;"
            "import speechiter.dataset.random_spk as r;"
            "assert resolve_class('dataset', 'speech_text.RandomSpkFeatDataset', 'p', base=Dataset) is "
            "r.RandomSpkFeatDataset")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, env={"PYTHONPATH": str(REPO)})


def test_batch_keys_and_average_embeddings(tts_set):
    root, spk_feat = tts_set
    plan, batches, dataset = load(write_config(root, spk_feat))
    for ids, batch in zip(plan, batches):
        assert set(batch) == {"text", "spk_feat", "spk_ids", "spk_feat_ids"}
        assert batch["spk_feat"].shape == (len(ids), 1, DIM) and batch["spk_feat"].dtype == np.float32
        assert batch["spk_feat_ids"] == ["aver_spk_feat"] * len(ids)
        for row, (uid, spk) in enumerate(zip(ids, batch["spk_ids"])):
            assert [spk] == dataset.reference_speakers(uid)
            np.testing.assert_array_equal(batch["spk_feat"][row], np.load(root / "train" / "emb" / f"{spk}_aver.npy"))


def test_single_embeddings_belong_to_the_speaker(tts_set):
    root, spk_feat = tts_set
    plan, batches, _ = load(write_config(root, spk_feat, use_aver_feat="false"))
    drawn = Counter()
    for batch in batches:
        for row, (spk, feat_id) in enumerate(zip(batch["spk_ids"], batch["spk_feat_ids"])):
            assert feat_id.startswith(spk + "_")
            np.testing.assert_array_equal(batch["spk_feat"][row], np.load(root / "train" / "emb" / f"{feat_id}.npy"))
            drawn[feat_id] += 1
    assert len(drawn) > len(SPEAKERS)  # several embeddings of one speaker are used


def test_balance_is_global_and_weighted_by_tokens(tts_set):
    root, spk_feat = tts_set
    _, batches, dataset = load(write_config(root, spk_feat))
    weights = {f"t{i:02d}": len(tokens_of(i)) - 2 for i in range(23)}  # <space> at both ends trimmed
    totals = Counter()
    for uid in weights:
        totals[dataset.reference_speakers(uid)[0]] += weights[uid]
    assert set(totals) == set(SPEAKERS)
    assert max(totals.values()) - min(totals.values()) <= max(weights.values())


def test_balanced_assignment_counts_and_ties():
    chosen = balanced_assignment(np.ones(103), 10, 1, seed=1)
    assert sorted(Counter(chosen[:, 0].tolist()).values()) == [10] * 7 + [11] * 3
    assert not np.array_equal(chosen, balanced_assignment(np.ones(103), 10, 1, seed=2))
    np.testing.assert_array_equal(chosen, balanced_assignment(np.ones(103), 10, 1, seed=1))


def test_mixup_averages_and_joins_sorted_ids(tts_set):
    root, spk_feat = tts_set
    plan, batches, _ = load(write_config(root, spk_feat, mixup_number=2))
    for batch in batches:
        for row, spk_ids in enumerate(batch["spk_ids"]):
            a, b = spk_ids.split("+")
            assert a <= b and batch["spk_feat_ids"][row] == "aver_spk_feat+aver_spk_feat"
            expected = (np.load(root / "train" / "emb" / f"{a}_aver.npy")
                        + np.load(root / "train" / "emb" / f"{b}_aver.npy")) / 2
            np.testing.assert_allclose(batch["spk_feat"][row], expected, rtol=1e-6)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_same_batches_for_any_worker_count_thread_process_and_resume(tts_set, stop_resource_tracker):
    root, spk_feat = tts_set
    config = write_config(root, spk_feat, use_aver_feat="false")
    plan, batches, _ = load(config, epoch=2)
    reference = summary(batches)
    assert summary(load(config, epoch=1)[1]) != reference  # embeddings are drawn per epoch
    for num_workers, thread_type, start_method in [(1, "proc", None), (2, "proc", None), (2, "thread", None),
                                                   (2, "proc", "spawn")]:
        other_plan, other, _ = load(config, 2, 0, num_workers, thread_type, start_method)
        assert other_plan == plan and summary(other) == reference, (num_workers, thread_type, start_method)
    resumed_plan, resumed, _ = load(config, 2, 4, num_workers=2)
    assert resumed_plan == plan[4:] and summary(resumed) == reference[4:]


@pytest.fixture(name="stop_resource_tracker")
def stop_resource_tracker_fixture():
    yield
    stop_resource_tracker()


def test_text_weight_and_model_name():
    assert text_weight("['<space>', 'HH', 'AH0', '<space>']") == 2 and text_weight("hello") == 5
    assert embedding_model("/x/idx2ecapa_spk_feat") == "ecapa" and embedding_model("idx2xvector_spk_feat") == "xvector"


def dataset(root, spk_feat, **conf):
    return RandomSpkFeatDataset(main_data={"text": str(root / "test" / "idx2text"), **conf.pop("main_data", {})},
                                spk_feat=spk_feat, **conf)


@pytest.mark.parametrize("conf, match", [
    ({"spk_feat": None}, "spk_feat: missing required option"),
    ({"spk_feat": []}, "spk_feat: expected an idx2 file or a list of them"),
    ({"mixup_number": 0}, "mixup_number: expected a positive integer"),
    ({"use_aver_feat": "yes"}, "use_aver_feat: expected true or false"),
])
def test_option_errors(tts_set, conf, match):
    root, spk_feat = tts_set
    with pytest.raises(ConfigError, match=match):
        dataset(root, **{"spk_feat": str(spk_feat), **conf})


@pytest.mark.parametrize("key", ["spk_ids", "spk_feat"])
def test_speaker_data_in_main_data_is_refused(tts_set, key):
    root, spk_feat = tts_set
    (root / "test" / "idx2x").write_text("".join(f"t{i:02d} x\n" for i in range(23)))
    with pytest.raises(ConfigError, match=f"main_data.{key}: RandomSpkFeatDataset draws the reference speaker"):
        dataset(root, str(spk_feat), main_data={key: str(root / "test" / "idx2x")})


def test_unknown_option_is_named_through_the_config(tts_set):
    root, spk_feat = tts_set
    with pytest.raises(ConfigError, match=r"dataset_conf.use_aver_feats: unknown option; did you mean 'use_aver_feat'"):
        load(write_config(root, spk_feat, use_aver_feats="true"))


def test_data_errors(tts_set):
    root, spk_feat = tts_set
    with open(spk_feat, "a") as f:
        f.write("stranger_0 emb/spkA_0.npy\n")
    with pytest.raises(DataError, match="spk_feat id stranger_0 has no speaker in .*idx2spk"):
        dataset(root, str(spk_feat))
    (root / "train" / "idx2spk").unlink()
    with pytest.raises(DataError, match="idx2spk: no such idx2 file"):
        dataset(root, str(spk_feat))


def test_missing_average_embedding(tts_set):
    root, spk_feat = tts_set
    aver = root / "train" / "spk2aver_ecapa_spk_feat"
    aver.write_text("".join(line + "\n" for line in aver.read_text().splitlines() if not line.startswith("spkC")))
    with pytest.raises(DataError, match="no average embedding for speaker spkC"):
        dataset(root, str(spk_feat))


def test_speakers_without_embeddings_are_never_drawn(tts_set):
    root, spk_feat = tts_set
    with open(root / "train" / "idx2spk", "a") as f:
        f.write("lonely_0 spkZ\n")
    with pytest.warns(UserWarning, match="1 speakers of idx2spk have no spk_feat and are never drawn"):
        data = dataset(root, str(spk_feat), use_aver_feat=False)
    assert "spkZ" not in data.speakers


def test_unreadable_embedding_names_the_utterance(tts_set):
    root, spk_feat = tts_set
    data = dataset(root, str(spk_feat))
    uid = "t05"
    (root / "train" / "emb" / f"{data.reference_speakers(uid)[0]}_aver.npy").unlink()
    with pytest.raises(DataError, match=f"utterance {uid} \\(reference spk_feat\\): .*no such file"):
        data.get_batch([uid])


# --- the recipe-shaped multi-speaker FastSpeech2 config (tests/parity/recipes/) ----------------------

@pytest.fixture
def libritts_root(tmp_path, monkeypatch):
    from tests.dataset.test_pitch import write_tts_subset
    data = tmp_path / "datasets" / "libritts" / "data"
    mfa = data / "mfa" / "acoustic=librispeech_train-clean-100_lexicon=librispeech"
    for subset, num in [("train-clean-100", 9), ("dev-clean", 4)]:
        ids = write_tts_subset(data / "wav16000" / subset, mfa / subset / "stress" / "no-punc", subset[:3], num,
                               sr=16000)
        spk2ids = {f"{subset[:3]}spk{k}": ids[k::3] for k in range(3)}
        write_spk_feats(data / "wav16000" / subset, spk2ids)
    g2p = data / "g2p" / "test-clean" / "stress" / "no-punc"
    g2p.mkdir(parents=True)
    tokens = {f"tc_{i:02d}": tokens_of(i) for i in range(7)}
    (g2p / "idx2text").write_text("".join(f"{u} [{', '.join(repr(t) for t in x)}]\n" for u, x in tokens.items()))
    (g2p / "idx2text_len").write_text("".join(f"{u} {len(x)}\n" for u, x in tokens.items()))
    monkeypatch.setenv("SPEECHAIN_ROOT", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # recipe paths are relative to the SpeeChain root
    return tmp_path


RECIPE = REPO / "tests" / "parity" / "recipes" / "tts_libritts_multispeaker_fastspeech2.yaml"


def test_multispeaker_recipe_test_set_draws_reference_speakers(libritts_root):
    iterators = speechiter.build_iterators(speechiter.load_config(str(RECIPE)), num_workers=0, out_type="null")
    try:
        test = iterators["test"]["test-clean"]
        assert isinstance(test.dataset, RandomSpkFeatDataset)
        batches = list(test.build_loader(1))
    finally:
        speechiter.build.close_all(iterators)
    assert sum(len(b["text"]) for b in batches) == 7
    speakers = Counter()
    for batch in batches:
        assert set(batch) == {"text", "spk_feat", "spk_ids", "spk_feat_ids"}
        assert batch["spk_feat"].shape[1:] == (1, DIM) and batch["spk_feat_ids"][0] == "aver_spk_feat"
        speakers.update(batch["spk_ids"])
    assert set(speakers) == {"traspk0", "traspk1", "traspk2"}  # the train-clean-100 speakers, all used


def test_multispeaker_recipe_train_and_valid_batches(libritts_root):
    pytest.importorskip("pyworld")
    from tests.dataset.test_pitch import FASTSPEECH2_KEYS, recipe_batches
    batches = recipe_batches(RECIPE)
    for group in ("train", "valid"):
        for batch in batches[group]:
            assert FASTSPEECH2_KEYS | {"spk_feat"} <= set(batch)
