"""The `gateway` command: thin subcommands that load settings and start things."""
