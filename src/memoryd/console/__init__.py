"""``memoryd console``: the operator's web page, a client of the operator socket.

The daemon has no HTTP listener: this package runs in its own process (the
optional extra ``memoryd[console]``: Starlette, Jinja2, uvicorn), binds
127.0.0.1 only, and turns each page into calls on the operator socket through
:mod:`memoryd.client`. Its guards (security.py) check every request: the Host
header (DNS rebinding), the session cookie that the printed URL's token is
exchanged for, and on a state change the Origin and a CSRF token; every
response carries a strict Content-Security-Policy. Nothing it serves comes from
outside the package: templates/ and static/ are all of it.
"""
