"""Language server (pygls). The only package that imports pygls/lsprotocol. Not built yet (issue: language server)."""
