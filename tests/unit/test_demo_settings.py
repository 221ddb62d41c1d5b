"""When the demo model is used, and that production refuses it unless told otherwise."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.config import Settings
from app.demo.model import demo_chat_model

STRONG_SECRET = "s" * 40
ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LLM_PROVIDER", "APP_ENV", "ALLOW_DEMO_MODEL_IN_PROD")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def make(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)


class TestWhenTheDemoModelIsUsed:
    def test_with_no_key_and_no_url(self) -> None:
        assert make().uses_demo_model

    @pytest.mark.parametrize(
        "values", [{"openai_api_key": "sk-x"}, {"openai_base_url": "http://llm:8000/v1"}]
    )
    def test_not_when_a_real_model_is_configured(self, values: dict[str, Any]) -> None:
        assert not make(**values).uses_demo_model

    def test_llm_provider_demo_forces_it(self) -> None:
        assert make(llm_provider="demo", openai_api_key="sk-x").uses_demo_model

    def test_llm_provider_openai_never_uses_it(self) -> None:
        assert not make(llm_provider="openai").uses_demo_model


class TestProduction:
    def test_refuses_the_demo_model(self) -> None:
        with pytest.raises(ValidationError, match="demo model is refused"):
            make(app_env="prod", jwt_secret=STRONG_SECRET)

    def test_refuses_an_explicit_demo_provider_too(self) -> None:
        with pytest.raises(ValidationError, match="demo model is refused"):
            make(app_env="prod", jwt_secret=STRONG_SECRET, llm_provider="demo")

    def test_allows_it_when_told_to(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("ALLOW_DEMO_MODEL_IN_PROD", "true")
        settings = make(app_env="prod", jwt_secret=STRONG_SECRET)
        assert settings.uses_demo_model and settings.allow_demo_model_in_prod

    def test_a_real_model_needs_no_permission(self) -> None:
        settings = make(app_env="prod", jwt_secret=STRONG_SECRET, openai_api_key="sk-x")
        assert not settings.uses_demo_model


class TestDemoModel:
    def test_paces_at_the_configured_speed(self) -> None:
        assert demo_chat_model(make(demo_model_tokens_per_s=25)).tokens_per_s == 25

    def test_zero_tokens_per_second_means_no_pacing(self) -> None:
        assert demo_chat_model(make(demo_model_tokens_per_s=0)).tokens_per_s is None
