"""Contributed code (as in Pax)."""
