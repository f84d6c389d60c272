"""Metering: prices -> cost (`cost`), the spend ledger (`ledger`, `record`, `aggregates`,
`spill`, `memory_ledger`) and reading spend back (`spend`)."""
