"""The actions file is checked at start, and every mistake names its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.actions.file import ActionsFileError, load_actions_file, parse_actions
from app.actions.identity import customer_token

GOOD = """\
sources:
  - name: loyalty
    mcp: http://127.0.0.1:9001/mcp
    headers: {Authorization: "Bearer ${LOYALTY_TOKEN}"}
    identity_secret: ${SECRET}
    customer_argument: customer_id
    tools:
      issue_voucher: {kind: write, idempotent: true, confirm: "Issue {amount}"}
  - name: billing
    openapi: http://127.0.0.1:9002/openapi.json
    base_url: http://127.0.0.1:9002
    operations: [getInvoice, createRefundRequest]
    timeout_s: 3
"""
ENV = {"LOYALTY_TOKEN": "t0k", "SECRET": "a-secret-long-enough-for-hs256-0123"}


def problem(text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ActionsFileError) as caught:
        parse_actions(text, "actions.yaml", ENV if env is None else env)
    return str(caught.value)


class TestTheFile:
    def test_a_good_file_reads_with_its_variables_filled_in(self) -> None:
        file = parse_actions(GOOD, "actions.yaml", ENV)
        loyalty, billing = file.sources
        assert loyalty.headers == {"Authorization": "Bearer t0k"}
        assert loyalty.identity_secret is not None
        assert loyalty.identity_secret.get_secret_value() == ENV["SECRET"]
        assert loyalty.tools["issue_voucher"].idempotent is True
        assert billing.kind == "openapi" and billing.timeout_s == 3
        assert loyalty.timeout_s == 10  # the default

    def test_an_unset_variable_names_its_line(self) -> None:
        assert problem(GOOD, {"SECRET": "x" * 32}) == (
            "actions.yaml line 4: environment variable LOYALTY_TOKEN is not set"
        )

    def test_a_wrong_value_names_its_line_and_place(self) -> None:
        text = GOOD.replace("kind: write", "kind: sideways")
        assert problem(text).startswith(
            "actions.yaml line 8: sources[0].tools.issue_voucher.kind: Input should be"
        )

    def test_a_bad_source_name_names_its_line(self) -> None:
        assert problem(GOOD.replace("name: billing", "name: Billing-API")).startswith(
            "actions.yaml line 9: sources[1].name: String should match pattern"
        )

    def test_a_source_name_used_twice_is_refused(self) -> None:
        assert problem(GOOD.replace("name: billing", "name: loyalty")) == (
            "actions.yaml line 9: source name 'loyalty' is used twice"
        )

    def test_a_source_needs_exactly_one_kind(self) -> None:
        text = GOOD.replace("    base_url:", "    mcp: http://x/mcp\n    base_url:")
        assert "exactly one of `mcp` or `openapi`" in problem(text)

    def test_an_unknown_key_is_refused(self) -> None:
        assert "line 13: sources[1].timeout: Extra inputs" in problem(
            GOOD.replace("timeout_s: 3", "timeout: 3")
        )

    def test_broken_yaml_names_its_line(self) -> None:
        assert problem("sources:\n  - name: [unclosed\n").startswith("actions.yaml line 3:")

    def test_a_missing_file_is_named(self, tmp_path: Path) -> None:
        with pytest.raises(ActionsFileError, match=r"nope.yaml: cannot be read"):
            load_actions_file(tmp_path / "nope.yaml")


class TestToken:
    def test_the_customer_token_is_short_lived_and_for_one_source(self) -> None:
        import jwt

        token = customer_token("s" * 32, "billing", "cust_1", now=1_000_000)
        claims = jwt.decode(
            token,
            "s" * 32,
            algorithms=["HS256"],
            audience="billing",
            options={"verify_exp": False, "verify_iat": False},
        )
        assert claims["sub"] == "cust_1" and claims["exp"] - claims["iat"] == 300
        assert claims["jti"]
        with pytest.raises(jwt.InvalidAudienceError):
            jwt.decode(
                token,
                "s" * 32,
                algorithms=["HS256"],
                audience="loyalty",
                options={"verify_exp": False, "verify_iat": False},
            )
