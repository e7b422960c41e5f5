"""The one protocol between the parent and its workers: typed job results (``jobs``), the cost model's results
(``cost``), the traced kernel program (``program``) and the frames that carry them (``wire``, ``wire_schema``).

Kept import-free: workers import ``wire`` and ``program`` without the pydantic models.
"""
