"""Metering: prices -> cost (`cost`), the spend ledger (`ledger`, `record`, `aggregates`,
`spill`, `memory_ledger`, `resp`) and reading spend back (`spend`)."""
