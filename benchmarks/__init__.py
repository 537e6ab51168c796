"""Performance benchmarks (run as scripts; nothing here is imported by the product)."""
