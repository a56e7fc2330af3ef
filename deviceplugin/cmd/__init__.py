"""The command, `cgpu device-plugin`: its flags, and the wiring of a Plugin from them."""
