"""Passes: independent units of background work, each draining its own queue."""
