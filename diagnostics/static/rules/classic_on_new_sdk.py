"""Classic ``neuronxcc.nki`` imports when the configured Neuron SDK only accepts the new ``nki`` API
(NKI >= 0.4 rejects ``neuronxcc.nki.*`` inside kernels). A file-level rule: it reads import lines,
and is silent unless the user's settings name the SDK generation. Fix: ``fixes(text)``, the migration of
the whole file to the new API (``diagnostics/migrate.py``) where it is mechanical and exact."""

from __future__ import annotations

import re

from ...model import Fix

CODE = "sim_removed_api"
_IMPORT = re.compile(r"^\s*(?:from\s+(neuronxcc\.nki\S*)\s+import|import\s+(neuronxcc\.nki\S*))")


def check_lines(lines: list[str], sdk_generation: str) -> list[tuple[int, int, int, str]]:
    """(line, column, end_column, message) for each classic import; 1-based, character columns."""
    if sdk_generation != "new":
        return []
    out = []
    for n, line in enumerate(lines, 1):
        m = _IMPORT.match(line)
        if m:
            module = m.group(1) or m.group(2)
            col = line.index(module) + 1
            message = (f"`{module}` is the classic NKI API, which the configured Neuron SDK (NKI >= 0.4) rejects "
                       "inside kernels; import `nki`, `nki.language`, `nki.isa` instead (quick fix available for "
                       "kernels whose migration is mechanical)")
            out.append((n, col, col + len(module), message))
    return out


def fixes(text: str) -> tuple[Fix, ...]:
    """The migration of the file to the new ``nki`` API, the same fix for each classic import line (the
    caller re-checks it with ``verified_fixes`` under the new-SDK settings)."""
    from ...migrate import migrate_to_new_api  # late: migrate reads module facts from the static package

    return tuple(migrate_to_new_api(text))
