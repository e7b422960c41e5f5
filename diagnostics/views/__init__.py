"""What the editor shows besides diagnostics — code lens titles, hover Markdown, inlay hint labels — as pure
functions of a document's text, the settings and the facts and results known about it (``runs``, ``facts``,
``cost_view``). No LSP types: ``server/`` turns them into protocol objects (ruff's hover is a pure function of
a document snapshot; so is ours)."""
