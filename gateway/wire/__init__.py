"""Wire types: the JSON shapes each API speaks, as msgspec structs.

They live apart from the translations (as Envoy AI Gateway keeps `apischema/` apart
from `translator/`) so that `api` parses with them and `providers` translate from them
without either importing the other.
"""
