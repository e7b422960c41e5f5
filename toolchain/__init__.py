"""The embedded NKI toolchain: a NumPy simulator and checker for both NKI API generations.

Public entry points: ``nki_agent.toolchain.api`` (simulate / verify a kernel file against a task)
and ``nki_agent.toolchain.shim`` (make ``neuronxcc.nki`` / ``nki`` imports resolve to the simulator).
Importing this package has no side effects.
"""
