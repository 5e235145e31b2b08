"""What the pack and index commands print when they are done (issue 31): rows, as the importers count them,
and the plan cache's entries in words."""
from speechiter.index.__main__ import main as index_main
from speechiter.pack.__main__ import main as pack_main
from tests.recipes import entry, write_recipe


def test_the_pack_summary_counts_rows_as_the_importers_do(tmp_path, make_corpus, capsys):
    corpus = make_corpus(tmp_path / "c", num=6, max_sec=0.4)
    train = entry(corpus, data=("feat", "text"), dataset_conf={"data_selection": ["order", -4]}, batch_len=16000)
    recipe = write_recipe(tmp_path / "recipe.yaml", corpus, train=train)
    assert pack_main(["--data_cfg", str(recipe), "--out", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    size = (tmp_path / "p" / "shard-00000.pack").stat().st_size
    # 4 utterances packed; each idx2 file keeps its 6 rows (the packed values replaced)
    assert out == (f"wrote shards (1), utterances (4), bytes ({size}), idx2wav (6), idx2text (6), idx2wav_len (6) "
                   f"to {tmp_path / 'p'}\n")


def test_the_index_summary_says_what_is_in_the_cache_and_what_is_new(tmp_path, corpus, capsys):
    recipe = write_recipe(tmp_path / "recipe.yaml", corpus, "abs.Iterator", batch_size=2)
    cache = tmp_path / "cache"
    assert index_main([str(recipe), "--cache_dir", str(cache), "--group", "train"]) == 0
    first = capsys.readouterr().out
    assert index_main([str(recipe), "--cache_dir", str(cache), "--group", "train"]) == 0
    second = capsys.readouterr().out
    total = len(list(cache.iterdir()))
    assert first.startswith(f"{total} plan cache entries in {cache} (sort 1, view 1")
    assert first.endswith(f"): {total} written now, 0 already there\n")
    assert second.endswith(f"): 0 written now, {total} already there\n")
