"""All settings in one place, read from the environment (and `.env`)."""

from __future__ import annotations

import base64
import binascii
import json
import os
from functools import cached_property
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

DEV_SECRET = "dev-only-secret-do-not-use-in-production"
PLACEHOLDER_SECRETS = {"", "change-me", "changeme", "secret", DEV_SECRET}
MIN_PROD_SECRET_LENGTH = 32
# What a setting that may be None (the rule turned off) reads as None from the environment.
NONE_WORDS = frozenset({"", "none", "null", "off"})


MIN_WEBHOOK_KEY_BYTES = 24  # Standard Webhooks: a key of 24 to 64 bytes
WEBHOOK_SECRET_PREFIX = "whsec_"


def webhook_signing_key(secret: str) -> bytes:
    """The HMAC key of a webhook secret: `whsec_<base64>` as Standard Webhooks writes it
    (the decoded bytes), or any other text as it is (its UTF-8 bytes)."""
    if secret.startswith(WEBHOOK_SECRET_PREFIX):
        try:
            return base64.b64decode(secret.removeprefix(WEBHOOK_SECRET_PREFIX), validate=True)
        except binascii.Error:
            raise ValueError("a whsec_ webhook secret must be base64 after the prefix") from None
    return secret.encode()


def one_per_core() -> int:
    """The cores this process may run on (a container's cpuset included)."""
    return max(1, min(64, len(os.sched_getaffinity(0))))


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    app_env: Literal["dev", "prod"] = "dev"
    host: str = "127.0.0.1"
    port: int = 8000
    # Worker processes for `serve`, one per core unless set. Runs, thread leases and state all
    # live in Postgres, so any number of workers (or replicas) can serve the same threads; one
    # process is bound by one core (benchmarks/RESULTS.md), so fewer leave cores idle.
    web_workers: int = Field(default_factory=lambda: one_per_core(), ge=1, le=64)
    # An idle keep-alive connection is kept this long: longer than a proxy in front keeps its
    # idle connections to us (nginx, HAProxy, cloud balancers: up to 60 s), so the proxy
    # closes them, never we. A request the proxy writes into a connection we are closing is
    # lost, and a proxy does not send a POST again: the customer would get a 502.
    http_keepalive_s: int = Field(default=75, ge=1, le=3600)
    log_level: str = "INFO"

    # Unset: an embedded PostgreSQL is started under `data_dir`.
    database_url: str | None = None
    # LISTEN/NOTIFY wakes the background loops (app/db/listen.py) over one connection per
    # process that must reach Postgres itself: unset, DATABASE_URL is used unless it goes
    # through PgBouncer (DB_PREPARE_THRESHOLD=none): then point this at Postgres, or the
    # loops only poll; `off`: poll.
    database_listen_url: str | None = None
    data_dir: str = ".data"
    db_pool_min: int = 2
    db_pool_max: int = 20
    # None disables server-side prepared statements (needed behind PgBouncer).
    db_prepare_threshold: int | None = 5
    # Database blips (app/db/pool.py): the longest a request or a run's step waits for a
    # pooled connection before it fails (an API request with 503 database_unavailable).
    # While the database is known to be unreachable, a checkout fails at once instead.
    db_pool_timeout_s: float = Field(default=3.0, gt=0, le=60)
    # Admission (app/runs/admission.py): past what a worker serves, a post or a resume is
    # refused early with 503 overloaded and Retry-After. The turns a worker admits at once
    # adapt to waits for a pooled connection (past ADMIT_MAX_WAIT_MS on average, or a
    # timeout) and to its event loop's lag (past ADMIT_MAX_LAG_MS), up to ADMIT_MAX_TURNS;
    # 0 turns admission off.
    admit_max_turns: int = Field(default=400, ge=0)
    admit_max_lag_ms: float = Field(default=250.0, gt=0)
    admit_max_wait_ms: float = Field(default=100.0, gt=0)
    # Network deadlines on the database path (app/db/pool.py, docs/chaos.md): a connection
    # that goes silent without a FIN (a NAT or load balancer that dropped its state, a
    # stalled PgBouncer) otherwise holds a request, a turn or a pool slot for ever. A use of
    # a pooled connection (a statement, or one transaction's statements) still waiting
    # after `db_call_deadline_s` has its socket cut (None: never; the CLI's long imports).
    # The libpq settings find a dead peer the kernel can see: connect_timeout (whole
    # seconds, at least 2), TCP keepalives on an idle connection, tcp_user_timeout for data
    # sent and never acknowledged.
    db_call_deadline_s: float | None = Field(default=30.0, gt=0)
    db_connect_timeout_s: int = Field(default=5, ge=2, le=60)
    db_keepalives_idle_s: int = Field(default=10, ge=1)
    db_keepalives_interval_s: int = Field(default=3, ge=1)
    db_keepalives_count: int = Field(default=3, ge=1)
    db_tcp_user_timeout_ms: int = Field(default=20_000, ge=0)

    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_provider: Literal["auto", "openai", "demo"] = "auto"
    llm_timeout_s: float = 60.0
    llm_max_retries: int = 3
    # Seconds one whole model call may take: connect, retries, first byte and the stream to
    # its end. `llm_timeout_s` bounds only each wait for bytes, so a server that keeps a
    # stream alive with keepalives would otherwise hold a turn for ever.
    llm_call_deadline_s: float = Field(default=120.0, gt=0)
    # HTTP stack under the openai SDK. aiohttp parses the streamed response in C; httpx
    # (the SDK's default) in pure Python, which cost ~14% of a turn's CPU under load.
    llm_http_client: Literal["aiohttp", "httpx"] = "aiohttp"
    allow_demo_model_in_prod: bool = False
    demo_model_tokens_per_s: float = 60.0

    jwt_secret: SecretStr = SecretStr(DEV_SECRET)
    jwt_default_ttl_s: int = 3600

    # Guest identity: a guest becomes a customer only by typing back a one-time code sent to
    # the customer's registered email (app/notify). Every message is recorded in the `outbox`
    # table. notify_sender: log (dev: the outbox row and the log are the delivery), webhook
    # (POST {to, subject, body} as JSON to notify_webhook_url) or smtp (via smtp_host).
    notify_sender: Literal["log", "webhook", "smtp"] = "log"
    notify_webhook_url: str | None = None
    notify_webhook_token: SecretStr | None = None  # sent as "Authorization: Bearer ..."
    smtp_host: str | None = None
    smtp_port: int = 587
    smtp_username: str | None = None
    smtp_password: SecretStr | None = None
    smtp_from: str = "no-reply@example.com"
    smtp_starttls: bool = True
    identity_code_ttl_s: int = Field(default=600, ge=60)
    identity_code_max_attempts: int = Field(default=5, ge=1)
    # Codes per hour for one guest, and sent per hour to one customer.
    identity_codes_per_hour: int = Field(default=5, ge=1)

    # Handoff webhooks (app/notify/webhooks.py; README: "Handoff webhooks"): a helpdesk at
    # this URL is told of each handoff, accept, release and held customer message, signed as
    # Standard Webhooks does with the secret (`whsec_` + base64: its decoded bytes are the
    # key; any other value: its UTF-8 bytes). Unset URL: off. Delivered at least once from
    # the `webhook_outbox` table; a failed try is retried after base * 2^n seconds, at most
    # the cap.
    handoff_webhook_url: str | None = None
    handoff_webhook_secret: SecretStr | None = None
    handoff_webhook_timeout_s: float = Field(default=10.0, gt=0, le=60)
    handoff_webhook_backoff_base_s: float = Field(default=1.0, gt=0, le=60)
    handoff_webhook_backoff_cap_s: float = Field(default=30.0, gt=0, le=3600)
    # Run webhooks (the LangGraph API's `webhook=URL`, app/api/lg/webhooks.py): a client's
    # URL is told how each of its runs ended, through the same outbox, timeout and backoff.
    # Any public http(s) host, unless WEBHOOK_ALLOWED_HOSTS lists hosts (names or IPs,
    # comma-separated; `*` adds any public host to them): then only those. A private,
    # loopback or link-local address is refused unless its host is listed, also when a name
    # resolves to one at send time. Signed with RUN_WEBHOOK_SECRET (as the handoff secret
    # reads), or when unset with a secret generated once and kept in `webhook_keys`.
    webhook_allowed_hosts: str = ""
    run_webhook_secret: SecretStr | None = None

    # Channels (docs/channels.md): a Chatwoot agent bot and email, both off until set.
    # Chatwoot: the webhook's signing secret, where its API is and the bot's access token;
    # the conversation's link in the console uses CHATWOOT_BASE_URL too.
    chatwoot_base_url: str | None = None
    chatwoot_bot_token: SecretStr | None = None
    chatwoot_webhook_secret: SecretStr | None = None
    # Email: the bearer secret of POST /channels/email/inbound and /postmark, the support
    # address answers come from (sent through the SMTP_* settings), answers per thread/hour.
    email_inbound_secret: SecretStr | None = None
    email_from: str | None = None
    email_answers_per_hour: int = Field(default=5, ge=1)
    # A claimed channel message's lease (renewed while its turn runs), and the outbound
    # retries' backoff: base * 2^n seconds, at most the cap.
    channel_claim_ttl_s: float = Field(default=30.0, ge=1.0, le=3600)
    channel_backoff_base_s: float = Field(default=1.0, gt=0, le=60)
    channel_backoff_cap_s: float = Field(default=60.0, gt=0, le=3600)

    write_confirmation: Literal["required", "off"] = "required"
    # native: the model's own tool calling; react: a text Thought/Action protocol for models
    # without it (small local models behind Ollama or llama.cpp).
    tool_calling: Literal["native", "react"] = "native"
    # How tool results are shown to the model (state always keeps the raw result).
    observation_format: Literal["text", "json"] = "text"
    context_max_tokens: int = Field(default=6000, ge=200)
    turn_step_budget: int = Field(default=25, ge=1)
    breaker_failure_threshold: int = Field(default=3, ge=1)
    breaker_max_calls_per_turn: int = Field(default=10, ge=1)
    breaker_cooldown_turns: int = Field(default=2, ge=1)

    tool_cache_enabled: bool = True
    tool_cache_max_age_turns: int = Field(default=5, ge=1)
    # Fold the oldest messages into a summary once the working list passes this many tokens,
    # keeping about `summary_keep_tokens` of the newest ones.
    summary_trigger_tokens: int = Field(default=4000, ge=100)
    summary_keep_tokens: int = Field(default=1500, ge=50)
    stagnation_rounds: int = Field(default=3, ge=1)
    reflection_every: int = Field(default=5, ge=0)  # 0 disables the reflection note

    sse_heartbeat_s: float = 15.0
    # A token that follows a token waits up to this long for the next ones to share its SSE
    # frame (app/runs/run.py, `follow`): half the frames at 40 tokens/s, unseen by a reader.
    # The first token and every other event go at once; 0 sends each batch as it comes.
    sse_frame_ms: float = Field(default=30.0, ge=0, le=200)
    # One writer per thread (app/runs/leases.py): a claim lasts this long unless its owner
    # renews it (every third of it). After a process dies, its threads answer 409
    # thread_busy for at most this long.
    thread_lease_ttl_s: float = Field(default=15.0, gt=0.2, le=600)
    # A whole turn (every model call and tool of it) ends with `error` + `done` after this.
    turn_deadline_s: float = Field(default=300.0, gt=0)
    # How long the event log of a finished run stays readable (GET .../runs/{id}/stream);
    # the run's record itself stays.
    run_log_ttl_s: float = Field(default=3600.0, ge=0)

    # Retention (app/db/retention.py). A thread idle for THREAD_TTL_DAYS is deleted whole
    # (checkpoints, runs, transcript). HISTORY_KEEP_DAYS after its last turn, a thread keeps
    # its transcript and the last checkpoint of each turn (rewind to a turn still works) and
    # drops the checkpoints between. `none` turns either rule off. The sweep runs every
    # RETENTION_SWEEP_EVERY_S on one replica at a time (0: only `cs-agent prune`, from
    # cron), RETENTION_BATCH_SIZE threads per transaction.
    thread_ttl_days: float | None = Field(default=90.0, ge=1)
    history_keep_days: float | None = Field(default=7.0, ge=0)
    retention_sweep_every_s: float = Field(default=600.0, ge=0)
    retention_batch_size: int = Field(default=20, ge=1, le=1000)

    # Operator analytics (app/analytics; README: "Analytics"). A conversation's outcome is
    # computed once it is idle CONVERSATION_IDLE_MIN minutes or handed off, by a sweep every
    # OUTCOMES_SWEEP_EVERY_S on one replica at a time (0: only `cs-agent outcomes refresh`),
    # OUTCOMES_BATCH_SIZE threads per transaction. Flags: a handoff after more than
    # LATE_HANDOFF_TURNS turns, a turn's answer slower than SLOW_ANSWER_S. PRICE_TABLE is
    # JSON, USD per million tokens per model: {"gpt-4o-mini": {"input": 0.15, "output": 0.6}};
    # a model not in it costs 0.
    conversation_idle_min: float = Field(default=30.0, ge=0)
    outcomes_sweep_every_s: float = Field(default=300.0, ge=0)
    outcomes_batch_size: int = Field(default=100, ge=1, le=1000)
    late_handoff_turns: int = Field(default=4, ge=0)
    slow_answer_s: float = Field(default=30.0, gt=0)
    price_table: Annotated[dict[str, dict[str, float]], NoDecode] = Field(default_factory=dict)
    # The model judge (app/analytics/judge.py), off unless QA_JUDGE_MODEL is set: after each
    # sweep it scores a QA_SAMPLE_RATE share of the outcomes (by thread id, so the same ones
    # on every replica) 1-5 on a rubric, at most QA_JUDGE_BATCH_SIZE per sweep, through any
    # OpenAI-compatible endpoint (QA_JUDGE_BASE_URL; unset: OpenAI's). It is sent the
    # conversation's text and tool results. Its tokens are priced from PRICE_TABLE.
    qa_judge_model: str | None = None
    qa_judge_base_url: str | None = None
    qa_judge_api_key: SecretStr | None = None
    qa_judge_timeout_s: float = Field(default=60.0, gt=0)
    qa_judge_batch_size: int = Field(default=20, ge=1, le=1000)
    qa_sample_rate: float = Field(default=0.1, ge=0, le=1)

    # Rate limits and the model-token budget (app/api/ratelimit.py), held in Postgres so they
    # hold across replicas. Each limit allows `*_burst` requests at once, then refills at its
    # rate; a rate of 0 turns that limit off. Posts (and resumes) and thread creations count
    # per signed-in user; the public routes and failed sign-ins per client IP.
    rate_limit_posts_per_minute: float = Field(default=12, ge=0)
    rate_limit_posts_burst: int = Field(default=20, ge=1)
    rate_limit_threads_per_hour: float = Field(default=60, ge=0)
    rate_limit_threads_burst: int = Field(default=20, ge=1)
    rate_limit_public_per_minute: float = Field(default=120, ge=0)  # /help
    rate_limit_public_burst: int = Field(default=60, ge=1)
    rate_limit_auth_per_minute: float = Field(default=10, ge=0)  # /auth/demo, failed sign-ins
    rate_limit_auth_burst: int = Field(default=10, ge=1)
    # Model tokens (input + output) one user's runs may use per UTC day; 0: no budget.
    token_budget_per_day: int = Field(default=1_000_000, ge=0)
    # Proxies whose X-Forwarded-For is believed (comma-separated IPs or CIDRs). Empty: the
    # client is the TCP peer, and X-Forwarded-For is ignored.
    trusted_proxies: str = ""

    # Allocations between first-generation collections, set (with a freeze of the startup
    # heap) once the service has started; 0 keeps Python's defaults. See app/gc_tuning.py.
    gc_gen0_threshold: int = Field(default=10_000, ge=0)

    # Traces (app/tracing.py; README: "Operations: metrics and traces"). With the otel extra
    # installed and an OTLP/HTTP endpoint set (a collector's base URL, e.g.
    # http://localhost:4318), every run is traced. Message contents, tool arguments and
    # results go on the spans only with otel_capture_content: they are the customer's data.
    otel_exporter_otlp_endpoint: str | None = None
    otel_service_name: str = "cs-agent"
    otel_capture_content: bool = False

    # Edge hardening (app/main.py). /docs, /redoc and /openapi.json: None serves them in dev
    # and not in prod; true or false decides. CORS stays off unless origins are listed
    # (comma-separated, or a JSON list): those may call the API from a browser with a token.
    api_docs_enabled: bool | None = None
    cors_origins: Annotated[list[str], NoDecode] = []

    # Evaluation (`cs-agent eval`, app/eval). The simulated customer is an OpenAI-compatible
    # model; with neither a base URL nor a key set, a built-in scripted customer plays each
    # task from its `customer_lines` (offline). The price table is USD per million tokens,
    # [input, output] by model name, as JSON; a model not listed is reported without a cost.
    user_sim_model: str = "gpt-4o"
    user_sim_base_url: str | None = None
    user_sim_api_key: SecretStr | None = None
    model_prices: dict[str, tuple[float, float]] = {
        "gpt-4o": (2.50, 10.00),
        "gpt-4o-mini": (0.15, 0.60),
        "gpt-4.1": (2.00, 8.00),
        "gpt-4.1-mini": (0.40, 1.60),
    }

    # Your own actions (docs/actions.md): a YAML file naming MCP servers and OpenAPI
    # operations whose tools the agent may use, with the built-in tools' confirmation,
    # ledger and breaker. Unset: none, and nothing of the feature runs. BUILTIN_TOOLS=false
    # leaves only those tools (the demo shop's are not offered).
    actions_file: str | None = None
    builtin_tools: bool = True

    @property
    def uses_user_sim_model(self) -> bool:
        return self.user_sim_base_url is not None or self.user_sim_api_key is not None

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _origins_from_text(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [origin.strip() for origin in text.split(",") if origin.strip()]
        return value

    @field_validator("price_table", mode="before")
    @classmethod
    def _prices_from_json(cls, value: object) -> object:
        if isinstance(value, str):
            return json.loads(value) if value.strip() else {}
        return value

    @property
    def serves_api_docs(self) -> bool:
        return self.app_env != "prod" if self.api_docs_enabled is None else self.api_docs_enabled

    @field_validator(
        "db_prepare_threshold",
        "db_call_deadline_s",
        "thread_ttl_days",
        "history_keep_days",
        "qa_judge_model",
        mode="before",
    )
    @classmethod
    def _none_turns_off(cls, value: object) -> object:
        # `none` turns the rule off: DB_PREPARE_THRESHOLD=none (PgBouncer in transaction
        # mode needs prepared statements off), THREAD_TTL_DAYS / HISTORY_KEEP_DAYS=none.
        if isinstance(value, str) and value.strip().lower() in NONE_WORDS:
            return None
        return value

    @field_validator("handoff_webhook_url", mode="before")
    @classmethod
    def _webhook_url(cls, value: object) -> object:
        if isinstance(value, str):
            if value.strip().lower() in NONE_WORDS:
                return None
            if not value.startswith(("http://", "https://")):
                raise ValueError("HANDOFF_WEBHOOK_URL must be an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _refuse_unsigned_webhooks(self) -> Settings:
        secret = self.handoff_webhook_secret
        key = webhook_signing_key(secret.get_secret_value()) if secret else b""
        if self.app_env == "prod" and self.handoff_webhook_url:
            text = secret.get_secret_value() if secret else ""
            if text.lower() in PLACEHOLDER_SECRETS or len(key) < MIN_WEBHOOK_KEY_BYTES:
                raise ValueError(
                    "HANDOFF_WEBHOOK_URL needs HANDOFF_WEBHOOK_SECRET (at least "
                    f"{MIN_WEBHOOK_KEY_BYTES} bytes, e.g. whsec_ + base64) when APP_ENV=prod"
                )
        return self

    @model_validator(mode="after")
    def _refuse_weak_run_webhook_secret(self) -> Settings:
        secret = self.run_webhook_secret
        if secret is not None and self.app_env == "prod":
            text = secret.get_secret_value()
            if text.lower() in PLACEHOLDER_SECRETS or len(webhook_signing_key(text)) < (
                MIN_WEBHOOK_KEY_BYTES
            ):
                raise ValueError(
                    f"RUN_WEBHOOK_SECRET must be at least {MIN_WEBHOOK_KEY_BYTES} bytes when "
                    "APP_ENV=prod (or unset: a generated one is kept in the database)"
                )
        return self

    @model_validator(mode="after")
    def _refuse_weak_secret_in_prod(self) -> Settings:
        if self.app_env == "prod":
            secret = self.jwt_secret.get_secret_value()
            if secret.lower() in PLACEHOLDER_SECRETS or len(secret) < MIN_PROD_SECRET_LENGTH:
                raise ValueError(
                    f"JWT_SECRET must be a random string of at least {MIN_PROD_SECRET_LENGTH} "
                    "characters when APP_ENV=prod"
                )
            if self.uses_demo_model and not self.allow_demo_model_in_prod:
                raise ValueError(
                    "the demo model is refused with APP_ENV=prod; set OPENAI_BASE_URL / "
                    "OPENAI_API_KEY or ALLOW_DEMO_MODEL_IN_PROD=true"
                )
        return self

    @cached_property
    def uses_demo_model(self) -> bool:
        if self.llm_provider == "demo":
            return True
        if self.llm_provider == "openai":
            return False
        return self.openai_api_key is None and self.openai_base_url is None
