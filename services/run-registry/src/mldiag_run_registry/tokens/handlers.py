"""HTTP routes of API tokens (``/v1/apiTokens``; tokens are not scoped to a project)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from mldiag_platform.auth import requires
from mldiag_platform.http import ContractResponse, json_body, read_body
from mldiag_platform.resources import checked_id, id_path
from mldiag_run_registry.tokens.service import TokenService
from mldiag_schemas.auth import (
    ApiToken,
    CreatedToken,
    CreateTokenRequest,
    ListTokensResponse,
    Permission,
)

router = APIRouter()

TOKENS_PATH = "/v1/apiTokens"


def _service(request: Request) -> TokenService:
    service: TokenService = request.app.state.tokens_service
    return service


ServiceDep = Annotated[TokenService, Depends(_service)]


def _token_id(token_id: Annotated[str, id_path("The token id.")]) -> str:
    return checked_id(token_id, "token_id")


TokenIdPath = Annotated[str, Depends(_token_id)]


@router.post(
    TOKENS_PATH,
    dependencies=[requires(Permission.TOKENS_CREATE)],
    openapi_extra=json_body(CreateTokenRequest),
    responses={200: {"model": CreatedToken}},
)
async def create_token(request: Request, service: ServiceDep) -> Response:
    """Create a token; the answer carries its secret, which is never shown again."""
    body = await read_body(request, CreateTokenRequest)
    return ContractResponse(await service.create(body))


@router.get(
    TOKENS_PATH,
    dependencies=[requires(Permission.TOKENS_LIST)],
    responses={200: {"model": ListTokensResponse}},
)
async def list_tokens(service: ServiceDep) -> Response:
    """Every token (without secrets)."""
    return ContractResponse(await service.list())


@router.delete(
    TOKENS_PATH + "/{token_id}",
    dependencies=[requires(Permission.TOKENS_DELETE)],
    responses={200: {"model": ApiToken}},
)
async def revoke_token(token_id: TokenIdPath, service: ServiceDep) -> Response:
    """Revoke a token: every service refuses it from now on."""
    return ContractResponse(await service.revoke(token_id))
