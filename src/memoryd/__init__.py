"""memoryd: a local-first background cognitive daemon for AI-agent memory."""

__version__ = "0.1.0"
PROTOCOL_VERSION = 1
