"""Exact (erf-based) GELU over a 2-D tensor - KernelBench-style task."""
import torch
from torch import nn


class Model(nn.Module):
    """Applies GELU (approximate='none') element-wise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x)


batch_size = 2048
dim = 1024


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []


# the hardware GELU is a fitted approximation; allow a little slack beyond fp32 rounding
TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}
