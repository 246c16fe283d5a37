"""Real local HTTP endpoints that misbehave: moved to tests/fakes.py (names kept here)."""

from tests.fakes import refused_url, silent_server, status_server

__all__ = ["refused_url", "silent_server", "status_server"]
