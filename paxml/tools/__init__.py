"""Command-line tools and config transformations for Pax experiments."""
