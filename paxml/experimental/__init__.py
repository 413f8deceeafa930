"""Experimental experiment-definition APIs (baseline experiments, helpers)."""
