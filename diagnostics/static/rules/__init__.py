"""Static rules: one module per rule, each exporting ``CODE``, ``KINDS`` (event kinds it reads) and
``check(event, ctx) -> list[Finding]``. ``ALL`` is the registry, in a stable order."""

from __future__ import annotations

from . import (arange_1d, bool_on_tile, matmul_limits, mixed_indexing, partition_limit, psum_bank,
               removed_api, shared_hbm_scope, wrong_buffer)
from . import matmul_psum_dtype, output_not_stored, par_dim, psum_to_hbm
from . import arange_partitions, matmul_dst_memory, matmul_operand_memory
from . import loop_scope

ALL = [partition_limit, psum_bank, matmul_limits, wrong_buffer, bool_on_tile, arange_1d, mixed_indexing,
       shared_hbm_scope, removed_api, psum_to_hbm, matmul_psum_dtype, output_not_stored, par_dim,
       matmul_operand_memory, matmul_dst_memory, arange_partitions, loop_scope]
