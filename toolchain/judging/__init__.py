"""How a verdict is reached: the judge (the parent), the worker roles (reference, tracer, executor, baseline,
device), verification and simulation runs, and the conversion of their plain results to the typed protocol.
"""
