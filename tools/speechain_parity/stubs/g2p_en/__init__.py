"""Stub: G2p is constructed by SpeeChain when use_g2p is set, but only called while loading data."""
class G2p:
    def __call__(self, text):
        raise RuntimeError("g2p_en stub: phonemes are not part of batching")
