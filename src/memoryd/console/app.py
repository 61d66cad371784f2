"""The console's ASGI application: the routes, the templates, the static files and the guard."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from memoryd import __version__
from memoryd.client.aio import AsyncClient
from memoryd.console import filters
from memoryd.console.gateway import Gateway
from memoryd.console.routes import ROUTES
from memoryd.console.security import ConsoleGuard, Secrets

HERE = Path(__file__).parent
HOST = "127.0.0.1"


def create_app(client_factory: Callable[[], AsyncClient], secrets_: Secrets, port: int,
               host: str = HOST) -> Starlette:
    """The console for the daemon ``client_factory`` connects to, answering at ``host:port``.

    The client is made inside the server's event loop (an asyncio connection belongs to
    the loop that opened it) and closed when the server stops.
    """

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.gateway = Gateway(client_factory())
        try:
            yield
        finally:
            await app.state.gateway.close()

    templates = Jinja2Templates(directory=str(HERE / "templates"))
    filters.install(templates.env)
    templates.env.globals["version"] = __version__
    routes: list[Any] = [*ROUTES, Mount("/static", app=StaticFiles(directory=str(HERE / "static")),
                                        name="static")]
    app = Starlette(routes=routes, lifespan=lifespan,
                    middleware=[Middleware(ConsoleGuard, secrets_=secrets_, host=host, port=port)])
    app.state.templates = templates
    return app
