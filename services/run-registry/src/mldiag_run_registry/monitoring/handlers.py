"""HTTP routes of a project's rule overrides (``monitoringRules``)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from mldiag_platform.http import ContractResponse, parse_body
from mldiag_platform.resources import ParentDep, route
from mldiag_run_registry.monitoring.errors import InvalidMonitoringRules
from mldiag_run_registry.monitoring.service import MonitoringService
from mldiag_schemas.auth import Permission
from mldiag_schemas.monitoring import ProjectMonitoringRules

router = APIRouter()


def _service(request: Request) -> MonitoringService:
    service: MonitoringService = request.app.state.monitoring
    return service


ServiceDep = Annotated[MonitoringService, Depends(_service)]


@route(router, "GET", "/monitoringRules", Permission.RUNS_GET, response=ProjectMonitoringRules)
async def get_rules(parent: ParentDep, service: ServiceDep) -> Response:
    """The project's overrides of the detection rules."""
    return ContractResponse(await service.get_rules(parent.project, parent.location))


@route(
    router,
    "PATCH",
    "/monitoringRules",
    Permission.RUNS_UPDATE,
    body=ProjectMonitoringRules,
    response=ProjectMonitoringRules,
)
async def replace_rules(request: Request, parent: ParentDep, service: ServiceDep) -> Response:
    """Replace the project's overrides (editors and admins); announced on the bus."""
    body = parse_body(ProjectMonitoringRules, await request.body(), InvalidMonitoringRules)
    return ContractResponse(await service.replace_rules(parent.project, parent.location, body))
