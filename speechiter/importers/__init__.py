"""Importers: corpora described in other toolkits' formats, written as speechiter idx2 files.

    python -m speechiter.importers.kaldi DATA_DIR OUT_DIR        # a Kaldi/ESPnet data directory
    python -m speechiter.importers.lhotse MANIFEST... OUT_DIR    # Lhotse manifests
    python -m speechiter.importers.webdataset SHARD... OUT_DIR   # WebDataset tars, indexed in place
    python -m speechiter.importers.shar SHAR_DIR OUT_DIR         # Lhotse Shar, indexed in place
    python -m speechiter.importers.nemo MANIFEST OUT_DIR         # NeMo tarred audio, indexed in place
    python -m speechiter.importers.parquet FILE... OUT_DIR       # Parquet / HF datasets, indexed in place

Each importer is a library module (``kaldi_dir``, with ``kaldi_recordings``
for wav.scp, pipes and reco2dur; ``lhotse_manifests``) with a thin command
beside it (``kaldi``, ``lhotse``; the tar importers are one
module each over ``tar_index``: members as byte ranges, NOTE [ Tar shards read
in place ]); they share one utterance record (``utterance``), one writer of
the idx2 files (``writer``) and the reading layer's header reader and
sample-count rule (:mod:`speechiter.io.audio`, :mod:`speechiter.io.samples`).
"""
