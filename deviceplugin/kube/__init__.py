"""Reads from (and the few writes to) the API server: the client and the pods it lists."""
