"""A fake Kubernetes API server for tests, and a pytest fixture serving it."""
