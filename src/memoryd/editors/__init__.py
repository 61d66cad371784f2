"""How editors reach memoryd: the MCP bridge, Claude Code capture, editor configuration."""
