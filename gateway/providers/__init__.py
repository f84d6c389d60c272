"""Providers: one pure translation module per upstream API, and one shared transport.

`translator_for(kind)` is the one lookup that picks a translation.
"""
