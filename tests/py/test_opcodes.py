# test_opcodes.py — owns the inventory of this Python's opcodes: each one is traced by the interpreter or
# is listed here as an explicit graph break (or a frame that runs as Python) with the reason.
import dis
import sys

import pytest

import cdynamo

# Opcodes the interpreter does not trace, and what happens instead. A new handler must be removed from
# here (the test fails on it), and a new opcode of a future Python must be classified.
NOT_TRACED = {
    # generators, coroutines and async code: such frames are never captured (generator expressions are
    # inlined: RETURN_GENERATOR and YIELD_VALUE are traced there, see test_python_coverage's genexpr cases)
    "ASYNC_GEN_WRAP": "generator/coroutine frames run as Python",
    "BEFORE_ASYNC_WITH": "generator/coroutine frames run as Python",
    "END_ASYNC_FOR": "generator/coroutine frames run as Python",
    "GET_AITER": "generator/coroutine frames run as Python",
    "GET_ANEXT": "generator/coroutine frames run as Python",
    "GET_AWAITABLE": "generator/coroutine frames run as Python",
    "GET_YIELD_FROM_ITER": "generator/coroutine frames run as Python",
    "SEND": "generator/coroutine frames run as Python",
    "SETUP_ANNOTATIONS": "module and class bodies are never captured",
    "LOAD_BUILD_CLASS": "class definitions break the graph",
    "LOAD_CLASSDEREF": "class bodies are never captured",
    "LOAD_NAME": "module and class bodies are never captured",
    "STORE_NAME": "module and class bodies are never captured",
    "DELETE_NAME": "module and class bodies are never captured",
    "IMPORT_STAR": "module bodies are never captured",
    # exception handling: except clauses of inlined functions are traced (PUSH_EXC_INFO, CHECK_EXC_MATCH, POP_EXCEPT,
    # RERAISE: test_typing_validators.py); exception groups and with-block cleanups run only as Python
    "CHECK_EG_MATCH": "exception handlers run as Python",
    "PREP_RERAISE_STAR": "exception handlers run as Python",
    "WITH_EXCEPT_START": "exception handlers run as Python",
    "LOAD_ASSERTION_ERROR": "a failing assert breaks the graph; Python raises",
    # not traced yet (graph break, or the frame runs as Python)
    "DELETE_GLOBAL": "global deletion is not traced yet",
    "DELETE_DEREF": "deleting a cell variable is not traced yet",
    "MATCH_CLASS": "match statements are not traced yet",
    "MATCH_KEYS": "match statements are not traced yet",
    "MATCH_MAPPING": "match statements are not traced yet",
    "MATCH_SEQUENCE": "match statements are not traced yet",
    "GET_LEN": "match statements are not traced yet",
    "COPY_DICT_WITHOUT_KEYS": "match statements are not traced yet",
    "PRINT_EXPR": "interactive mode only",
    "CACHE": "inline cache entry, never executed",
    "EXTENDED_ARG": "folded into the next instruction's argument by the decoder",
    "INTERPRETER_EXIT": "never in a function's code",
    # CPython 3.12
    "CALL_INTRINSIC_2": "except* and type parameters only: not traced yet",
    "CLEANUP_THROW": "generators and coroutines run as Python",
    "END_SEND": "generators and coroutines run as Python",
    "LOAD_FROM_DICT_OR_DEREF": "class bodies only (run as Python)",
    "LOAD_FROM_DICT_OR_GLOBALS": "class bodies only (run as Python)",
    "LOAD_LOCALS": "class bodies only (run as Python)",
    "RESERVED": "never in a code object",
    # CPython 3.13
    "ENTER_EXECUTOR": "tier-2 executors only: co_code gives the original instruction back (the decoder rejects it)",
    "EXIT_INIT_CHECK": "only in the interpreter's own __init__ shim frame, never in a compiled code object",
}
# 3.12: INSTRUMENTED_* opcodes (sys.monitoring) are never in co_code as the decoder reads it, and the
# compiler's pseudo-opcodes (opmap entries 256 and up) are never in any code object.
_INSTRUMENTED_OR_PSEUDO = {name for name, op in dis.opmap.items() if name.startswith("INSTRUMENTED_") or op >= 256}


def test_every_opcode_is_traced_or_an_explicit_break():
    handled = set(cdynamo._C._testing.handled_opcodes())
    base = {name for name in dis.opmap if name in dis.opname} - _INSTRUMENTED_OR_PSEUDO
    specialized = set(getattr(dis, "_specialized_instructions", ()))
    ops = sorted(base - specialized)
    reasons = NOT_TRACED
    assert all(reasons.values()), "every opcode that is not traced needs its reason"
    unclassified = [op for op in ops if op not in handled and op not in reasons]
    assert not unclassified, f"opcodes neither traced nor listed with a reason: {unclassified}"
    stale = sorted(set(reasons) & handled)
    assert not stale, f"now traced, remove from NOT_TRACED: {stale}"
    # The inventory, for the record (pytest -s shows it).
    print(f"\nPython {sys.version.split()[0]}: {len(ops)} opcodes, {len(handled & set(ops))} traced")
    for op in ops:
        print(f"  {op:28s} {'traced' if op in handled else 'not traced: ' + reasons[op]}")


@pytest.mark.parametrize("source", ["x.sum()", "[t for t in (x, x)][0]", "{'a': x}['a']", "sum(t for t in (x, x))",
                                    "x * len({1, 2} | {3})"])
def test_handled_opcodes_really_trace(source):
    import torch
    from cdynamo.testing import CompileCounter

    ns = {"torch": torch}
    exec(f"def fn(x):\n    return {source} + 1\n", ns)
    counter = CompileCounter()
    x = torch.randn(3)
    torch.testing.assert_close(cdynamo.optimize(counter)(ns["fn"])(x), ns["fn"](x))
    assert counter.frame_count == 1
