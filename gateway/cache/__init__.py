"""The response cache: what makes two requests the same (key), where answers are kept
(Redis or memory), what an entry holds, and recording an answer while it is sent. The
stage that reads and writes it is pipeline/response_cache.py."""
