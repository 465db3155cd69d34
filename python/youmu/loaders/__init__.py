"""The loader contract every youmu loader keeps (``passes``): one pass cursor, one epoch rule,
one close."""
