from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.config import DEV_SECRET, Settings


class TestSettings:
    @pytest.mark.parametrize("value", ["none", "NONE", "null", "off", ""])
    def test_prepare_threshold_none_turns_prepared_statements_off(self, value: str) -> None:
        s = Settings(db_prepare_threshold=value, _env_file=None)  # type: ignore[call-arg,arg-type]
        assert s.db_prepare_threshold is None

    def test_prepare_threshold_keeps_numbers(self) -> None:
        s = Settings(db_prepare_threshold="7", _env_file=None)  # type: ignore[call-arg,arg-type]
        assert s.db_prepare_threshold == 7

    @pytest.mark.parametrize("value", ["none", "off", ""])
    def test_db_call_deadline_none_turns_the_cut_off(self, value: str) -> None:
        s = Settings(db_call_deadline_s=value, _env_file=None)
        assert s.db_call_deadline_s is None

    def test_db_network_settings_reach_libpq(self) -> None:
        from app.db.pool import network_settings

        s = Settings(db_connect_timeout_s=4, db_keepalives_idle_s=7, _env_file=None)
        found = network_settings(s)
        assert found["connect_timeout"] == 4
        assert found["keepalives"] == 1 and found["keepalives_idle"] == 7
        assert found["tcp_user_timeout"] == s.db_tcp_user_timeout_ms

    @pytest.mark.parametrize("field", ["thread_ttl_days", "history_keep_days"])
    @pytest.mark.parametrize("value", ["none", "Off", " null ", ""])
    def test_retention_rule_none_keeps_for_ever(self, field: str, value: str) -> None:
        s = Settings(**{field: value}, _env_file=None)  # type: ignore[arg-type]
        assert getattr(s, field) is None

    def test_retention_rules_keep_numbers(self) -> None:
        values = {"thread_ttl_days": "30", "history_keep_days": "0"}
        s = Settings(**values, _env_file=None)  # type: ignore[arg-type]
        assert (s.thread_ttl_days, s.history_keep_days) == (30.0, 0.0)

    @pytest.mark.parametrize("secret", [DEV_SECRET, "change-me", "short-but-random-xyz"])
    def test_prod_refuses_weak_secrets(self, secret: str) -> None:
        with pytest.raises(ValidationError, match="JWT_SECRET"):
            Settings(  # type: ignore[call-arg]
                app_env="prod", jwt_secret=secret, openai_api_key="k", _env_file=None
            )

    def test_prod_accepts_a_long_random_secret(self) -> None:
        s = Settings(  # type: ignore[call-arg]
            app_env="prod", jwt_secret="x9" * 20, openai_api_key="k", _env_file=None
        )
        assert s.app_env == "prod"
