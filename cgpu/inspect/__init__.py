"""`kubectl inspect cgpu` (alias `kubectl inspect gpushare`): who holds which GPU memory."""
