"""Expression evaluation: per binding (scalar) and over whole columns (vector)."""
