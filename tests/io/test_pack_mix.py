"""python -m speechiter.pack on a mix: one corpus at a time (--iterator), else one error line and exit 2."""
from pathlib import Path

import yaml

from speechiter import build_iterators, load_config
from speechiter.dump import checksum
from speechiter.io import shards
from speechiter.pack.__main__ import main as pack_main

REPO = Path(__file__).resolve().parents[2]
MIX = REPO / "recipes" / "demo" / "mix.yaml"


def one_error_line(capsys, code, *expected):
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    for part in expected:
        assert part in err, err


def test_a_mix_is_packed_one_corpus_at_a_time(tmp_path, capsys, demo_root):
    base = ["--data_cfg", str(MIX), "--group", "train", "--out", str(tmp_path / "pack")]
    one_error_line(capsys, pack_main(base), "python -m speechiter.pack: error: group 'train' is a mix "
                   "(mix.MixIterator) of main, extra: packing it needs --iterator, naming one corpus at a time")
    one_error_line(capsys, pack_main(base + ["--iterator", "other"]), "has no corpus 'other'")
    assert pack_main(base + ["--iterator", "extra"]) == 0
    assert "wrote shards (1), utterances (6)" in capsys.readouterr().out
    shards.clear_shards()
    # the corpus's own recipe, pointed at its pack, gives the corpus's batches
    assert (tmp_path / "pack" / "idx2wav").read_text().split()[1].startswith("shard-00000.pack#bytes=")
    original = build_iterators(load_config(MIX), num_workers=0, groups=("train",))["train"]
    try:
        extra = original.iterators["extra"]
        conf = {"dataset_type": "speech_text.SpeechTextDataset", "batch_len": 1.6e5,
                "dataset_conf": {"main_data": {"feat": str(tmp_path / "pack" / "idx2wav"),
                                               "text": str(tmp_path / "pack" / "idx2text")}, "sample_rate": 16000},
                "data_len": str(tmp_path / "pack" / "idx2wav_len")}
        recipe = tmp_path / "packed.yaml"
        recipe.write_text(yaml.safe_dump({"train": {"type": "block.BlockIterator", "conf": conf},
                                          "valid": {"type": "block.BlockIterator", "conf": conf}}))
        packed = build_iterators(load_config(recipe), num_workers=0, groups=("train",))["train"]
        try:
            assert [(b.ids, checksum(b)) for b in packed.build_loader(1)] == \
                [(b.ids, checksum(b)) for b in extra.build_loader(1)]
        finally:
            packed.close()
    finally:
        original.close()


def test_a_mix_inside_a_group_is_one_error_line(tmp_path, capsys, demo_root):
    data = str(REPO / "demo" / "data")
    text = MIX.read_text().replace("!ref <data_root>", data).replace("!ref <sample_rate>", "16000")
    cfg = yaml.safe_load(text)
    cfg["train"] = {"mixed": cfg["train"], "plain": cfg["train"]["conf"]["iterators"]["extra"]}
    path = tmp_path / "group.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    code = pack_main(["--data_cfg", str(path), "--group", "train", "--iterator", "mixed", "--out", str(tmp_path)])
    one_error_line(capsys, code, "train/mixed is a mix (mix.MixIterator) of main, extra: pack each corpus")
