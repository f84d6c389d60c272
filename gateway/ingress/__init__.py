"""Client-facing APIs: one pure codec module per API (decode the client's request into
the internal request, encode the internal answer back into the client's API). The
pipeline picks the codec for the path; nothing here touches a socket or a clock.
"""
