"""Compile -> verify -> fix agent loop. Not built yet (issue: agent)."""
