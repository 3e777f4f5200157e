"""Backends: the substrate for files, exec and snapshots (local workspaces, E2B sandboxes)."""
