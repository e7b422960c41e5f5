"""Parameter lists of the element-wise ISA instructions in both NKI API generations, as the source rewrites
(``tile_split``, ``migrate``) bind call arguments: classic calls return their result and take ``mask=`` and
``dtype=``; new calls take the destination tile first and end with ``name=``. They follow the simulator's
signatures (``toolchain/sim/isa_api.py``), which follow the SDK's API pages."""

from __future__ import annotations

CLASSIC: dict[str, tuple[str, ...]] = {
    "tensor_tensor": ("data1", "data2", "op", "dtype", "mask", "engine"),
    "activation": ("op", "data", "bias", "scale", "reduce_op", "reduce_res", "reduce_cmd", "mask", "dtype"),
    "tensor_scalar": ("data", "op0", "operand0", "reverse0", "op1", "operand1", "reverse1", "dtype", "mask",
                      "engine"),
    "tensor_copy": ("src", "mask", "dtype", "engine"),
    "reciprocal": ("data", "dtype", "mask"),
    "scalar_tensor_tensor": ("data", "op0", "operand0", "op1", "operand1", "reverse0", "reverse1", "dtype", "mask"),
    "tensor_reduce": ("op", "data", "axis", "mask", "dtype", "negate", "keepdims"),
    "memset": ("shape", "value", "dtype", "mask", "engine"),
}
NEW: dict[str, tuple[str, ...]] = {
    "tensor_tensor": ("dst", "data1", "data2", "op", "engine", "name"),
    "activation": ("dst", "op", "data", "bias", "scale", "reduce_op", "reduce_res", "reduce_cmd", "name"),
    "tensor_scalar": ("dst", "data", "op0", "operand0", "reverse0", "op1", "operand1", "reverse1", "engine",
                      "name"),
    "tensor_copy": ("dst", "src", "engine", "name"),
    "reciprocal": ("dst", "data", "name"),
    "scalar_tensor_tensor": ("dst", "data", "op0", "operand0", "op1", "operand1", "reverse0", "reverse1", "name"),
    "tensor_reduce": ("dst", "op", "data", "axis", "negate", "keepdims", "name"),
    "memset": ("dst", "value", "engine", "name"),
}
