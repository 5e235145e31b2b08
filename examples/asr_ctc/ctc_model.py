"""A small CTC model over characters: a strided convolution (2x fewer frames), a bidirectional LSTM and a
linear layer to the characters and CTC's blank; and what turns text into targets and outputs back into text.

The LSTM runs over the padded batch (no packing: a packed sequence costs about 10x on the CPU here, and
block batches of length-sorted utterances carry little padding)."""
import torch
from torch import nn

#: the characters of LibriSpeech-style text (uppercase, apostrophes); index 0 is CTC's blank
CHARACTERS = " ABCDEFGHIJKLMNOPQRSTUVWXYZ'"


def encode(texts):
    """``(targets, lengths)``: the texts' characters as indices 1.., concatenated, as CTCLoss takes them."""
    indices = [[CHARACTERS.index(c) + 1 for c in text if c in CHARACTERS] for text in texts]
    return torch.tensor([i for one in indices for i in one], dtype=torch.long), \
        torch.tensor([len(one) for one in indices], dtype=torch.long)


def greedy_decode(log_probs: torch.Tensor, lengths: torch.Tensor):
    """Best path of each row of ``log_probs`` (T, B, V): repeats merged, blanks dropped."""
    best = log_probs.argmax(-1).T.tolist()
    texts = []
    for path, length in zip(best, lengths.tolist()):
        kept = [i for t, i in enumerate(path[:length]) if i and (t == 0 or i != path[t - 1])]
        texts.append("".join(CHARACTERS[i - 1] for i in kept))
    return texts


def edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (x != y))
    return row[-1]


class CTCModel(nn.Module):
    def __init__(self, n_mels: int = 80, hidden: int = 128, layers: int = 2, dropout: float = 0.1):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(n_mels, hidden, 3, stride=2), nn.ReLU())
        self.lstm = nn.LSTM(hidden, hidden, layers, batch_first=True, bidirectional=True, dropout=dropout)
        self.out = nn.Linear(2 * hidden, len(CHARACTERS) + 1)

    def forward(self, feat: torch.Tensor, feat_len: torch.Tensor):
        """``feat`` (B, T, n_mels) -> (log-probabilities (T', B, V), lengths (B,)), T' = (T - 3) // 2 + 1."""
        x = self.conv(feat.transpose(1, 2)).transpose(1, 2)  # (B, T', hidden)
        lengths = torch.div(feat_len - 3, 2, rounding_mode="floor") + 1
        return self.out(self.lstm(x)[0]).log_softmax(-1).transpose(0, 1), lengths
