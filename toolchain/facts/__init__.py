"""Facts about NKI, each in one place: the API table and its generated signatures, dtypes, per-target limits,
and the error identities.
"""
