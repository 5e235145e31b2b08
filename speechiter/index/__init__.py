"""The plan cache: parsed idx2 files and length sorts kept as binary files, mapped read-only by later runs.

    store.py     the entry file format: named arrays, written atomically, opened only when whole and current
    tables.py    one idx2 file's ids, value ranges and numbers, keyed by the file's path, size and mtime
    sorting.py   a dataset's length sort, keyed by a digest of its inputs
    __main__.py  ``python -m speechiter.index recipe.yaml``: write the entries of a recipe's iterators

# NOTE [ Plan cache ]
Every rank of a job used to parse every idx2 file and sort the whole corpus, each into its own memory:
at 10M utterances ~6 s and ~1 GB per rank. With the cache, the first run (or the command) writes what that
work produced; later runs map it (``numpy.memmap``, read-only), so the ranks of a node share one copy in the
page cache, and an idx2 file's values are read from the file itself, mapped too.

- Where: ``$SPEECHITER_INDEX_DIR``, default ``$XDG_CACHE_HOME/speechiter/index`` (``~/.cache/...``).
  ``SPEECHITER_INDEX=0`` turns it off. A run writes entries for files (and sorts) of at least
  ``$SPEECHITER_INDEX_MIN_ROWS`` rows (default 1,000,000); the command writes them for any size.
- Never wrong: a table's entry is keyed by its file's real path, size and mtime; a sort's by a digest of
  its exact inputs (ids, lengths, direction). A changed file, a truncated or foreign entry or another format
  version is not opened; the run parses (and rewrites the entry). Files the vectorised parser hands to the
  line-by-line one (a byte-order mark, odd whitespace) are not cached.
- Never half: an entry is written to a private temporary file and renamed into place, so ranks starting
  together may each write one, and a reader sees an old whole file or a new whole file. A folder that
  cannot be written gives one warning line and the run goes on without the cache.
- Same batches: the cache holds exactly the arrays the parse and the sort make, so the view is bit-identical.
"""
