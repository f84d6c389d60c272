"""The routing policy engine: request features -> an ordered, explained candidate plan.

Pure: no I/O and no clock reads; time, live stats and tenant spend are inputs.
"""
