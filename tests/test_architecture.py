"""The shape docs/architecture.md promises, checked on the sources: the
import graph of the ``jmsstore`` package has no cycles and no deferred
imports, the client reaches the broker only through its port, and no
module imports another's private names."""

from __future__ import annotations

import ast
from concurrent.futures import Future
from pathlib import Path

import jmsstore
from jmsstore import TextMessage
from jmsstore.client import SendFuture

PACKAGE = Path(jmsstore.__file__).parent
INTERNAL_MODULES = {"jmsstore._native", "jmsstore._args"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, ast.Module]:
    return {_module_name(p): ast.parse(p.read_text(), str(p)) for p in sorted(PACKAGE.rglob("*.py"))}


def _imported(module: str, node: ast.Import | ast.ImportFrom, known: set[str]) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for one import statement."""
    if isinstance(node, ast.Import):
        return [(alias.name, []) for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".")
        is_package = module in {m for m in known if any(k.startswith(m + ".") for k in known)}
        anchor = package if is_package else package[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    found: list[tuple[str, list[str]]] = []
    names = []
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        if submodule in known:
            found.append((submodule, []))
        else:
            names.append(alias.name)
    found.append((base, names))
    return found


def _graph() -> tuple[dict[str, set[str]], list[str], list[str]]:
    """Top-level import edges within the package; deferred imports; private names imported."""
    sources = _sources()
    known = set(sources)
    edges: dict[str, set[str]] = {m: set() for m in known}
    deferred: list[str] = []
    private: list[str] = []
    for module, tree in sources.items():
        top_level = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            if id(node) not in top_level and not _under_type_checking(tree, node):
                deferred.append(f"{module}:{node.lineno}")
            for target, names in _imported(module, node, known):
                if target in known and target != module:
                    edges[module].add(target)
                if target.startswith("jmsstore"):
                    private += [f"{module} imports {target}.{n}" for n in names if _private(target, n)]
                elif _private_module(target):
                    private.append(f"{module} imports {target}")
                else:
                    private += [f"{module} imports {target}.{n}" for n in names if _is_private_name(n)]
    return edges, deferred, private


def _is_private_name(name: str) -> bool:
    dunder = name.startswith("__") and name.endswith("__")
    return name.startswith("_") and not dunder


def _private(module: str, name: str) -> bool:
    """A private name of another module; the package's own internal modules
    (the native extension, the shared argument checks) are the package's to use."""
    return _is_private_name(name) and f"{module}.{name}" not in INTERNAL_MODULES


def _private_module(module: str) -> bool:
    """Another library's private module (``concurrent.futures._base``)."""
    return any(_is_private_name(part) for part in module.split("."))


def _under_type_checking(tree: ast.Module, node: ast.AST) -> bool:
    return any(
        isinstance(statement, ast.If)
        and "TYPE_CHECKING" in ast.unparse(statement.test)
        and any(child is node for child in ast.walk(statement))
        for statement in tree.body
    )


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle found by a depth-first walk (each reported once per back edge)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(edges[module]):
            # A package's __init__ importing its own submodules is how packages re-export.
            if module and target.startswith(module + "."):
                continue
            if state.get(target) == 1:
                found.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module)
    return found


def test_the_package_imports_form_no_cycle() -> None:
    edges, _, _ = _graph()
    assert "jmsstore.client.session" in edges and edges["jmsstore.broker.server"], "the graph was read"
    assert _cycles(edges) == []


# The benchmark tool imports a suite, and the optional dependencies only
# that suite needs (matplotlib, pyspark, pika, stomp.py, persist-queue),
# when the suite runs; the library itself defers no import.
OPTIONAL_DEPENDENCY_USERS = "jmsstore.bench"


def test_no_import_is_deferred_into_a_function() -> None:
    _, deferred, _ = _graph()
    library = [d for d in deferred if not d.startswith(OPTIONAL_DEPENDENCY_USERS + ".")]
    assert library == []
    assert deferred, "the benchmark tool's deferred imports were read (the check sees deferred imports)"


def test_no_module_imports_another_modules_private_names() -> None:
    """Neither the package's own modules' nor another library's (the standard
    library's included): their private names may change in any release."""
    _, _, private = _graph()
    assert private == []


def test_the_private_name_check_sees_other_libraries() -> None:
    """The checker itself, on the imports it must refuse."""
    assert _private_module("concurrent.futures._base")
    assert not _private_module("concurrent.futures")
    assert _is_private_name("_state") and not _is_private_name("__future__")


def test_the_send_future_defines_no_private_field_of_future() -> None:
    """``SendFuture`` is a ``concurrent.futures.Future`` completed through its
    public methods: it overrides none of the base class's private fields
    (a send's future that set ``_state`` itself would break with any change
    to the standard library's internals)."""
    own = [name for name in vars(SendFuture) if _is_private_name(name)]
    assert own == []
    made = SendFuture(TextMessage("x"), None)
    assert set(vars(made)) - set(vars(Future())) == {"message", "on_completion"}, "no private field of its own"
    made.finish(None)
    assert made.done() and not made.running() and made.result(0) is made.message


def test_the_client_reaches_the_broker_only_through_its_port() -> None:
    edges, _, _ = _graph()
    client = {m: targets for m, targets in edges.items() if m.startswith("jmsstore.client")}
    assert client, "the client package was read"
    reaching = {m: sorted(t for t in targets if t.startswith("jmsstore.broker")) for m, targets in client.items()}
    assert {m: t for m, t in reaching.items() if t} == {}


def test_the_network_layer_reaches_the_broker_only_through_its_public_package() -> None:
    """``jmsstore.net`` sits above the broker: it may use what ``jmsstore.broker``
    exports, never one of its modules."""
    edges, _, _ = _graph()
    network = {m: targets for m, targets in edges.items() if m.startswith("jmsstore.net")}
    assert "jmsstore.net.stomp.frames" in network, "the network package was read"
    reaching = {m: sorted(t for t in targets if t.startswith("jmsstore.broker.")) for m, targets in network.items()}
    assert {m: t for m, t in reaching.items() if t} == {}


def test_the_cycle_check_finds_a_cycle() -> None:
    """The checker itself: a made-up graph with a cycle is reported."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]
