"""Sparsity (N:M structured and unstructured pruning) of Pax layers."""
