"""Issue 32: a request that stalls on the store holds up its batch only until an idle worker has built it
again (NOTE [ Hedging ] in speechiter/sequence/hedge.py); the batches are the same, stalled or not."""
import pytest

from speechiter.dataset.speech_text import SpeechTextDataset
from speechiter.dump import checksum
from speechiter.iterator.abs import Iterator

from .test_storage import url_corpus

pytestmark = pytest.mark.slow  # an S3 server (moto), worker processes


def checksums(folder, hedge=True):
    """The checksums of an epoch of one-utterance batches, and the scheduler's (copies, wins)."""
    dataset_conf = {"main_data": {"feat": str(folder / "idx2wav")}, "use_speed_perturb": True}
    with Iterator(dataset_type=SpeechTextDataset, dataset_conf=dataset_conf, batch_size=1, num_workers=2,
                  out_type="null", seed=1, hedge=hedge) as iterator:
        sums = [checksum(batch) for batch in iterator.build_loader(1, prefetch_next=False)]
        hedger = iterator.engine().scheduler.hedger
        return sums, (hedger.copies, hedger.wins)


@pytest.mark.timeout(120)
def test_a_stalled_request_is_hedged_and_the_batches_are_the_same(s3_corpus, s3_proxy, tmp_path):
    folder = url_corpus(s3_corpus, tmp_path / "remote")
    plain, _ = checksums(folder)
    s3_proxy.stall_some(lambda n: n % 100 == 14, 5.0)  # 1% of requests, from the 14th: after the first batches
    stalled, (copies, wins) = checksums(folder)
    assert stalled == plain and copies >= 1 and wins >= 1
    s3_proxy.stall_some(lambda n: n % 100 == 14, 0.5)
    assert checksums(folder, hedge=False) == (plain, (0, 0))
