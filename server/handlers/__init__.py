"""One module per LSP method family (documents, hover, inlay hints, code actions, code lens, commands)."""
