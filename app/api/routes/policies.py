"""Policy versions (issue 42): staff read them; admins create, test, publish and roll
back. Anyone else gets 404, as for every staff route. docs/policies.md."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, Field, model_validator

from app.api.deps import ServicesDep
from app.api.routes.common import JSON_ERRORS, require_json
from app.api.routes.staff import Admin, Staff
from app.errors import AppError
from app.policies import store

router = APIRouter(tags=["policies"], responses={**JSON_ERRORS, 403: JSON_ERRORS[404]})

MAX_INSTRUCTIONS_CHARS = 20_000
Version = Annotated[int, Path(ge=1, le=2**31 - 1, description="the version's number")]


class ProcedureIn(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    when: str = Field(min_length=1, max_length=2000)
    steps: str = Field(min_length=1, max_length=8000)


class PolicyIn(BaseModel):
    instructions: str = Field(min_length=1, max_length=MAX_INSTRUCTIONS_CHARS)
    procedures: list[ProcedureIn] = Field(default_factory=list, max_length=50)
    note: str = Field(default="", max_length=2000)
    parent: int | None = Field(default=None, ge=1)


class TestIn(BaseModel):
    tasks: list[dict[str, Any]] = Field(min_length=1, max_length=500)


class PublishIn(BaseModel):
    percent: int = Field(ge=1, le=100)
    force: bool = False
    reason: str | None = Field(default=None, max_length=2000)

    @model_validator(mode="after")
    def _reason_with_force(self) -> PublishIn:
        if self.force and not (self.reason or "").strip():
            raise ValueError("a forced publish needs a reason")
        return self


@router.get("/staff/policies", summary="Policy versions with state, share and latest test")
async def list_policies(staff: Staff, services: ServicesDep) -> dict[str, Any]:
    return {"items": await store.list_versions(services.pool)}


@router.get("/staff/policies/{version:int}", summary="One policy version and its history")
async def get_policy(version: Version, staff: Staff, services: ServicesDep) -> dict[str, Any]:
    return await store.get_version(services.pool, version)


@router.post(
    "/staff/policies",
    status_code=201,
    summary="A new draft version",
    dependencies=[Depends(require_json)],
)
async def create_policy(body: PolicyIn, admin: Admin, services: ServicesDep) -> dict[str, Any]:
    version = await store.create_version(
        services.pool,
        instructions=body.instructions,
        procedures=[p.model_dump() for p in body.procedures],
        note=body.note,
        parent=body.parent,
        actor=admin.user_id,
    )
    return {"version": version, "state": "draft"}


@router.post(
    "/staff/policies/rollback",
    summary="Retire the candidate; with none, make the previous live version live again",
)
async def rollback_policy(admin: Admin, services: ServicesDep) -> dict[str, Any]:
    return await store.rollback(services.pool, admin.user_id)


@router.post(
    "/staff/policies/{version:int}/tests",
    status_code=202,
    summary="Test a version against live through the service, in the background",
    dependencies=[Depends(require_json)],
)
async def test_policy(
    version: Version, body: TestIn, admin: Admin, services: ServicesDep
) -> dict[str, Any]:
    tester = services.policy_tester
    if tester is None:
        raise AppError("policy tests are not available here", code="tests_unavailable")
    test_id = await tester.start(version, body.tasks, admin.user_id)
    return {"id": test_id, "version": version, "status": "running"}


@router.get(
    "/staff/policies/{version:int}/tests/{test_id}", summary="A test's status and comparison"
)
async def get_policy_test(
    version: Version,
    test_id: Annotated[str, Path(max_length=64, pattern=r"^[0-9a-f]{1,64}$")],
    staff: Staff,
    services: ServicesDep,
) -> dict[str, Any]:
    return await store.get_test(services.pool, version, test_id)


@router.post(
    "/staff/policies/{version:int}/publish",
    summary="Publish: 100 makes it live, fewer the candidate for that share of new threads",
    dependencies=[Depends(require_json)],
)
async def publish_policy(
    version: Version, body: PublishIn, admin: Admin, services: ServicesDep
) -> dict[str, Any]:
    order = store.Publish(
        version,
        body.percent,
        admin.user_id,
        force=body.force,
        reason=body.reason.strip() if body.force and body.reason else None,
    )
    return await store.publish(services.pool, order)
