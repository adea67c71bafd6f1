"""The API explorer (Swagger UI) at ``/api/v2/docs``, served offline.

FastAPI's own page loads Swagger UI from a CDN, so on a machine without internet it is blank.
Here the page and its assets come from the installed ``swagger-ui-bundle-v2`` package (Swagger
UI 5, which reads the OpenAPI 3.1 document FastAPI generates), under ``/api/v2/docs/assets``;
the page names no other host. Public, like the document (``_auth.PUBLIC``): an explorer user
pastes a token into Authorize (``bearerAuth``)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path  # type: ignore[import-untyped]

DOCS_PATH = "/api/v2/docs"
ASSETS_PATH = f"{DOCS_PATH}/assets"


def install_explorer(app: FastAPI) -> None:
    """Serve the explorer for ``app``'s document (create ``app`` with ``docs_url=None``)."""
    assert app.openapi_url is not None
    openapi_url = app.openapi_url
    app.mount(ASSETS_PATH, StaticFiles(directory=Path(str(swagger_ui_path))), name="explorer-assets")

    @app.get(DOCS_PATH, include_in_schema=False)
    async def explorer() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title}: API explorer",
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon-32x32.png",
            swagger_ui_parameters={"persistAuthorization": False},
        )


__all__ = ["ASSETS_PATH", "DOCS_PATH", "install_explorer"]
