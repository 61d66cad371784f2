"""The socket service: framing, validation, group commit, handlers, client."""
