"""Simulated instructions, one module per family (memory, element-wise, reductions, TensorE, ISA)."""
