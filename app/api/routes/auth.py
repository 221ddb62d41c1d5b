"""Demo sign-in for the chat page (APP_ENV=dev only)."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Depends

from app.api.auth import issue_token
from app.api.deps import ServicesDep, limit_public, limit_sign_in
from app.api.routes.common import require_json
from app.api.schemas import DemoCustomerOut, DemoLoginIn, TokenOut
from app.db.seed import demo_customers
from app.errors import AppError, NotFound
from app.identity import GUEST_PREFIX, STAFF_PREFIX, subject_matches_role

DEMO_STAFF = "staff-demo"

router = APIRouter(tags=["auth"])


@router.post(
    "/auth/demo",
    response_model=TokenOut,
    dependencies=[Depends(limit_sign_in), Depends(require_json)],
)
async def demo_login(body: DemoLoginIn, services: ServicesDep) -> dict[str, Any]:
    settings = services.settings
    if settings.app_env != "dev":
        raise NotFound("not found")
    if body.role == "guest":
        # Every guest gets their own subject, so guests never share threads.
        user_id = f"{GUEST_PREFIX}{uuid.uuid4().hex[:12]}"
    elif body.role == "staff":
        # The console's demo sign-in: a member of staff, `staff-demo` unless named.
        user_id = body.user_id or DEMO_STAFF
        if not subject_matches_role(user_id, "staff"):
            raise AppError(
                f"a staff id starts with {STAFF_PREFIX!r}", code="validation_error", status_code=422
            )
    elif body.user_id is None:
        raise AppError(
            "user_id is required for a customer", code="validation_error", status_code=422
        )
    elif not subject_matches_role(body.user_id, "customer"):
        raise AppError("that is not a customer id", code="validation_error", status_code=422)
    else:
        user_id = body.user_id
    token = issue_token(
        settings.jwt_secret.get_secret_value(),
        user_id,
        role=body.role,
        ttl_s=settings.jwt_default_ttl_s,
        name=(body.name or "Demo staff") if body.role == "staff" else None,
    )
    return {"token": token}


@router.get(
    "/auth/demo/customers",
    response_model=list[DemoCustomerOut],
    dependencies=[Depends(limit_public)],
)
async def demo_customer_list(services: ServicesDep) -> list[dict[str, Any]]:
    """A few seeded customers to sign in as on the demo page (APP_ENV=dev only)."""
    if services.settings.app_env != "dev":
        raise NotFound("not found")
    return [
        {"user_id": c.user_id, "name": c.name, "email": c.email}
        for c in await demo_customers(services.pool, 6)
    ]
