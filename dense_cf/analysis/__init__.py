"""Analysis across evaluated runs, from their saved per-item outcomes only (never a model)."""
