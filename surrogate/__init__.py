"""surrogate."""
