"""mix.MixIterator's bad input: one line naming the YAML path (or the file), exit 2."""
import pytest

import speechiter
from speechiter.errors import ConfigError, DataError, SpeechiterError
from speechiter.iterator.mix import MixIterator
from tests.cli.test_run import run_cli
from tests.recipes import entry, write_recipe

MIX = "data_cfg.train.conf"


def mix_conf(a, b, **changes):
    conf = {"batches_per_epoch": 10, "weights": {"libri": 0.7, "cv": 0.3},
            "iterators": {"libri": entry(a, "abs.Iterator", batch_size=3), "cv": entry(b, "abs.Iterator")}}
    for key, value in changes.items():
        if value is None:
            del conf[key]
        else:
            conf[key] = value
    return {"type": "mix.MixIterator", "conf": conf}


def nested(a, b):
    return {"libri": entry(a, "abs.Iterator"), "inner": mix_conf(a, b)}


CASES = {  # name: (changes of the mix's conf, given the two corpora; the expected message)
    "negative": (lambda a, b: {"weights": {"libri": 0.7, "cv": -0.3}},
                 rf"{MIX}.weights.cv: expected a weight of 0 or more, got -0.3"),
    "zero sum": (lambda a, b: {"weights": {"libri": 0, "cv": 0.0}},
                 rf"{MIX}.weights: the weights sum to 0.0; at least one must be positive"),
    "not a number": (lambda a, b: {"weights": {"libri": "0.7", "cv": 0.3}},
                     rf"{MIX}.weights.libri: expected a number, got '0.7'"),
    "not finite": (lambda a, b: {"weights": {"libri": float("inf"), "cv": 0.3}},
                   rf"{MIX}.weights.libri: expected a number, got inf"),
    "a bool": (lambda a, b: {"weights": {"libri": True, "cv": 0.3}},
               rf"{MIX}.weights.libri: expected a number, got True"),
    "unknown corpus": (lambda a, b: {"weights": {"libri": 0.7, "cv": 0.2, "tedlium": 0.1}},
                       rf"{MIX}.weights.tedlium: no iterator 'tedlium' in this mix \(it has libri, cv\)"),
    "no weight": (lambda a, b: {"weights": {"libri": 1}},
                  rf"{MIX}.weights.cv: missing; every corpus of the mix needs a weight"),
    "weights a list": (lambda a, b: {"weights": [0.7, 0.3]},
                       rf"{MIX}.weights: expected {{corpus: weight}} for libri, cv, got \[0.7, 0.3\]"),
    "no batches_per_epoch": (lambda a, b: {"batches_per_epoch": None},
                             rf"{MIX}.batches_per_epoch: missing; a mix needs its epoch length in batches"),
    "bad batches_per_epoch": (lambda a, b: {"batches_per_epoch": 0},
                              rf"{MIX}.batches_per_epoch: expected a positive integer"),
    "no iterators": (lambda a, b: {"iterators": None},
                     rf"{MIX}.iterators: expected named iterators {{name: {{type, conf}}}}, got NoneType None"),
    "an iterator without type": (lambda a, b: {"iterators": {"libri": {"conf": {}}}},
                                 rf"{MIX}.iterators.libri.type: missing"),
    "nested mix": (lambda a, b: {"iterators": nested(a, b), "weights": {"libri": 1, "inner": 1}},
                   rf"{MIX}.iterators.inner.type: a mix inside a mix is not supported"),
    "unknown option": (lambda a, b: {"weight": {}}, rf"{MIX}.weight: unknown option; did you mean 'weights'\?"),
    "a corpus's own option": (lambda a, b: {"iterators": {"libri": entry(a, "abs.Iterator", batch_sise=3),
                                                          "cv": entry(b, "abs.Iterator")}},
                              rf"{MIX}.iterators.libri.conf.batch_sise: unknown option"),
    "empty corpus": (lambda a, b: {"iterators": {"libri": entry(a, "abs.Iterator"),
                                                 "cv": entry(b.parent / "empty", "abs.Iterator")}},
                     rf"{MIX}.iterators.cv: no utterance id is common to all main_data files: "
                     rf"feat: \[.*empty/idx2wav'\]"),
}


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    from tests.conftest import _make_corpus
    root = tmp_path_factory.mktemp("mixerr")
    (root / "empty").mkdir()
    for name in ("idx2wav", "idx2wav_len"):
        (root / "empty" / name).write_text("")
    return _make_corpus(root / "a", num=6, seed=1), _make_corpus(root / "b", num=4, seed=2)


def recipe(tmp_path, two, case):
    a, b = two
    return write_recipe(tmp_path / "bad.yaml", a, train=mix_conf(a, b, **CASES[case][0](a, b)))


@pytest.mark.parametrize("case", CASES)
def test_bad_mix_input_names_the_yaml_path(tmp_path, two, case):
    error = DataError if case == "empty corpus" else ConfigError
    with pytest.raises(error, match=CASES[case][1]) as raised:
        speechiter.build_iterators(speechiter.load_config(recipe(tmp_path, two, case)), num_workers=0)
    assert raised.value.exit_code == 2 and "\n" not in str(raised.value)


@pytest.mark.timeout(300)
def test_bad_mix_input_exits_2_with_one_line(tmp_path, two):
    for case in ("negative", "zero sum", "not a number", "unknown corpus", "no weight", "no batches_per_epoch",
                 "nested mix", "empty corpus"):
        done = run_cli("--data_cfg", recipe(tmp_path, two, case), "--quiet")
        assert done.returncode == 2, (case, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("speechiter: error: data_cfg.train.conf."), (case, lines)


def test_the_python_api_checks_the_corpora(tmp_path, two):
    with pytest.raises(ConfigError, match=r"^iterators: expected the corpora as \{name: iterator\}, got \{\}"):
        MixIterator({}, {}, 10)
    with pytest.raises(ConfigError, match=r"^iterators.x: expected an Iterator, got int"):
        MixIterator({"x": 1}, {"x": 1}, 10)
    a, b = two
    cfg = write_recipe(tmp_path / "ok.yaml", a, train=mix_conf(a, b))
    mix = speechiter.build_iterators(speechiter.load_config(cfg), num_workers=0, groups=("train",))["train"]
    try:
        with pytest.raises(ConfigError, match=r"^iterators.inner: a mix inside a mix is not supported"):
            MixIterator({"inner": mix}, {"inner": 1}, 10)
        with pytest.raises(ConfigError, match=r"^start_step: epoch 1 has 10 batches, got start_step=11"):
            mix.epoch_tasks(1, 11)
    finally:
        mix.close()
    assert issubclass(ConfigError, SpeechiterError)
