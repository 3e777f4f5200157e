"""Test-only fakes of external services (never imported by the package itself)."""
