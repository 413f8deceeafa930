"""Fiddle passes over Pax configs (sharding, NestedMaps, codegen, graphs)."""
