"""One module per command; each exposes ``add_parser(sub)``, and ``specroof.cli`` assembles them."""
