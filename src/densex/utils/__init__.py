"""Small shared helpers: safe file I/O, cache keys, logging, model paths."""
