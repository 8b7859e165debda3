"""Process-wide CLI options set by the root callback."""

DEBUG = False
