"""Short signature + limits blurbs for the NKI calls people hover most (``nl.*`` / ``nisa.*``).

Our own words, from the NKI API reference; limits are the per-target numbers of
``toolchain.targets`` (filled in at hover time). Keys are the bare API names; ``ns`` says which
namespace documents them (a name in both, like ``matmul``, is looked up by namespace first).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ApiDoc:
    ns: str  # nl | nisa
    signature: str
    blurb: str


API: dict[tuple[str, str], ApiDoc] = {
    ("nl", "load"): ApiDoc("nl", "nl.load(src, *, mask=None, dtype=None) -> tile",
                           "HBM -> SBUF copy of a tile. Partition dim (first) <= {pmax}; the result lives in SBUF."),
    ("nl", "store"): ApiDoc("nl", "nl.store(dst, value, *, mask=None)",
                            "SBUF/PSUM tile -> HBM tensor. `dst` must be in HBM; shapes must match."),
    ("nl", "ndarray"): ApiDoc("nl", "nl.ndarray(shape, dtype, *, buffer=nl.sbuf, name='')",
                              "Allocates a tensor in `buffer` (sbuf / psum / hbm / shared_hbm). On-chip: shape[0] <= "
                              "{pmax} partitions; SBUF {sbuf} B and PSUM {psum} B per partition on {target}."),
    ("nl", "matmul"): ApiDoc("nl", "nl.matmul(x, y, *, transpose_x=False, mask=None) -> psum tile",
                             "x @ y (x[M,K] or x.T with transpose_x). Contraction K <= {pmax}, M <= {stat}, N <= {mov}; "
                             "result in PSUM (fp32)."),
    ("nisa", "nc_matmul"): ApiDoc("nisa", "nisa.nc_matmul(stationary[K,M], moving[K,N]) -> psum[M,N]  (new API: dst first)",
                                  "stationary.T @ moving on TensorE, fp32 into PSUM. K <= {pmax}, M <= {stat}, N <= {mov}; "
                                  "operands in SBUF, both fp32/tf32 or neither. Repeated writes to a PSUM tile accumulate."),
    ("nisa", "nc_transpose"): ApiDoc("nisa", "nisa.nc_transpose(data, *, engine=...) -> tile",
                                     "Transposes a 2-D tile: on TensorE (<= {pmax}x{pmax}, result in PSUM) or VectorE "
                                     "(<= 32x32)."),
    ("nisa", "activation"): ApiDoc("nisa", "nisa.activation(op, data, *, bias=None, scale=1.0, reduce_op=None) -> tile",
                                   "ScalarE: op(data * scale + bias). `bias` is a (P, 1) fp32 vector; `scale` a scalar or "
                                   "(P, 1) vector."),
    ("nisa", "tensor_tensor"): ApiDoc("nisa", "nisa.tensor_tensor(data1, data2, op) -> tile  (new API: dst first)",
                                      "VectorE element-wise op of two tiles with the same shape (partition dims equal, "
                                      "<= {pmax})."),
    ("nisa", "tensor_scalar"): ApiDoc("nisa", "nisa.tensor_scalar(data, op0, operand0, *, op1=None, operand1=None) -> tile",
                                      "VectorE: (data op0 operand0) op1 operand1, operands scalars or (P, 1) vectors."),
    ("nisa", "tensor_reduce"): ApiDoc("nisa", "nisa.tensor_reduce(op, data, axis, *, keepdims=False) -> tile",
                                      "Reduces free axes (new API: trailing free axes only); never the partition axis."),
    ("nisa", "dma_copy"): ApiDoc("nisa", "nisa.dma_copy(dst, src, *, mask=None)",
                                 "DMA between any two buffers (HBM <-> SBUF, SBUF <-> SBUF); shapes must match."),
    ("nl", "affine_range"): ApiDoc("nl", "nl.affine_range(start, stop=None, step=1)",
                                   "Loop whose iterations are independent (the compiler may reorder/pipeline them); "
                                   "`+=` accumulation into PSUM is allowed."),
    ("nl", "sequential_range"): ApiDoc("nl", "nl.sequential_range(start, stop=None, step=1)",
                                       "Loop with a carried dependency: iterations run in order."),
    ("nl", "exp"): ApiDoc("nl", "nl.exp(x, *, dtype=None, mask=None) -> tile", "Element-wise e**x on ScalarE."),
    ("nl", "add"): ApiDoc("nl", "nl.add(x, y, *, dtype=None, mask=None) -> tile",
                          "Element-wise x + y (broadcasting (P, 1) against (P, F))."),
    ("nl", "transpose"): ApiDoc("nl", "nl.transpose(x, *, dtype=None, mask=None) -> tile",
                                "2-D transpose of a tile (partition <-> free), <= {pmax} on both axes."),
    ("nl", "copy"): ApiDoc("nl", "nl.copy(x, *, dtype=None, mask=None) -> tile", "Copies a tile (e.g. PSUM -> SBUF)."),
}


def lookup(ns: str, name: str) -> ApiDoc | None:
    return API.get((ns, name)) or API.get(("nisa" if ns == "nl" else "nl", name))


def render(doc: ApiDoc, target: str, pmax: int, sbuf: int, psum: int, stat: int, mov: int) -> str:
    blurb = doc.blurb.format(pmax=pmax, sbuf=sbuf, psum=psum, stat=stat, mov=mov, target=target)
    return f"```python\n{doc.signature}\n```\n{blurb}\n\n_limits shown for {target}_"
