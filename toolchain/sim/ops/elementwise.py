"""Element-wise math of ``nki.language``: unary math, activations, binary arithmetic, comparisons.

Arithmetic is computed in fp32 and cast to the result dtype (the engines' behaviour); bitwise ops act
on raw integer bits. Each public function doubles as an ALU operator identifier (``op=nl.add``)
through its ``__nki_op__`` tag, which ``common.ALU`` maps to the NumPy implementation.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import numpy as np

from nki_agent.toolchain.facts import dtypes
from nki_agent.toolchain.facts.errors import NkiError
from ...location import caller_location
from .. import runtime
from ..tensor import OPERATORS, Tensor, describe
from . import common as c


def _erf(x: np.ndarray) -> np.ndarray:
    """erf in fp32. Uses torch's vectorised erf when torch is already loaded (task references often load it);
    otherwise Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7, below fp32 tolerance)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        arr = np.ascontiguousarray(x, dtype=np.float32)
        return torch.erf(torch.from_numpy(arr)).numpy()
    x = np.asarray(x, dtype=np.float32)
    a = np.abs(x)
    t = 1.0 / (1.0 + np.float32(0.3275911) * a)
    y = np.float32(1.061405429) * t
    for coef in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        y += np.float32(coef)
        y *= t
    y *= np.exp(-a * a)
    np.subtract(1.0, y, out=y)
    return np.copysign(y, x).astype(np.float32, copy=False)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x))).astype(np.float32)


def _gelu(x: np.ndarray) -> np.ndarray:
    torch = sys.modules.get("torch")
    if torch is not None:  # torch's fused exact GELU is several times faster than erf + arithmetic
        arr = np.ascontiguousarray(x, dtype=np.float32)
        return torch.nn.functional.gelu(torch.from_numpy(arr)).numpy()
    return (0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))).astype(np.float32)


def _gelu_dx(x: np.ndarray) -> np.ndarray:
    pdf = np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)
    return (0.5 * (1.0 + _erf(x / np.sqrt(2.0))) + x * pdf).astype(np.float32)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))).astype(np.float32)


def _gelu_sig(x: np.ndarray) -> np.ndarray:
    return (x * _sigmoid(1.702 * x)).astype(np.float32)


def _gelu_sig_dx(x: np.ndarray) -> np.ndarray:
    s = _sigmoid(1.702 * x)
    return (s + 1.702 * x * s * (1.0 - s)).astype(np.float32)


def _silu_dx(x: np.ndarray) -> np.ndarray:
    s = _sigmoid(x)
    return (s * (1.0 + x * (1.0 - s))).astype(np.float32)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x).astype(np.float32)


def _shift_right(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # logical shift: reinterpret as unsigned of the same width
    if a.dtype.kind == "i":
        u = a.view(np.dtype(f"u{a.dtype.itemsize}"))
        return np.right_shift(u, b.astype(u.dtype)).view(a.dtype)
    return np.right_shift(a, b.astype(a.dtype))


def _abs_max(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(np.abs(a) > np.abs(b), a, b)


def _abs_min(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(np.abs(a) < np.abs(b), a, b)


UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "reciprocal": lambda x: 1.0 / x, "square": np.square, "abs": np.abs, "negative": np.negative,
    "sign": np.sign, "trunc": np.trunc, "floor": np.floor, "ceil": np.ceil, "sin": np.sin, "cos": np.cos,
    "tan": np.tan, "tanh": np.tanh, "arctan": np.arctan, "sigmoid": _sigmoid, "relu": lambda x: np.maximum(x, 0),
    "gelu": _gelu, "gelu_dx": _gelu_dx, "gelu_apprx_tanh": _gelu_tanh, "gelu_apprx_sigmoid": _gelu_sig,
    "gelu_apprx_sigmoid_dx": _gelu_sig_dx, "silu": lambda x: x * _sigmoid(x), "silu_dx": _silu_dx,
    "erf": _erf, "erf_dx": lambda x: (2.0 / np.sqrt(np.pi)) * np.exp(-x * x), "softplus": _softplus,
    "mish": lambda x: x * np.tanh(_softplus(x)), "copy": lambda x: x, "identity": lambda x: x,
    "bypass": lambda x: x, "logical_not": lambda x: (x == 0).astype(np.float32),
}

BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "power": np.power, "maximum": np.maximum, "minimum": np.minimum, "fmod": np.fmod, "mod": np.mod,
    "abs_max": _abs_max, "abs_min": _abs_min,
    "equal": lambda a, b: (a == b).astype(np.float32), "not_equal": lambda a, b: (a != b).astype(np.float32),
    "greater": lambda a, b: (a > b).astype(np.float32), "greater_equal": lambda a, b: (a >= b).astype(np.float32),
    "less": lambda a, b: (a < b).astype(np.float32), "less_equal": lambda a, b: (a <= b).astype(np.float32),
    "logical_and": lambda a, b: ((a != 0) & (b != 0)).astype(np.float32),
    "logical_or": lambda a, b: ((a != 0) | (b != 0)).astype(np.float32),
    "logical_xor": lambda a, b: ((a != 0) ^ (b != 0)).astype(np.float32),
}

BITWISE: dict[str, Callable[..., np.ndarray]] = {
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "left_shift": lambda a, b: np.left_shift(a, b.astype(a.dtype)), "right_shift": _shift_right,
    "invert": np.invert,
}

COMPARISONS = {"equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
               "logical_and", "logical_or", "logical_xor", "logical_not"}

c.ALU.update(UNARY)
c.ALU.update(BINARY)
c.ALU.update(BITWISE)


def _check_operand(api: str, name: str, x: Any) -> None:
    if isinstance(x, Tensor):
        c.require_on_chip(api, name, x)


def unary(api: str, x: Any, dtype: Any = None, mask: Any = None) -> Tensor:
    c.sim(api)
    _check_operand(api, "x", x)
    fn = UNARY[api] if api in UNARY else BITWISE[api]
    m = c.mask_of(mask)
    if api in BITWISE:
        v = c.values(x, m)
        if not dtypes.is_int(v.dtype):
            raise NkiError("sim_unsupported_dtype", f"'{api}' needs an integer tile, got {dtypes.name(v.dtype)}",
                           caller_location())
        res = fn(v)
    else:
        with np.errstate(all="ignore"):
            res = fn(c.fp32(x, m))
    out_dt = c.result_dtype(dtype, x) if api not in COMPARISONS else dtypes.as_dtype(dtype or dtypes.bool_)
    return c.emit(np.asarray(res), out_dt, m)


def binary(api: str, x: Any, y: Any, dtype: Any = None, mask: Any = None) -> Tensor:
    c.sim(api)
    _check_operand(api, "x", x)
    _check_operand(api, "y", y)
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
        raise NkiError("sim_invalid_argument", f"'{api}' needs at least one tile operand", caller_location())
    m = c.mask_of(mask)
    if (isinstance(x, Tensor) and isinstance(y, Tensor) and x.shape != y.shape
            and runtime.require(api).generation == runtime.NEW):
        raise NkiError("sim_shape_mismatch",
                       f"nl.{api} in the new NKI API does not broadcast: {describe(x)} vs {describe(y)}; use "
                       "nisa.tensor_scalar for a (P, 1) operand or .broadcast() a size-1 free dim", caller_location())
    if api in BITWISE:
        a, b = c.values(x, m), c.values(y, m)
        for v in (a, b):
            if v.dtype.kind not in "iub":
                raise NkiError("sim_unsupported_dtype", f"'{api}' needs integer operands, got {dtypes.name(v.dtype)}",
                               caller_location())
        out_dt = c.result_dtype(dtype, x, y)
        res = BITWISE[api](a.astype(out_dt) if a.dtype != out_dt else a, b)
    else:
        a, b = c.fp32(x, m), c.fp32(y, m)
        c.broadcast(api, a, b)
        with np.errstate(all="ignore"):
            res = BINARY[api](a, b)
        out_dt = dtypes.as_dtype(dtype or dtypes.bool_) if api in COMPARISONS else c.result_dtype(dtype, x, y)
    return c.emit(np.asarray(res), out_dt, m, fresh=True)


def _make_unary(name: str) -> Callable[..., Tensor]:
    def f(x: Any, dtype: Any = None, mask: Any = None, **kwargs: Any) -> Tensor:
        return unary(name, x, dtype=dtype, mask=mask)

    f.__name__ = name
    f.__nki_op__ = name  # type: ignore[attr-defined]
    return f


def _make_binary(name: str) -> Callable[..., Tensor]:
    def f(x: Any, y: Any, dtype: Any = None, mask: Any = None, **kwargs: Any) -> Tensor:
        return binary(name, x, y, dtype=dtype, mask=mask)

    f.__name__ = name
    f.__nki_op__ = name  # type: ignore[attr-defined]
    return f


FUNCTIONS: dict[str, Callable[..., Any]] = {}
for _n in UNARY:
    if _n not in ("identity",):
        FUNCTIONS[_n] = _make_unary(_n)
FUNCTIONS["invert"] = _make_unary("invert")
for _n in list(BINARY) + [k for k in BITWISE if k != "invert"]:
    FUNCTIONS[_n] = _make_binary(_n)


def where(condition: Any, x: Any, y: Any, dtype: Any = None, mask: Any = None, **kwargs: Any) -> Tensor:
    c.sim("where")
    m = c.mask_of(mask)
    cond = c.values(condition, m).astype(np.float32) != 0
    a, b = c.fp32(x, m), c.fp32(y, m)
    res = np.where(cond, a, b)
    return c.emit(res, c.result_dtype(dtype, x, y), m)


for _n, _f in FUNCTIONS.items():
    OPERATORS[_n] = _f
OPERATORS["negative"] = FUNCTIONS["negative"]
