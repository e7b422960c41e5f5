"""Diagnostics: one plain-data diagnostic model shared by every source (simulator, parsers, static checks)."""
