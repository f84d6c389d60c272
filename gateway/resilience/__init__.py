"""Retry schedules, circuit breakers and deadlines for upstream calls.

Everything here decides on :mod:`gateway.errors` classes and takes its clock, sleep
and random source as arguments, so the decisions are tested without waiting.
"""
