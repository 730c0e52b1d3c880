"""HTTP routes of share links, and ``GET /v1/caller`` (who is calling, whatever the bearer)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from mldiag_platform.auth import Principal, authenticated
from mldiag_platform.http import ContractResponse, read_body
from mldiag_platform.resources import ParentDep, checked_id, id_path, route
from mldiag_run_registry.shares.service import ShareLinksService
from mldiag_schemas.auth import SHARED_ROLE, Caller, Permission
from mldiag_schemas.sharing import (
    CreatedShareLink,
    CreateShareLinkRequest,
    ListShareLinksResponse,
    ShareLink,
)

router = APIRouter()

CALLER_PATH = "/v1/caller"


def _service(request: Request) -> ShareLinksService:
    service: ShareLinksService = request.app.state.shares
    return service


ServiceDep = Annotated[ShareLinksService, Depends(_service)]
CallerDep = Annotated[Principal, authenticated()]


def _link_id(link_id: Annotated[str, id_path("The share link id.")]) -> str:
    return checked_id(link_id, "link_id")


LinkIdPath = Annotated[str, Depends(_link_id)]


def _public_url(request: Request) -> str:
    configured: str = request.app.state.public_url
    return configured or str(request.base_url)


@router.get(CALLER_PATH, responses={200: {"model": Caller}})
async def describe_caller(caller: CallerDep, service: ServiceDep) -> Response:
    """The caller's role and permissions (and for a share link, what it opens)."""
    permissions = sorted(permission.value for permission in caller.permissions)
    if caller.scope is not None and caller.run_id is None:  # a share link, not a run token
        link = await service.link(caller.token_id)
        return ContractResponse(
            Caller(token_id=caller.token_id, role=SHARED_ROLE, permissions=permissions, share=link)
        )
    return ContractResponse(
        Caller(token_id=caller.token_id, role=caller.role.value, permissions=permissions)
    )


@route(
    router,
    "POST",
    "/shareLinks",
    Permission.SHARE_LINKS_CREATE,
    body=CreateShareLinkRequest,
    response=CreatedShareLink,
)
async def create_share_link(
    request: Request, parent: ParentDep, caller: CallerDep, service: ServiceDep
) -> Response:
    """Create a link; the answer carries its token and console URL, never shown again."""
    body = await read_body(request, CreateShareLinkRequest)
    created = await service.create(
        parent.project, parent.location, body, caller.token_id, _public_url(request)
    )
    return ContractResponse(created)


@route(router, "GET", "/shareLinks", Permission.SHARE_LINKS_LIST, response=ListShareLinksResponse)
async def list_share_links(
    parent: ParentDep, service: ServiceDep, resource: Annotated[str | None, Query()] = None
) -> Response:
    """The parent's links, or one resource's (``?resource=machineLearningRuns/r``)."""
    return ContractResponse(await service.list(parent.project, parent.location, resource))


@route(router, "DELETE", "/shareLinks/{link_id}", Permission.SHARE_LINKS_DELETE, response=ShareLink)
async def revoke_share_link(
    link_id: LinkIdPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """Revoke a link: it stops opening its resource at once."""
    return ContractResponse(await service.revoke(parent.project, parent.location, link_id))
