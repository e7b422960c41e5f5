"""The schema of one array's description in a frame, checked for every array an untrusted worker sends.

Kept apart from ``wire.py`` so that workers, which only read what the trusted parent sent, do not pay
for importing pydantic.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, field_validator

from nki_agent.toolchain.protocol.wire import MAX_DIMS, nbytes, plain_dtype


class ArrayMeta(BaseModel):
    """Shape and dtype of one array in a frame: all the parent takes from an untrusted worker."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dtype: str
    shape: tuple[int, ...]

    @field_validator("dtype")
    @classmethod
    def _plain_numeric(cls, v: str) -> str:
        plain_dtype(v)
        return v

    @field_validator("shape")
    @classmethod
    def _sane(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if len(v) > MAX_DIMS or any(d < 0 for d in v):
            raise ValueError(f"shape {list(v)} is not a tensor shape")
        return v

    @property
    def nbytes(self) -> int:
        return nbytes(self.dtype, self.shape)
