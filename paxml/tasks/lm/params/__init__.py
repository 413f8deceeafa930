"""LM experiment catalogue: `lm_cloud`, `c4`, `c4_multislice`, `bert`."""
