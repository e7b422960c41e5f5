"""NKI Agent: editor assistant for AWS Neuron Kernel Interface kernels.

Subpackages: ``toolchain`` (embedded NKI simulator + checker), ``diagnostics`` (one diagnostic model
and its sources), ``server`` (language server), ``agent`` (compile-verify-fix loop), ``cli``.
"""

__version__ = "0.1.0"
