"""cgpu: GPU sharing for Kubernetes with real memory isolation."""

__version__ = "0.3.0"  # also in pyproject.toml; CHANGELOG.md says what changed
