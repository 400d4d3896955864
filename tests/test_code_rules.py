"""The rules of CONTRIBUTING.md's "Code" section that a machine can check.

* No function of ``shardbook/`` is over 60 lines unless its docstring says why, in a
  line that starts ``Long because:``.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 60


def long_without_reason(text: str, name: str = "<text>") -> list[str]:
    """Functions of ``text`` over LIMIT lines whose docstring gives no reason."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            doc = ast.get_docstring(node) or ""
            if lines > LIMIT and "Long because:" not in doc:
                found.append(f"{name}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_long_function_without_a_reason():
    found = []
    for path in sorted((ROOT / "shardbook").rglob("*.py")):
        found += long_without_reason(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, (f"over {LIMIT} lines with no 'Long because:' in the docstring "
                       "(shorten them, or say why):\n" + "\n".join(found))


def test_the_rule_catches_a_planted_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    planted = f'def f():\n    """Doc."""\n{body}\n'
    assert long_without_reason(planted) == [f"<text>:1 f ({LIMIT + 2} lines)"]
    reasoned = planted.replace('"""Doc."""', '"""Doc.\n\n    Long because: a test."""')
    assert long_without_reason(reasoned) == []
