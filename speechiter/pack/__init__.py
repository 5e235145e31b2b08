"""Packs: an iterator's audio in shards, in plan order, read with one request per batch.

=================  ==========================================================
``writer``         :func:`~speechiter.pack.writer.write_pack`: shards,
                   ``shards.json`` and the idx2 files (NOTE [ Pack layout ])
``__main__``       ``python -m speechiter.pack``
=================  ==========================================================

Reading a pack needs nothing from here: its values are byte ranges
(NOTE [ Byte-range values ] in speechiter/io/source.py), merged per batch
(speechiter/io/coalesce.py) and checked against ``shards.json``
(speechiter/io/shards.py).
"""
