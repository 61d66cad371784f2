"""The MCP bridge: memoryd's tools for editors that speak the Model Context Protocol.

- ``binding``: the identity a bridge acts for (fixed by its flags) and what it may see;
- ``handshake``: the fast first answers before the SDK is loaded; ``server``: the SDK's server;
- ``bridge``: the tools' calls to the daemon; ``tools``: their names, schemas and texts;
- ``config``: each editor's configuration entry, printed or installed.
"""
