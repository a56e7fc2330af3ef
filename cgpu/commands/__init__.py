"""Small `cgpu` subcommands."""
