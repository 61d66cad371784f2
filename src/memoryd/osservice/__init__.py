"""Installing memoryd as an OS service: systemd user units, a launchd agent."""
