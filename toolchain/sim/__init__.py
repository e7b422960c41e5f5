"""The NumPy simulator of NKI kernels: tensors, indexing, memory, loops, ops and kernel launches."""
