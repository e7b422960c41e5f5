import nki
import nki.isa as nisa
import nki.language as nl


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

    for m in range(M // T):
        a_t = nl.ndarray((T, K), dtype=nl.bfloat16, buffer=nl.sbuf)
        for k in range(K // T):
            a_blk = nl.ndarray((T, T), dtype=nl.bfloat16, buffer=nl.sbuf)
            nisa.dma_copy(dst=a_blk, src=a[m * T:(m + 1) * T, k * T:(k + 1) * T])
            # transpose keeps the input dtype (dst dtype must equal data dtype)
            a_blk_t = nl.ndarray((T, T), dtype=nl.bfloat16, buffer=nl.psum)
            nisa.nc_transpose(dst=a_blk_t, data=a_blk)
            nisa.tensor_copy(dst=a_t[:, k * T:(k + 1) * T], src=a_blk_t)
        for n in range(N // TN):
            acc = nl.ndarray((T, TN), dtype=nl.float32, buffer=nl.psum)
            for k in range(K // T):
                rhs = nl.ndarray((T, TN), dtype=nl.bfloat16, buffer=nl.sbuf)
                nisa.dma_copy(dst=rhs, src=b[k * T:(k + 1) * T, n * TN:(n + 1) * TN])
                nisa.nc_matmul(acc, a_t[:, k * T:(k + 1) * T], rhs)
            res = nl.ndarray((T, TN), dtype=nl.bfloat16, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * T:(m + 1) * T, n * TN:(n + 1) * TN], src=res)
    return out
