import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matmul_bf16_kernel(a, b):
    """out[M, N] = a @ b in bf16 (fp32 accumulation). a: [M, K], b: [K, N].

    TensorE contracts over partitions, so each (128 M x 128 K) block of a is transposed on
    TensorE to (128 K x 128 M) before being used as the stationary operand.
    """
    M, K = a.shape
    K2, N = b.shape
    assert K == K2
    T = nl.tile_size.pmax
    TN = nl.tile_size.gemm_moving_fmax
    assert M % T == 0 and K % T == 0 and N % TN == 0
    out = nl.ndarray((M, N), dtype=nl.bfloat16, buffer=nl.shared_hbm)

    for m in nl.affine_range(M // T):
        # a_t holds the transposed row block of a: partition = k within a K tile, free = (k tile, m)
        a_t = nl.ndarray((T, K), dtype=nl.bfloat16, buffer=nl.sbuf)
        for k in nl.affine_range(K // T):
            a_blk = nl.load(a[m * T:(m + 1) * T, k * T:(k + 1) * T])      # [128 M, 128 K]
            a_t[:, k * T:(k + 1) * T] = nl.copy(nisa.nc_transpose(a_blk), dtype=nl.bfloat16)
        for n in nl.affine_range(N // TN):
            acc = nl.zeros((T, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // T):
                rhs = nl.load(b[k * T:(k + 1) * T, n * TN:(n + 1) * TN])  # [128 K, 512 N]
                acc += nisa.nc_matmul(a_t[:, k * T:(k + 1) * T], rhs)
            res = nl.copy(acc, dtype=nl.bfloat16)
            nl.store(out[m * T:(m + 1) * T, n * TN:(n + 1) * TN], value=res)
    return out
