"""A dataset that stops the run (a DataError) at the STOP_COUNT-th load of utterance STOP_ID."""
import collections
import os

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.errors import DataError

LOADS = collections.Counter()


class StopAt(SpeechTextDataset):
    def get_batch(self, ids):
        stop = os.environ.get("STOP_ID")
        for uid in ids:
            LOADS[uid] += 1
            if uid == stop and LOADS[uid] == int(os.environ["STOP_COUNT"]):
                raise DataError(f"stopped at {uid}")
        return super().get_batch(ids)
