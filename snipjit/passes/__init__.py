"""Graph passes, one per module."""
