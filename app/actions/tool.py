"""A remote tool as the graph sees it: a LangChain tool whose arguments are the server's
JSON Schema. A read runs in the read node, a write in the serial write node after the
customer's confirmation, exactly like a built-in tool; this only decides whom the call is
for and hands it to app/actions/calls.py.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jsonschema
import structlog
from langchain_core.tools import StructuredTool
from psycopg_pool import AsyncConnectionPool
from pydantic import SkipValidation

from app.actions import calls
from app.actions.identity import customer_token
from app.actions.ledger import CallRecord
from app.actions.remote import RemoteTool, Source
from app.db.idempotency import idempotency_key
from app.fencing import LeaseLost
from app.tools.results import (
    TOOL_FAILED,
    Observation,
    argument_ids,
    failed_with,
    invalid_arguments,
)
from app.tools.scope import (
    NO_CONTEXT,
    Runtime,
    call_arguments,
    context_of,
    conversation_customer,
    not_verified,
    turn_id,
)

log = structlog.get_logger(__name__)


async def _takes_runtime(runtime: Runtime, **arguments: Any) -> Any:
    """Never called (`ActionTool._arun` runs the call): its signature tells LangGraph's
    tool node to hand the tool its runtime."""
    raise NotImplementedError


class ActionTool(StructuredTool):
    remote: SkipValidation[RemoteTool]
    source: SkipValidation[Source]
    pool: SkipValidation[AsyncConnectionPool[Any]]

    @functools.cached_property
    def _injected_args_keys(self) -> frozenset[str]:
        return frozenset({"runtime"})

    def bound(self, observation_format: str) -> ActionTool:
        return self  # a server's text reads the same in either format

    async def _arun(self, *args: Any, **kwargs: Any) -> Any:
        runtime: Runtime | None = kwargs.pop("runtime", None)
        kwargs.pop("run_manager", None)
        kwargs.pop("callbacks", None)
        try:
            observation = await self._call(runtime, kwargs)
        except LeaseLost:
            raise
        except Exception:
            log.exception("action failed", tool=self.name, source=self.remote.source)
            observation = failed_with("failed", TOOL_FAILED)
        artifact = observation.artifact(cacheable=False, more_ids=argument_ids(kwargs))
        return observation.content("text"), artifact

    async def _call(self, runtime: Runtime | None, model_args: dict[str, Any]) -> Observation:
        context = context_of(runtime) if runtime is not None else None
        if runtime is None or context is None:
            return failed_with("refused", NO_CONTEXT)
        problem = _schema_problem(self.remote.schema, model_args)
        if problem is not None:
            return failed_with("invalid_arguments", invalid_arguments(problem))
        customer = conversation_customer(runtime)
        remote = self.remote
        settings = self.source.settings
        if remote.customer_argument is not None and customer is None:
            return not_verified()  # refused before any request
        args = dict(model_args)
        if remote.customer_argument is not None:
            args[remote.customer_argument] = customer  # whatever the model wrote
        token = None
        if settings.identity_secret is not None and customer is not None:
            secret = settings.identity_secret.get_secret_value()
            token = customer_token(secret, settings.name, customer)
        target = calls.Target(self.source, remote, token)
        if remote.kind == "read":
            return await calls.read(target, args)
        key = idempotency_key(
            context.thread_id, turn_id(runtime), self.name, call_arguments(runtime, model_args)
        )
        record = CallRecord(
            key=key,
            thread_id=context.thread_id,
            actor=f"{context.role}:{context.user_id}",
            customer_id=customer,
            tool_name=self.name,
            arguments=args,
        )
        return await calls.write(self.pool, target, record, args)


def action_tool(remote: RemoteTool, source: Source, pool: AsyncConnectionPool[Any]) -> ActionTool:
    return ActionTool(
        name=remote.name,
        description=remote.description,
        args_schema=remote.schema,
        coroutine=_takes_runtime,
        response_format="content_and_artifact",
        remote=remote,
        source=source,
        pool=pool,
    )


def _schema_problem(schema: Mapping[str, Any], args: Mapping[str, Any]) -> str | None:
    """What the arguments get wrong against the server's schema (checked here, so a bad
    call costs no request), or None."""
    try:
        validator = jsonschema.validators.validator_for(schema)(schema)
        errors = sorted(validator.iter_errors(dict(args)), key=lambda e: list(e.path))
    except jsonschema.SchemaError:
        return None  # the server's schema is its own business; it will answer
    if not errors:
        return None
    return "; ".join(
        f"{'.'.join(str(p) for p in e.path) or 'arguments'}: {e.message[:120]}" for e in errors[:5]
    )
