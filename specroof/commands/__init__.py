"""One module per command added since the CLI moved here; each exposes ``add_parser(sub)``."""
