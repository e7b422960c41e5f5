"""NKI data types on NumPy: low-precision types are real ml_dtypes storage, never fp32 in disguise.

Also owns the value conversions every engine performs (compute in fp32, round-to-nearest-even and
saturate on the way to integers) and the classic API's type-promotion table.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

bool_ = np.dtype(np.bool_)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
# tf32 is a TensorE input format with fp32 storage; the simulator stores it as fp32.
tfloat32 = np.dtype(np.float32)
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)  # legacy NKI fp8 (IEEE-style, max 240)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)  # OCP fp8, no inf, max 448
float8_e8m0fnu = np.dtype(ml_dtypes.float8_e8m0fnu)

ALL: dict[str, np.dtype[Any]] = {
    "bool_": bool_, "int8": int8, "int16": int16, "int32": int32, "uint8": uint8, "uint16": uint16,
    "uint32": uint32, "float16": float16, "float32": float32, "bfloat16": bfloat16, "tfloat32": tfloat32,
    "float8_e4m3": float8_e4m3, "float8_e5m2": float8_e5m2, "float8_e4m3fn": float8_e4m3fn,
    "float8_e8m0fnu": float8_e8m0fnu,
}
# Short aliases the docs and kernels use.
ALIASES = {"fp32": float32, "fp16": float16, "bf16": bfloat16, "tf32": tfloat32, "bool": bool_}


def as_dtype(dt: Any) -> np.dtype[Any]:
    """Normalise a dtype spelled as an NKI object, NumPy type, string or torch dtype."""
    if isinstance(dt, np.dtype):
        return dt
    if isinstance(dt, str):
        if dt in ALL:
            return ALL[dt]
        if dt in ALIASES:
            return ALIASES[dt]
        return np.dtype(dt)
    name = getattr(dt, "name", None) or str(dt)
    if name.startswith("torch."):
        name = name[len("torch."):]
        name = {"float": "float32", "half": "float16", "bool": "bool_", "int": "int32"}.get(name, name)
        return as_dtype(name)
    return np.dtype(dt)


def name(dt: Any) -> str:
    return "bool_" if as_dtype(dt) == bool_ else as_dtype(dt).name


def is_float(dt: Any) -> bool:
    d = as_dtype(dt)
    return d.kind == "f" or d.kind == "V" or d in (bfloat16, float8_e4m3, float8_e5m2, float8_e4m3fn,
                                                    float8_e8m0fnu)


def is_int(dt: Any) -> bool:
    return as_dtype(dt).kind in "iu"


def to_fp32(a: np.ndarray) -> np.ndarray:
    """Engine input conversion: everything is computed in fp32."""
    if a.dtype == float32:
        return a
    return a.astype(np.float32)


def cast(a: Any, dt: Any) -> np.ndarray:
    """Engine output conversion: RNE to floats, RNE + saturation to integers, bools as 0/1."""
    d = as_dtype(dt)
    arr = np.asarray(a)
    if arr.dtype == d:
        return arr
    if d.kind in "iu" and arr.dtype.kind not in "iub":
        info = np.iinfo(d)
        f = np.nan_to_num(np.rint(arr.astype(np.float64)), nan=0.0)
        return np.clip(f, info.min, info.max).astype(d)
    if d == bool_:
        return arr.astype(np.float32) != 0
    with np.errstate(over="ignore", invalid="ignore"):
        return arr.astype(d)


def poison(dt: Any) -> Any:
    """Value that fills fresh on-chip memory: NaN for floats, 4 for integers (as the NKI simulator)."""
    d = as_dtype(dt)
    if d.kind in "iu":
        return 4
    if d == bool_:
        return True
    if d == float8_e8m0fnu:
        return np.nan
    return np.nan


_FLOAT_RANK = {float8_e4m3: 1, float8_e5m2: 1, float8_e4m3fn: 1, float16: 2, bfloat16: 2, float32: 3}


def promote(a: Any, b: Any) -> np.dtype[Any]:
    """Classic NKI promotion of two typed operands (sdk 2.26 "NKI Type Promotion")."""
    x, y = as_dtype(a), as_dtype(b)
    if x == y:
        return x
    if is_float(x) and not is_float(y):
        return x
    if is_float(y) and not is_float(x):
        return y
    if is_float(x) and is_float(y):
        pair = {x, y}
        if pair == {float16, bfloat16}:
            return float32
        if pair <= {float8_e4m3, float8_e5m2, float8_e4m3fn}:
            return bfloat16
        return x if _FLOAT_RANK.get(x, 3) >= _FLOAT_RANK.get(y, 3) else y
    if x == bool_:
        return y
    if y == bool_:
        return x
    if {x, y} == {int32, uint32}:
        return float32
    if x.kind == y.kind:
        return x if x.itemsize >= y.itemsize else y
    signed, unsigned = (x, y) if x.kind == "i" else (y, x)
    if signed.itemsize > unsigned.itemsize:
        return signed
    widened: dict[int, np.dtype[Any]] = {1: int16, 2: int32}
    return widened.get(unsigned.itemsize, float32)


def weak_scalar_dtype(v: Any) -> np.dtype[Any]:
    """Untyped Python scalars count as the widest hardware type of their kind (classic rule)."""
    if isinstance(v, (bool, np.bool_)):
        return uint8
    if isinstance(v, (int, np.integer)):
        return int32
    return float32
