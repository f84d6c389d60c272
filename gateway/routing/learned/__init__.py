"""Learned routing: a small shipped model scores how likely a request needs the strong
tier; the `learned` strategy compares that score with the route's calibrated threshold."""
