"""SQL built at run time composes identifiers and fragments with psycopg.sql.

An f-string or str.format() splices text into a statement unquoted: one caller passing a name
it took from input turns into an injection, and the reader cannot tell the safe splices from
the unsafe. Constant fragments joined at import time are fine (they are fixed text); inside a
function a statement is built with sql.SQL(...).format(sql.Identifier(...), ...). This walks
every module of app/ and names each function that builds SQL from a formatted string.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import app

APP_DIR = Path(app.__file__).parent

# What a statement starts with or contains, in capitals as every statement in app/ is written;
# a log message ("deleted from the archive") is lower case and does not match.
SQL_TEXT = re.compile(
    r"\b(SELECT\b.*\bFROM|INSERT\s+INTO|UPDATE\b.*\bSET|DELETE\s+FROM|COPY\b.*\b(FROM|TO)\b"
    r"|TRUNCATE\s|\bWHERE\b|\bFROM\s+\w+\s+(?:WHERE|ORDER|GROUP|LIMIT|t\b))",
    re.S,
)


def _text(node: ast.JoinedStr) -> str:
    return "".join(
        part.value
        for part in node.values
        if isinstance(part, ast.Constant) and isinstance(part.value, str)
    )


def _constants(tree: ast.Module) -> dict[str, str]:
    """The module's own string constants, NAME = "..." (or an f-string of constants)."""
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                text = value.value
            elif isinstance(value, ast.JoinedStr):
                text = _text(value)
            else:
                continue
            found.update((t.id, text) for t in targets if isinstance(t, ast.Name))
    return found


def _formatted_sql(node: ast.AST, constants: dict[str, str]) -> str | None:
    """The literal text of an f-string or a str.format() call that reads like SQL."""
    if isinstance(node, ast.JoinedStr) and any(
        isinstance(part, ast.FormattedValue) for part in node.values
    ):
        text = _text(node)
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
    ):
        template = node.func.value
        if isinstance(template, ast.Constant) and isinstance(template.value, str):
            text = template.value
        elif isinstance(template, ast.Name) and template.id in constants:
            text = constants[template.id]
        else:  # sql.SQL(...).format(...) and the like compose, they do not splice
            return None
    else:
        return None
    return text if SQL_TEXT.search(text) else None


def offences(source: str) -> list[tuple[int, str]]:
    """(line, text) of each formatted SQL string inside a function body."""
    tree = ast.parse(source)
    constants = _constants(tree)
    found: list[tuple[int, str]] = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        for node in ast.walk(function):
            text = _formatted_sql(node, constants)
            if text is not None:
                found.append((node.lineno, " ".join(text.split())[:80]))
    return sorted(set(found))


class TestTheScanner:
    def test_it_finds_an_f_string_statement_in_a_function(self) -> None:
        planted = (
            "async def wipe(conn, table, key):\n"
            "    await conn.execute(f'DELETE FROM {table} WHERE id = %s', (key,))\n"
        )
        assert offences(planted) == [(2, "DELETE FROM WHERE id = %s")]

    def test_it_finds_a_format_call_assigned_in_a_function(self) -> None:
        planted = (
            "def query(columns):\n"
            "    text = 'SELECT {} FROM orders t WHERE id = %s'.format(columns)\n"
            "    return text\n"
        )
        assert [line for line, _ in offences(planted)] == [2]

    def test_it_finds_one_nested_in_a_method(self) -> None:
        planted = (
            "class Store:\n"
            "    async def read(self, cur, column):\n"
            "        await cur.execute(f'''SELECT {column}\n"
            "            FROM runs WHERE run_id = %s''', (1,))\n"
        )
        assert [line for line, _ in offences(planted)] == [3]

    def test_it_finds_a_module_template_formatted_in_a_function(self) -> None:
        planted = (
            "_QUEUE = 'SELECT thread_id FROM thread_control WHERE {where}'\n"
            "def queue(which):\n"
            "    return _QUEUE.format(where=which)\n"
        )
        assert [line for line, _ in offences(planted)] == [3]

    def test_it_leaves_log_messages_and_import_time_fragments(self) -> None:
        fine = (
            "COLUMNS = 'id, name'\n"
            "QUERY = f'SELECT {COLUMNS} FROM orders WHERE id = %s'\n"
            "def note(log, table, n):\n"
            "    log.info(f'deleted {n} rows from {table}')\n"
            "    log.info('select from {} where it failed'.format(table))\n"
            "    return sql.SQL('SELECT {} FROM orders').format(sql.Identifier(table))\n"
        )
        assert offences(fine) == []


# Migrations are history, run once through Alembic's `op.execute`, which takes text, not
# psycopg.sql; they splice only their own constants.
SKIPPED = APP_DIR / "migrations"


class TestApp:
    def test_no_function_builds_sql_from_a_formatted_string(self) -> None:
        found = [
            f"{path.relative_to(APP_DIR.parent)}:{line}: {text}"
            for path in sorted(APP_DIR.rglob("*.py"))
            if SKIPPED not in path.parents
            for line, text in offences(path.read_text())
        ]
        assert not found, "compose with psycopg.sql instead:\n" + "\n".join(found)
