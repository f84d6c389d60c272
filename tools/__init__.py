"""Developer tools that are not part of the gateway package (builds, fixtures' helpers)."""
