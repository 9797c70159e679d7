"""Sharon's shared executor."""
