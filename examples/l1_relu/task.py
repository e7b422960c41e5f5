"""ReLU over a 3-D activation tensor (batch, seq, hidden) - KernelBench-style task."""
import torch
from torch import nn


class Model(nn.Module):
    """Applies ReLU element-wise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 8
seq_len = 128
hidden = 512


def get_inputs():
    x = torch.randn(batch_size, seq_len, hidden)
    return [x]


def get_init_inputs():
    return []


TOLERANCE = {"atol": 1e-6, "rtol": 1e-6}
