"""Importers: corpora described in other toolkits' formats, written as speechiter idx2 files.

    python -m speechiter.importers.kaldi DATA_DIR OUT_DIR        # a Kaldi/ESPnet data directory
    python -m speechiter.importers.lhotse MANIFEST... OUT_DIR    # Lhotse manifests

Each importer is a library module (``kaldi_dir``, ``lhotse_manifests``) with
a thin command beside it (``kaldi``, ``lhotse``); they share one utterance
record (``utterance``), one writer of the idx2 files (``writer``) and the
reading layer's header reader and sample-count rule
(:mod:`speechiter.io.audio`, :mod:`speechiter.io.samples`).
"""
