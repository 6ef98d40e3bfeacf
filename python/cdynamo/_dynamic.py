# _dynamic.py — owns dynamic shapes on the Python side: which dimensions are dynamic (automatic dynamic frame state,
# mark_dynamic / mark_static, compile(dynamic=...)), fake tensors under torch's ShapeEnv for one trace, and the
# SHAPE_ENV guard spec made from that ShapeEnv after the trace.
"""Dynamic shapes, as torch._dynamo has them.

A frame is traced with static shapes (meta examples) until one of its inputs shows a dimension whose size changed
between compiles (``config.automatic_dynamic_shapes``), a dimension marked with :func:`mark_dynamic`, or
``compile(dynamic=True)``. Such a frame is traced with fake tensors whose dynamic sizes are symbols of a
``torch.fx.experimental.symbolic_shapes.ShapeEnv``; what the trace decided about them (``s0 > 4`` in a branch,
``s0 == s1`` in a ``cat``) is guarded after it.
"""
import dataclasses
import math
import weakref

import torch

from . import config

# (file, first line, name) of a code object -> {source name: _SeenTensor | _SeenScalar}; cleared by cdynamo.reset().
# Keyed by name, not identity: a recompiled frame makes its continuations (__resume_at_<offset>_c<n>) anew.
_frame_state = {}


def _code_key(code):
    name = code.co_name
    if name.startswith("__resume_at_"):  # __resume_at_<offset>_c<n>: <n> counts compiles, the offset is the place
        name = name.rsplit("_c", 1)[0]
    return (code.co_filename, code.co_firstlineno, name)


def clear_state():
    _frame_state.clear()


def float_input_positions(example_inputs):
    """Positions of ``example_inputs`` that stand for a float argument passed as a 0-d float64 tensor."""
    return [i for i, ex in enumerate(example_inputs) if getattr(ex, "_cdynamo_float_input", False)]


def floats_as_tensors(compiled, positions):
    """``compiled`` called with the floats at ``positions`` as 0-d float64 tensors, as torch._dynamo passes them."""
    tensor, f64 = torch.tensor, torch.float64

    def call(*args):
        args = list(args)
        for i in positions:
            args[i] = tensor(args[i], dtype=f64)
        return compiled(*args)

    call._cdynamo_compiled = compiled
    return call


@dataclasses.dataclass
class _SeenTensor:
    sizes: list  # per dimension: the size seen at every compile so far, or None once it changed (dynamic)


@dataclasses.dataclass
class _SeenScalar:
    value: object  # the int or float seen at every compile so far, or None once it changed (dynamic)


# --- marks on tensors (torch._dynamo's attribute names, so torch._dynamo.mark_dynamic is honoured too) ---

def _check_dim(t, dim):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(t).__name__}")
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    if not -t.dim() <= dim < max(t.dim(), 1):
        raise IndexError(f"dimension {dim} out of range for a tensor of {t.dim()} dimensions")
    return dim % t.dim()


def _dims(t, index):
    if isinstance(index, (list, tuple)):
        return [_check_dim(t, d) for d in index]
    return [_check_dim(t, index)]


def mark_dynamic(t, index, *, min=None, max=None):
    """Mark dimension(s) ``index`` of ``t`` dynamic: the first compile that sees ``t`` gives them symbolic sizes
    (never specialised on 0/1 by duck sizing), with ``min`` / ``max`` as the symbol's range when given."""
    for d in _dims(t, index):
        if not hasattr(t, "_dynamo_dynamic_indices"):
            t._dynamo_dynamic_indices = set()
        t._dynamo_dynamic_indices.add(d)
        if min is not None or max is not None:
            if not hasattr(t, "_cdynamo_dynamic_range"):
                t._cdynamo_dynamic_range = {}
            t._cdynamo_dynamic_range[d] = (min, max)


def maybe_mark_dynamic(t, index):
    """Mark dimension(s) ``index`` of ``t`` dynamic if the trace lets it be; a trace that needs a static size
    specialises it without error."""
    for d in _dims(t, index):
        if not hasattr(t, "_dynamo_weak_dynamic_indices"):
            t._dynamo_weak_dynamic_indices = set()
        t._dynamo_weak_dynamic_indices.add(d)


def mark_static(t, index=None):
    """Keep dimension(s) ``index`` of ``t`` (all of them when None) static, even after its size changed."""
    dims = range(t.dim()) if index is None else _dims(t, index)
    if not hasattr(t, "_dynamo_static_indices"):
        t._dynamo_static_indices = set()
    t._dynamo_static_indices.update(dims)


def _marked(t, attr):
    return getattr(t, attr, None) or ()


# --- which dimensions of an input are dynamic ---

def _wants_dynamic(cb_dynamic):
    return cb_dynamic is True or (cb_dynamic is None and not config.assume_static_by_default)


def _forced_static(t, name):
    """A parameter (an nn.Parameter, or any tensor in a module's ``_parameters`` / ``_buffers``): its sizes stay
    static under automatic dynamic and ``dynamic=True``, as torch._dynamo's ``force_parameter_static_shapes`` and
    ``force_nn_module_property_static_shapes`` keep them (models of two widths through one forward would otherwise
    give the second symbolic weights); ``mark_dynamic`` still makes one dynamic."""
    return type(t) is torch.nn.Parameter or "._parameters[" in name or "._buffers[" in name


def _dims_for(code, cb_dynamic, name, t):
    """Per dimension of tensor input ``name``: "static", "auto" (automatic dynamic), "duck" (dynamic=True),
    "dynamic" (mark_dynamic: a trace that specialises it raises) or "weak" (maybe_mark_dynamic: it may specialise);
    records what this compile saw of it in the code's frame state."""
    marked = set(_marked(t, "_dynamo_dynamic_indices"))
    if not marked and _forced_static(t, name):
        return ["static"] * t.dim()  # nor recorded in the frame state: a later compile does not learn it dynamic
    state = _frame_state.setdefault(_code_key(code), {})
    sizes = list(t.shape)
    seen = state.get(name)
    if not isinstance(seen, _SeenTensor) or len(seen.sizes) != len(sizes):
        seen = state[name] = _SeenTensor(list(sizes))
    elif cb_dynamic is not False and config.automatic_dynamic_shapes:
        seen.sizes = [None if old is None or old != new else old for old, new in zip(seen.sizes, sizes)]
    weak = set(_marked(t, "_dynamo_weak_dynamic_indices"))  # maybe_mark_dynamic (and torch 2.11's aot outputs)
    static = set(_marked(t, "_dynamo_static_indices"))
    out = []
    for d in range(len(sizes)):
        if d in static or cb_dynamic is False:
            out.append("static")
        elif d in marked:
            out.append("dynamic")
        elif d in weak:
            out.append("weak")  # symbolic, but a trace that needs it static specialises it without error
        elif _wants_dynamic(cb_dynamic):
            out.append("duck")  # dynamic=True: equal sizes share a symbol (duck sizing), as in torch._dynamo
        elif seen.sizes[d] is None:
            out.append("auto")  # automatic dynamic: a symbol of its own (torch._dynamo does not duck-size these)
        else:
            out.append("static")
    return out


def observe_tensor(code, cb_dynamic, t, name):
    """For a static trace: records ``t`` (tensor input ``name``) in the frame state; True when some dimension of it
    is dynamic now (the trace must start again with fake tensors)."""
    return any(k != "static" for k in _dims_for(code, cb_dynamic, name, t))


def _scalar_dynamic(code, cb_dynamic, name, value):
    """Records int or float input ``name`` in the code's frame state; True when it is dynamic now: it changed between
    compiles (automatic dynamic), or compile(dynamic=True)."""
    state = _frame_state.setdefault(_code_key(code), {})
    seen = state.get(name)
    if not isinstance(seen, _SeenScalar) or (seen.value is not None and type(seen.value) is not type(value)):
        # First seen, or seen as another type (an int, now a float: a new kind of call, not a changed value).
        state[name] = _SeenScalar(value)
        return _wants_dynamic(cb_dynamic)
    if cb_dynamic is not False and config.automatic_dynamic_shapes and seen.value != value:
        seen.value = None
    return cb_dynamic is not False and (seen.value is None or _wants_dynamic(cb_dynamic))


def observe_scalar(code, cb_dynamic, value, name):
    """For a static trace: records int or float input ``name``; True when it is dynamic now (the trace must start
    again with fake tensors)."""
    return _scalar_dynamic(code, cb_dynamic, name, value)


class _NeedsFake:
    """Frame state marker: the frame calls Tensor.item() under capture_scalar_outputs (needs fake tensors)."""


def need_fake_tensors(code):
    """Traces of ``code`` start with fake tensors from now on."""
    _frame_state.setdefault(_code_key(code), {})["<scalar outputs>"] = _NeedsFake()


def frame_is_dynamic(code, cb_dynamic):
    """Whether a trace of ``code`` starts with fake tensors: some input of it was dynamic in an earlier compile,
    or compile(dynamic=True)."""
    if cb_dynamic is False:
        return False
    if _wants_dynamic(cb_dynamic):
        return True
    state = _frame_state.get(_code_key(code))
    if not state:
        return False
    for seen in state.values():
        if isinstance(seen, _SeenTensor) and None in seen.sizes:
            return True
        if isinstance(seen, _SeenScalar) and seen.value is None:
            return True
        if isinstance(seen, _NeedsFake):
            return True
    return False


def op_error_is_genuine(exc):
    """Whether ``exc``, raised by an op on fake tensors, is the op's own error for the sizes the frame has now (a size
    check: eager raises there too), not a limit of tracing with symbols (a data-dependent size or guard, an op
    without a fake kernel, a SymInt where an int must be)."""
    from torch._subclasses.fake_tensor import (DataDependentOutputException, DynamicOutputShapeException,
                                               UnsupportedOperatorException)
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    limits = (GuardOnDataDependentSymNode, DataDependentOutputException, DynamicOutputShapeException,
              UnsupportedOperatorException, NotImplementedError, TypeError)
    return isinstance(exc, (RuntimeError, ValueError, IndexError)) and not isinstance(exc, limits)


def has_fake(values):
    """Whether some of ``values`` is a fake tensor or a symbolic number (the example inputs of a dynamic graph)."""
    from torch._subclasses.fake_tensor import FakeTensor

    return any(isinstance(v, (FakeTensor, torch.SymInt, torch.SymFloat, torch.SymBool)) for v in values)


def drop_dead_sym_nodes(gm):
    """Removes the graph's size computations nothing uses (a comparison the trace only branched on, a size read for
    a slice that became a constant), as torch._dynamo's dead-code pass does; returns how many."""
    dropped = 0
    for node in reversed(list(gm.graph.nodes)):
        if node.op in ("call_function", "call_method") and not node.users and \
                isinstance(node.meta.get("example_value"), (torch.SymInt, torch.SymBool, torch.SymFloat)):
            gm.graph.erase_node(node)
            dropped += 1
    if dropped:
        gm.recompile()
    return dropped


# --- one trace with fake tensors ---

class _Name(str):
    """A source's name: torch 2.13 reads ``source.name`` as a property, older torch calls ``source.name()``."""

    def __call__(self):
        return str(self)


class _Source(torch._guards.Source):
    """A frame source as torch's ShapeEnv names it in guards and messages ("L['x']")."""

    def __init__(self, text):
        self._text = _Name(text)

    @property
    def name(self):
        return self._text

    def guard_source(self):
        return torch._guards.GuardSource.LOCAL

    def __eq__(self, other):
        return isinstance(other, _Source) and other._text == self._text

    def __hash__(self):
        return hash(self._text)

    def __repr__(self):
        return self._text


SLOT_KINDS = ("size", "stride", "offset", "int", "float")


@dataclasses.dataclass(frozen=True)
class SlotSpec:
    """One number the SHAPE_ENV guard reads from the frame: of graph input ``input`` (an index into the trace's
    inputs, in C++'s order), ``kind`` one of SLOT_KINDS ("size" / "stride": the tensor's ``dim``-th; "offset": its
    storage offset; "int": the input itself, a dynamic int; "float": a float input), ``dim`` 0 unless a size or
    stride."""

    input: int
    kind: str
    dim: int = 0


@dataclasses.dataclass(frozen=True)
class InputMask:
    """Per graph input: bit masks of the dimensions whose sizes / strides TENSOR_MATCH must not check (they are
    symbolic; the SHAPE_ENV guard checks them). Zero for an input that is not a tensor."""

    sizes: int = 0
    strides: int = 0


@dataclasses.dataclass(frozen=True)
class GuardSpec:
    """What TraceShapes.guard_spec hands the C++ side, read by field name in one place (hook/shape_guard_spec.cpp:
    read_guard_spec, which checks every field): ``slots`` (SlotSpec) read from the frame; ``programs`` that must
    all hold on the slots' values; ``fallback`` checking what could not be lowered (or None); ``texts``, the
    guards as ShapeEnv prints them; ``masks`` (InputMask), one per input."""

    slots: list
    programs: list
    fallback: object
    texts: list
    masks: list


class TraceShapes:
    """The ShapeEnv and fake mode of one trace of ``code``; the C++ tracer asks it for the fake example of each
    tensor input (``fake``), the symbol of each dynamic int input (``symint``), and after the trace for the guards
    (``guard_spec``)."""

    def __init__(self, code, cb_dynamic):
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        self.code = code
        self.cb_dynamic = cb_dynamic
        self.shape_env = ShapeEnv(allow_scalar_outputs=config.capture_scalar_outputs,
                                  allow_dynamic_output_shape_ops=config.capture_dynamic_output_shape_ops)
        self.fake_mode = FakeTensorMode(shape_env=self.shape_env, allow_non_fake_inputs=True)
        self._marked = []  # (source name, dim, its size on the fake) for each mark_dynamic dimension
        self._floats = {}  # id(fake) -> (fake, symbol) of each float input passed as a 0-d tensor (symfloat)

    def fake(self, t, name):
        """The fake example of tensor input ``name`` (its dynamic dimensions symbolic)."""
        from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

        kinds = _dims_for(self.code, self.cb_dynamic, name, t)
        table = {"static": DimDynamic.STATIC, "duck": DimDynamic.DUCK, "auto": DimDynamic.DYNAMIC,
                 "dynamic": DimDynamic.DYNAMIC, "weak": DimDynamic.DYNAMIC}
        ctx = StatelessSymbolicContext(dynamic_sizes=[table[k] for k in kinds])
        ranges = getattr(t, "_cdynamo_dynamic_range", None) or {}
        for d, (lo, hi) in ranges.items():
            size = t.shape[d]
            if (lo is not None and size < lo) or (hi is not None and size > hi):
                raise _constraint_error(f"{name}.size()[{d}] = {size} is not in range [{lo}, {hi}] given to "
                                        f"mark_dynamic")
        # A 0-d CPU int / float64 tensor with a source gets a backed symbol for its value (its item() memo), which
        # aot_autograd's tensorify pass then rejects (TensorifyScalarRestartAnalysis, a restart that only
        # torch._dynamo handles): it has no sizes to make symbolic, so it goes without one (fuzz seed 232).
        source = _Source(name) if t.dim() else None
        fake = self.fake_mode.from_tensor(t, symbolic_context=ctx if t.dim() else None, source=source)
        for d, (lo, hi) in ranges.items():
            s = fake.shape[d]
            if isinstance(s, torch.SymInt):
                self._constrain(s, lo, hi)
        self._marked.extend((name, d, fake.shape[d]) for d, k in enumerate(kinds) if k == "dynamic")
        return fake

    def _constrain(self, s, lo, hi):
        from torch.fx.experimental.symbolic_shapes import ValueRanges
        import sympy

        sym = s.node.expr
        if not isinstance(sym, sympy.Symbol):
            return
        vr = self.shape_env.var_to_range[sym]
        lower = vr.lower if lo is None else max(vr.lower, lo)
        upper = vr.upper if hi is None else min(vr.upper, hi)
        self.shape_env.var_to_range[sym] = ValueRanges(lower, upper)

    def _check_marked(self):
        """mark_dynamic dimensions the trace made static (a branch on `x.shape[0] == 4`, a view needing one size)
        raise ConstraintViolationError, as under torch._dynamo."""
        import sympy

        for name, d, s in self._marked:
            if not isinstance(s, torch.SymInt):
                raise _constraint_error(f"{name}.size()[{d}] was marked dynamic but is {s} (sizes 0 and 1 are "
                                        f"specialised)")
            sym = s.node._expr
            value = self.shape_env.replacements.get(sym) if isinstance(sym, sympy.Symbol) else None
            vr = self.shape_env.var_to_range.get(sym) if isinstance(sym, sympy.Symbol) else None
            if isinstance(value, sympy.Integer) or (vr is not None and vr.lower == vr.upper):
                fixed = value if value is not None else vr.lower
                raise _constraint_error(f"{name}.size()[{d}] was marked dynamic, but the traced code specialised it "
                                        f"to the constant {fixed}; remove mark_dynamic or the code that needs a "
                                        f"static size")

    def _scalar_cb_dynamic(self, automatic_only):
        # automatic_only (an object's float attribute): dynamic once it changed, also under compile(dynamic=True).
        return None if automatic_only and self.cb_dynamic is True else self.cb_dynamic

    def symint(self, value, name, automatic_only=False):
        """A SymInt for dynamic int input ``name`` (0 and 1 stay constants, as in torch._dynamo), or the int."""
        from torch.fx.experimental.symbolic_shapes import DimDynamic

        if not _scalar_dynamic(self.code, self._scalar_cb_dynamic(automatic_only), name, value):
            return value
        return self.shape_env.create_unspecified_symint_and_symbol(value, _Source(name), DimDynamic.DYNAMIC)

    def symfloat(self, value, name, automatic_only=False):
        """For dynamic float input ``name``, as torch._dynamo passes one (``specialize_float=False``): a pair of the
        graph input, a 0-d float64 fake tensor (the call hands the graph ``torch.tensor(value)``, see
        ``float_input_positions``), and its ``item()``, a backed SymFloat whose source is ``name``: a branch on it is
        a guard on the input (``L['t'] <= 0.5``), not a graph break. The float itself while it is static, or nan
        (specialised, as torch._dynamo does: a symbol's guards cannot hold for nan). ``automatic_only``: dynamic only
        once it changed between compiles, also under ``compile(dynamic=True)`` (an object's float attribute)."""
        if not _scalar_dynamic(self.code, self._scalar_cb_dynamic(automatic_only), name, value) or math.isnan(value):
            return value
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():
            real = torch.tensor(value, dtype=torch.float64)
        # A 0-d CPU float64 tensor with a source gets a backed symbol for its value (fake tensors' item() memo).
        fake = self.fake_mode.from_tensor(real, source=_Source(name))
        sym = fake.item()
        if not isinstance(sym, torch.SymFloat):
            return value
        self._floats[id(fake)] = (fake, sym.node.expr)
        fake._cdynamo_float_input = True  # the call passes the float as a tensor (float_input_positions)
        return fake, sym

    def random_input(self, dtype):
        """A graph input of a traced ``random`` call (interp/random_calls.cpp): its fake 0-d tensor of ``dtype`` and the
        unbacked symbol of its item() (a fresh value on every call: a branch on it cannot be guarded)."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():
            real = torch.zeros((), dtype=dtype)
        fake = self.fake_mode.from_tensor(real)
        sym = self.unbacked_scalar(fake)
        fake.item_memo = sym  # a backend tracing the graph in this fake mode gets the same symbol from item()
        self.fake_mode.allow_scalar_outputs = True  # and a backend's own fake copy of the input an unbacked one
        return fake, sym

    def unbacked_scalar(self, t):
        """The example of ``t.item()``: an unbacked SymFloat / SymInt / SymBool by ``t``'s dtype. The symbol is bound
        to the graph node that makes it (the item() call), so it is no longer pending in the ShapeEnv (a backend
        tracing the graph again in this fake mode would find it unaccounted for)."""
        if t.dtype.is_complex:
            raise NotImplementedError("Tensor.item() of a complex tensor is not captured")
        if t.dtype.is_floating_point:
            s = self.shape_env.create_unbacked_symfloat()
        elif t.dtype is torch.bool:
            s = self.shape_env.create_unbacked_symbool()
        else:
            s = self.shape_env.create_unbacked_symint()
        self.shape_env.pending_fresh_unbacked_symbols.clear()
        return s

    def enter(self):
        """Shape propagation of one op: under the fake mode and torch's Python dispatcher, as torch._dynamo
        propagates (the Python decompositions and meta functions keep symbolic sizes symbolic where some C++ meta
        kernels specialise them: torch 2.11's matmul guards its batch size to a constant otherwise)."""
        from torch._dispatch.python import enable_python_dispatcher

        self._dispatcher = enable_python_dispatcher()
        self._dispatcher.__enter__()
        return self.fake_mode.__enter__()

    def exit(self):
        try:
            self.fake_mode.__exit__(None, None, None)
        finally:
            self._dispatcher.__exit__(None, None, None)
        # Unbacked sizes an op made (nonzero's row count) are bound to its graph node; none stays pending (a backend
        # tracing the graph again in this fake mode would find them unaccounted for).
        self.shape_env.pending_fresh_unbacked_symbols.clear()

    def guard_spec(self, inputs):
        """The SHAPE_ENV guard of this trace, over ``inputs``: per graph input (in C++'s order) a (source text,
        example) pair, the example a fake tensor, a SymInt or an int. Returns a GuardSpec (SlotSpec slots, one
        InputMask per input): every program must hold (on the slots' values); `fallback` checks what could not be
        lowered (or None)."""
        from ._shape_lower import lower
        import sympy

        self._check_marked()
        slots, slot_exprs, texts_of_slot = [], [], []
        symbol_slot = {}
        masks = []

        def add_slot(i, kind, dim, value, text):
            # The input's own expression (its symbol), before the ShapeEnv's replacements: the guards speak of
            # the symbols as they were made (s1 == s0 is a guard, not a renaming).
            expr = value.node._expr if isinstance(value, torch.SymInt) else sympy.Integer(value)
            k = len(slots)
            slots.append(SlotSpec(i, kind, dim))
            slot_exprs.append(expr)
            texts_of_slot.append(text)
            if isinstance(expr, sympy.Symbol) and expr not in symbol_slot:
                symbol_slot[expr] = k
            return k

        float_slot = {}  # float symbol -> its slot (a float input: read as a float, checked in Python)
        for i, (name, ex) in enumerate(inputs):
            size_mask = stride_mask = 0
            if isinstance(ex, torch.Tensor) and id(ex) in self._floats and self._floats[id(ex)][0] is ex:
                sym = self._floats[id(ex)][1]
                float_slot[sym] = len(slots)
                slots.append(SlotSpec(i, "float"))
                slot_exprs.append(sym)
                texts_of_slot.append(name)
            elif isinstance(ex, torch.Tensor):
                for d, s in enumerate(ex.shape):
                    if isinstance(s, torch.SymInt):
                        size_mask |= 1 << d
                        add_slot(i, "size", d, s, f"{name}.size()[{d}]")
                for d, s in enumerate(ex.stride()):
                    if isinstance(s, torch.SymInt):
                        stride_mask |= 1 << d
                        add_slot(i, "stride", d, s, f"{name}.stride()[{d}]")
                off = ex.storage_offset()
                if isinstance(off, torch.SymInt):
                    add_slot(i, "offset", 0, off, f"{name}.storage_offset()")
            elif isinstance(ex, torch.SymInt):
                add_slot(i, "int", 0, ex, name)
            masks.append(InputMask(size_mask, stride_mask))

        names = {sym: texts_of_slot[k] for sym, k in list(symbol_slot.items()) + list(float_slot.items())}

        def show(expr):
            return str(expr.xreplace({sym: sympy.Symbol(n) for sym, n in names.items()}))

        exprs, texts, leftover = [], [], []

        def need(expr, text):
            prog = lower(expr, symbol_slot)
            if prog is None:
                leftover.append(expr)
            else:
                exprs.append(prog)
            texts.append(text)

        # Each slot whose value is not the symbol it defines: its value relates to the symbols (duck sizing,
        # strides of a contiguous tensor, a dimension specialised to a constant).
        for k, expr in enumerate(slot_exprs):
            if symbol_slot.get(expr) == k or float_slot.get(expr) == k:
                continue
            prog = lower(expr, symbol_slot)
            text = f"{texts_of_slot[k]} == {show(expr)}"
            if prog is None:
                leftover.append(("slot", k, expr))
            else:
                exprs.append(("eq", ("slot", k), prog))
            texts.append(text)
        # Each symbol's range (2 <= s0 after 0/1 specialisation; mark_dynamic's min / max).
        for sym, k in symbol_slot.items():
            vr = self.shape_env.var_to_range.get(sym)
            if vr is None:
                continue
            lo, hi = vr.lower, vr.upper
            if isinstance(lo, sympy.Integer) and int(lo) > -(2 ** 62):
                exprs.append(("le", ("int", int(lo)), ("slot", k)))
                texts.append(f"{int(lo)} <= {texts_of_slot[k]}")
            if isinstance(hi, sympy.Integer) and int(hi) < 2 ** 62:
                exprs.append(("le", ("slot", k), ("int", int(hi))))
                texts.append(f"{texts_of_slot[k]} <= {int(hi)}")
        # What the trace decided about the symbols (branches, broadcasting, specialisations).
        float_exprs, float_texts = [], []
        for g in self.shape_env.guards:
            expr = g.expr
            if expr is sympy.true:
                continue
            if float_slot and any(s in float_slot for s in expr.free_symbols):
                # About a float input (a branch on it, a specialisation): checked in Python on its value.
                if all(s in float_slot or s in symbol_slot for s in expr.free_symbols):
                    float_exprs.append(expr)
                    float_texts.append(show(expr))
                continue
            if any(s not in symbol_slot for s in expr.free_symbols):
                # About a value computed from tensor data (.item()): not an input's property, nothing to check
                # before the call (torch._dynamo makes it a run-time assert in the graph).
                continue
            need(expr, show(expr))

        fallback = None
        if leftover or float_slot:
            # torch._dynamo's implicit guard on a float input: not nan (a symbol's relations cannot hold for nan).
            float_texts += [f"not math.isnan({texts_of_slot[k]})" for k in float_slot.values()]
            fallback = _make_fallback(leftover, symbol_slot, float_exprs, {**symbol_slot, **float_slot},
                                      list(float_slot.values()))
            texts += float_texts
        return GuardSpec(slots, exprs, fallback, texts, masks)


def _constraint_error(msg):
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

    return ConstraintViolationError(msg)


def is_user_error(exc):
    """Errors of the user's request that a compile reports to the caller instead of running the frame as Python."""
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

    return isinstance(exc, ConstraintViolationError)


def _no_capture(fn):
    """``fn`` run with capture off: a guard's fallback runs sympy inside the frame hook, whose frames must not be
    compiled."""
    from . import _core

    return _core.no_capture(fn)


def _make_fallback(leftover, symbol_slot, float_exprs=(), all_slots=None, float_slots=()):
    """A check of the expressions ``lower`` could not turn into programs, by sympy substitution (slow, rare), and of
    the relations on float inputs (``float_exprs`` over the symbols of ``all_slots``; ``float_slots`` must not be
    nan), by a Python function printed from them (one call, no sympy)."""
    import sympy

    float_check = _float_check(float_exprs, all_slots or {}, float_slots) if float_slots or float_exprs else None

    @_no_capture
    def check(values):
        if float_check is not None and not float_check(values):
            return False
        if not leftover:
            return True
        env = {sym: sympy.Integer(values[k]) for sym, k in symbol_slot.items()}
        for item in leftover:
            if isinstance(item, tuple):
                _, k, expr = item
                if sympy.Integer(values[k]) != expr.xreplace(env):
                    return False
            elif not bool(item.xreplace(env)):
                return False
        return True

    return check


def _float_check(exprs, slot_of, float_slots):
    """A Python function of the slot values that is true when every one of ``exprs`` holds and no slot of
    ``float_slots`` is nan; printed as torch._dynamo prints its shape guards (floats with 17 digits, exact)."""
    import sympy
    from torch.utils._sympy.printers import PythonPrinter

    rename = {sym: sympy.Symbol(f"_v[{k}]") for sym, k in slot_of.items()}
    printer = PythonPrinter()
    terms = [f"({printer.doprint(e.xreplace(rename))})" for e in exprs]
    terms += [f"not _isnan(_v[{k}])" for k in float_slots]
    src = "def _check(_v):\n    return " + " and ".join(terms or ["True"]) + "\n"
    scope = {"math": math, "torch": torch, "_isnan": math.isnan}
    exec(compile(src, "<cdynamo float guard>", "exec"), scope)
    return scope["_check"]
