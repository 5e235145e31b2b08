"""Augmentation in the workers: noise, reverberation, gain and SpecAugment, in the order a dataset_conf lists
them, and several views of an utterance per batch. See chain.py (the YAML form), handbook.md "Augmentation"."""
from speechiter.dataset.augment.chain import STEPS, Augmentation

__all__ = ["Augmentation", "STEPS"]
