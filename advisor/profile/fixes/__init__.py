"""Run-time fixes for ``advisor try`` (see docs/try.md)."""
