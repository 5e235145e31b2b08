"""Reading: a data value in, samples out. Every file and URL speechiter reads data from goes through here.

A value (resolved, see :func:`speechiter.paths.resolve_data_path`) becomes a
typed source, which one decoder reads; the importers count samples with the
same rule the readers use.

=================  ==========================================================
``source``         a value as a :class:`~speechiter.io.source.Source`: file or
                   URL, chunk key (``pack.hdf5:utt``), time range (``#t=``),
                   byte range (``#bytes=``), Parquet row (``#row=``)
``samples``        the sample-count rule (Lhotse's ``compute_num_samples``),
                   time ranges in samples, lengths after resampling
``read``           the entry points: ``read_feat`` (any value to float32
                   ``(T, C)``) and ``data_num_frames`` (its length from headers)
``audio``          audio files and URLs, whole or a range; header lengths
``decode``         the decoder: dr_flac for FLAC (``flac``), libsndfile else
``pcm``            the PCM scale: integer samples to float32 in [-1, 1)
``wav``            the WAV header reader
``headers``        decoded lengths checked against WAV / FLAC headers
``remote``         audio at URLs: ranged WAV reads, libsndfile over fsspec
``storage``        URLs through fsspec: filesystems, retries
``secrets``        secrets out of every message (redaction)
``embedded``       a file in a byte range (pack shard), decoded from memory
``coalesce``       a batch's byte ranges merged per object: one read each
``shards``         ranged reads of a pack shard, checked against shards.json
``parquet``        cells of Parquet files (``t.parquet:audio#row=7``), read
                   with their row group once per batch
``pread_file``     positional reads as a seekable file object
``url_file``       a URL as a file object; read errors kept, none lost in C
``arrays``         npy / npz / HDF5 entries and the HDF5 handle cache
``resample``       soxr resampling to an exact length
``kaldi_segments`` Kaldi ``segments`` + ``wav.scp`` as time-range values
``pipes``          Kaldi piped values (``sox a.wav -t wav -r 8000 - |``): what
                   the command asks for, or an unknown command
``piped``          piped values read: natively, or the command run if allowed
``commands``       unknown commands: refused all at once, or run with a timeout
``sphere``         NIST SPHERE that libsndfile cannot decode (shorten), named
``files``          a data file checked before it is read (regular files only)
=================  ==========================================================

Nothing is imported here: import from the modules
(``from speechiter.io.read import read_feat``).
"""
