"""The type stubs name exactly what the module exports, and every public method has a docstring."""
import ast
import pathlib

import quorum

STUBS = pathlib.Path(__file__).resolve().parents[1] / "quorum.pyi"


def stub_names():
    tree = ast.parse(STUBS.read_text())
    top, members = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            top.add(node.name)
        if isinstance(node, ast.ClassDef):
            members[node.name] = {
                n.name if isinstance(n, ast.FunctionDef) else n.target.id
                for n in node.body
                if isinstance(n, ast.FunctionDef) or (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name))
            }
        if isinstance(node, ast.AnnAssign):
            top.add(node.target.id)
    return top, members


def public(obj):
    return {n for n in dir(obj) if not n.startswith("_")}


def test_stubs_match_the_module():
    top, members = stub_names()
    # `Provider` is a type alias of the stubs alone; `__version__` is not public by name; the package
    # maturin writes re-exports its extension module, `quorum.quorum`.
    assert public(quorum) - {"quorum"} == top - {"Provider", "__version__"}
    assert quorum.__version__
    for cls in ("InferenceSession", "SessionOptions", "NodeArg", "RunOptions"):
        assert public(getattr(quorum, cls)) == members[cls] - {"__init__"}, cls


def test_every_public_method_and_function_has_a_docstring():
    for name in ("get_available_providers", "get_device", "compare"):
        assert getattr(quorum, name).__doc__, name
    for name in public(quorum.InferenceSession):
        assert getattr(quorum.InferenceSession, name).__doc__, name
    assert quorum.InferenceSession.__doc__ and quorum.SessionOptions.__doc__
