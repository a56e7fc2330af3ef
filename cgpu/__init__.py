"""cgpu: GPU sharing for Kubernetes with real memory isolation."""

__version__ = "0.1.0"
