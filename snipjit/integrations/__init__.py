"""Bridges from other frameworks to snipjit; each module imports its framework only when used."""
