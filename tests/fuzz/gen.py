# gen.py — owns the seeded program generator of the differential fuzzer: generate(seed) -> Program (source of f + helpers).
"""Seeded, deterministic generator of small Python/torch programs for differential testing.

``generate(seed)`` returns a :class:`Program` whose ``source`` defines module-level helpers, the globals
``G`` / ``GL`` and a function ``f`` taking some of the arguments named in ``Program.args`` (see
``ARG_KINDS``). The runner (run.py) builds the inputs for those names.

Typing discipline (so that most programs run to the end instead of dying on the first shape error):
every variable has a kind, and expressions are generated per kind:

  T  tensor of the "main" shape (a, b) (a != b, both >= 2) and the input float dtype
  S  0-d tensor                      V  1-d tensor of data-dependent length
  I  Python int                      F  Python float
  L  list of T                       D  dict str -> T that always holds key "a"
  Z  set of ints                     P  the leaf input ``p`` (requires_grad), only read

Deliberately failing operations (shape mismatches, bad indexes, raise) are emitted on purpose, mostly
inside try blocks, sometimes under a condition at top level (the exception must propagate identically).
"""
import random

# The arguments f may take, with their kinds (the runner builds them by name).
ARG_KINDS = {"x": "T", "y": "T", "n": "I", "flag": "B", "lst": "L", "d": "D", "obj": "O", "p": "P"}

# Chance that a tensor expression is a custom autograd.Function applied to smaller ones.
AUTOGRAD_T_CHANCE = 0.05

HELPERS = {
    "h_add": '''
def h_add(a, b):
    return a * 0.5 + b
''',
    "h_brk": '''
def h_brk(a):
    print("h_brk", tuple(a.shape))
    return a + 1
''',
    "h_mut": '''
def h_mut(lst, t):
    lst.append(t * 2)
    return len(lst)
''',
    "h_va": '''
def h_va(*args, **kwargs):
    out = args[0]
    for a in args[1:]:
        out = out + a
    return out * kwargs.get("scale", 1.0)
''',
    "h_kw": '''
def h_kw(a, *, scale=1.0, shift=0):
    return a * scale + shift
''',
    "h_rec": '''
def h_rec(t, k):
    if k <= 0:
        return t
    return h_rec(t * 0.5 + 1, k - 1)
''',
    "h_gen": '''
def h_gen(t, k):
    for i in range(k):
        yield t * (i + 1)
''',
    "h_dd": '''
def h_dd(t):
    if t.sum() > 0:
        return t - 1
    return t + 1
''',
    "h_glob": '''
def h_glob(t):
    global G
    G = G + 1
    return t * (G % 3)
''',
    "h_inplace": '''
def h_inplace(t):
    t.mul_(0.5)
    return t
''',
    "h_item": '''
def h_item(t):
    return t * (t.sum().item() % 1.0)
''',
    "h_np": '''
def h_np(t):
    return torch.from_numpy(np.cos(t.numpy()))
''',
    "h_try": '''
def h_try(t):
    try:
        return torch.cat([t, t.t()])
    except RuntimeError:
        return t * 2
    finally:
        GL.append(1)
''',
    "h_raise": '''
def h_raise(t, k):
    if k > 2:
        raise ValueError("h_raise: k too big")
    return t + k
''',
    "h_pair": '''
def h_pair(a, b):
    return b, a
''',
    "h_tuple_ret": '''
def h_tuple_ret(t):
    return t.max(dim=0)
''',
    "h_default": '''
def h_default(t, acc=[]):
    acc.append(len(acc))
    return t * len(acc)
''',
    "AFScale": '''
class AFScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, k):
        ctx.save_for_backward(t)
        ctx.k = k
        return t.clamp(min=-1.0, max=1.0) * k

    @staticmethod
    def backward(ctx, g):
        (t,) = ctx.saved_tensors
        return g * (t.abs() < 1).to(g.dtype) * ctx.k * 3, None
''',
    "AFTwo": '''
class AFTwo(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        mask = (a > b).to(a.dtype)
        ctx.mark_non_differentiable(mask)
        return a * b, mask

    @staticmethod
    def backward(ctx, g, g_mask):
        a, b = ctx.saved_tensors
        return g * b * 2, g * a
''',
    "AFPrint": '''
class AFPrint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        print("af fwd", t.shape[0])
        return t * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2
''',
    "AFGlob": '''
class AFGlob(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return t.sin()

    @staticmethod
    def backward(ctx, g):
        GL.append("bwd")
        return g * 5
''',
    "C": '''
class C:
    k = 0

    def __init__(self, t):
        self.t = t
        self.log = []

    @property
    def double(self):
        return self.t * 2

    def step(self, u):
        C.k += 1
        self.log.append(C.k)
        self.t = self.t + u
        return self.t.sum()
''',
    "D": '''
class D:
    def __init__(self, t):
        self.t = t
        self.log = []

    def step(self, u):
        self.log.append(len(self.log))
        self.t = self.t + u
        return self.t.sum()
''',
    "h_nested_brk": '''
def h_nested_brk(t, lst):
    lst.append(t.sum())
    u = h_inner_brk(t)
    lst.append(u.mean())
    return u * 2
''',
    "h_inner_brk": '''
def h_inner_brk(t):
    t = t + 1
    print("inner", t.shape[0])
    return t.sin()
''',
    "h_alias": '''
def h_alias(a, lst):
    lst.append(a)
    a = a + 1
    return lst[-1]
''',
}


class Program:
    def __init__(self, seed, source, args, star):
        self.seed = seed
        self.source = source
        self.args = args        # names of f's positional arguments (keys of ARG_KINDS)
        self.star = star        # None, "args", "kwargs" or "both": f(..., *rest, **kw)

    def __repr__(self):
        return f"Program(seed={self.seed}, args={self.args}, star={self.star})"


class _Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        # A second stream for constructs added later (custom autograd.Functions): a program that does not
        # pick one is the same program as before they were added, so older seeds still reproduce.
        self.r2 = random.Random(seed ^ 0x5EED)
        self.seed = seed
        self.lines = []
        self.ind = 1
        self.counter = 0
        self.helpers = set()
        self.uses_global = False
        self.env = {k: [] for k in "TSVIFLDZP"}
        self.depth = 0          # nesting of blocks
        self.in_loop = 0
        self.has_obj = False
        self.has_flag = False
        self.budget = 0

    # ------------------------------------------------------------------ utilities
    def fresh(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def emit(self, line):
        self.lines.append("    " * self.ind + line)

    def pick(self, kind):
        vs = self.env[kind]
        return self.r.choice(vs) if vs else None

    def chance(self, p):
        return self.r.random() < p

    def snapshot(self):
        return {k: list(v) for k, v in self.env.items()}

    def restore(self, snap):
        self.env = snap

    def fl(self):
        return self.r.choice(["0.5", "2.0", "-1.0", "0.25", "1.5", "3.0", "-0.5"])

    def small(self):
        return str(self.r.randint(0, 3))

    # ------------------------------------------------------------------ expressions
    def tvar(self):
        return self.pick("T")

    def autograd_T(self, d):
        """A custom torch.autograd.Function applied to tensor expressions (drawn from the second stream)."""
        a = lambda: self.T(d - 1)
        name, fn = self.r2.choice([
            ("AFScale", lambda: f"AFScale.apply({a()}, {self.fl()})"),
            ("AFTwo", lambda: f"AFTwo.apply({a()}, {a()})[{self.r2.randint(0, 1)}]"),
            ("AFPrint", lambda: f"AFPrint.apply({a()})"),
            ("AFGlob", lambda: f"AFGlob.apply({a()})"),
        ])
        self.helpers.add(name)
        self.uses_global = self.uses_global or name == "AFGlob"
        return fn()

    def T(self, d=2):
        r = self.r
        if d > 0 and self.r2.random() < AUTOGRAD_T_CHANCE:
            return self.autograd_T(d)
        if d <= 0 or r.random() < 0.25:
            return self.tvar()
        a = lambda: self.T(d - 1)
        v = self.tvar()
        choices = [
            (6, lambda: f"torch.sin({a()})"), (3, lambda: f"{a()}.cos()"), (4, lambda: f"torch.tanh({a()})"),
            (3, lambda: f"{a()}.abs()"), (3, lambda: f"torch.relu({a()})"), (3, lambda: f"{a()}.sigmoid()"),
            (2, lambda: f"(-{a()})"), (3, lambda: f"torch.clamp({a()}, -2.0, 2.0)"),
            (2, lambda: f"{a()}.clamp(min=-1.0)"), (5, lambda: f"({a()} * {self.fl()})"),
            (4, lambda: f"({a()} + {self.I(d - 1)})"), (2, lambda: f"({a()} - {self.fl()})"),
            (8, lambda: f"({a()} + {a()})"), (5, lambda: f"({a()} - {a()})"), (6, lambda: f"({a()} * {a()})"),
            (3, lambda: f"({a()} / ({a()}.abs() + 1))"), (2, lambda: f"torch.maximum({a()}, {a()})"),
            (2, lambda: f"torch.add({a()}, {a()}, alpha=2)"),
            (3, lambda: f"torch.where({v} > 0, {v}, {a()})"),
            (4, lambda: f"({a()} * {self.S(d - 1)})"), (2, lambda: f"({a()} + {self.S(d - 1)})"),
            (2, lambda: f"({a()} * {self.F(d - 1)})"),
            # views / reshapes
            (2, lambda: f"{v}.t().t()"), (2, lambda: f"{v}.reshape(-1).reshape({v}.shape)"),
            (2, lambda: f"{v}.transpose(0, 1).contiguous().t()"), (2, lambda: f"{v}.flatten().view_as({v})"),
            (1, lambda: f"{v}.unsqueeze(0).squeeze(0)"), (1, lambda: f"{v}.permute(1, 0).permute(1, 0)"),
            (1, lambda: f"{v}.view({v}.shape[0], -1)"),
            # matmul
            (3, lambda: f"(({a()}) @ {v}.t() @ {v} * 0.1)"),
            (2, lambda: f"(torch.mm({v}, {v}.t()).mm({a()}) / ({v}.shape[1] * 4))"),
            (1, lambda: f"torch.matmul({a()}, torch.eye({v}.shape[1], dtype={v}.dtype))"),
            # slicing / cat / stack
            (2, lambda: f"torch.cat([{v}[:, :1], {v}[:, 1:] * 2], dim=1)"),
            (2, lambda: f"torch.cat([{v}[1:], {v}[:1]], dim=0)"), (2, lambda: f"{v}.flip(0)"),
            (1, lambda: f"{v}.roll(1, 1)"), (2, lambda: f"torch.stack([{a()}, {a()}]).sum(0)"),
            (1, lambda: f"torch.stack([{a()}, {a()}], dim=2).amax(-1)"),
            # reductions broadcast back
            (2, lambda: f"({v} - {v}.mean(dim=0, keepdim=True))"), (2, lambda: f"({v} / ({v}.norm() + 1))"),
            (2, lambda: f"{a()}.softmax(dim=-1)"), (2, lambda: f"{a()}.cumsum(0)"),
            (2, lambda: f"({v} - {v}.max(dim=1, keepdim=True).values)"),
            (2, lambda: f"torch.sort({a()}, dim=1).values"), (2, lambda: f"{a()}.sort(dim=0)[0]"),
            (2, lambda: f"{v}.topk(1, dim=1).values.expand_as({v}).contiguous()"),
            (2, lambda: f"{v}.max(dim=0).indices.to({v}.dtype).expand_as({v}).contiguous()"),
            (1, lambda: f"torch.sort({v}, dim=1, descending=True)[1].to({v}.dtype)"),
            (1, lambda: f"({v}.min(dim=1, keepdim=True)[0] * {v})"),
            (1, lambda: f"({v}.argmax(dim=1, keepdim=True).to({v}.dtype) + {v})"),
            # masks / indexing
            (2, lambda: f"{v}.masked_fill({v} > 0, 0.5)"), (2, lambda: f"({a()} * ({v} > 0))"),
            (2, lambda: f"torch.where({v} < 0, 0.0, {v})"),
            (1, lambda: f"{v}.index_select(0, torch.arange({v}.shape[0] - 1, -1, -1))"),
            (1, lambda: f"{v}[torch.arange({v}.shape[0]).flip(0)]"),
            (1, lambda: f"{v}[[1, 0] + list(range(2, {v}.shape[0]))]"),
            # dtype casts
            (2, lambda: f"{a()}.double().to({v}.dtype)"), (1, lambda: f"{a()}.to(torch.float16).to({v}.dtype)"),
            (2, lambda: f"({a()} * 4).long().to({v}.dtype)"), (2, lambda: f"({a()} > 0).to({v}.dtype)"),
            (1, lambda: f"{a()}.int().float().to({v}.dtype)"),
            # numpy round trips
            (1, lambda: f"torch.from_numpy({v}.numpy() * 2.0)"),
            (1, lambda: f"torch.tensor({v}.tolist(), dtype={v}.dtype)"),
            (1, lambda: f"torch.as_tensor({v}.numpy().copy())"),
            # helpers
            (2, lambda: self.helper_T(d)),
            # Python-side shape arithmetic, new tensors
            (1, lambda: f"({a()} + torch.ones({v}.shape[0], {v}.size(1), dtype={v}.dtype))"),
            (1, lambda: f"({a()} * {v}.new_full({v}.shape, {self.fl()}))"),
            (1, lambda: f"({a()} + {v}.numel() / ({v}.shape[0] * {v}.shape[1]))"),
            (1, lambda: f"({a()} * len({v}.stride()))"),
        ]
        if self.env["P"]:
            choices += [(4, lambda: f"({a()} * p)"), (2, lambda: f"(p.sin() + {a()})"),
                        (1, lambda: f"({a()} + p.detach())")]
        return self.weighted(choices)()

    def weighted(self, choices):
        tot = sum(w for w, _ in choices)
        x = self.r.uniform(0, tot)
        for w, c in choices:
            x -= w
            if x <= 0:
                return c
        return choices[-1][1]

    def helper_T(self, d):
        a = lambda: self.T(d - 1)
        v = self.tvar()
        opts = [
            ("h_add", lambda: f"h_add({a()}, {a()})"),
            ("h_brk", lambda: f"h_brk({a()})"),
            ("h_va", lambda: f"h_va({a()}, {a()}, scale={self.fl()})"),
            ("h_va", lambda: f"h_va(*[{a()}, {a()}], **{{'scale': {self.fl()}}})"),
            ("h_va", lambda: f"h_va({a()})"),
            ("h_kw", lambda: f"h_kw({a()}, scale={self.fl()}, shift={self.small()})"),
            ("h_rec", lambda: f"h_rec({a()}, {self.r.randint(0, 3)})"),
            ("h_gen", lambda: f"sum(h_gen({a()}, {self.r.randint(1, 3)}))"),
            ("h_dd", lambda: f"h_dd({a()})"),
            ("h_glob", lambda: f"h_glob({a()})"),
            ("h_item", lambda: f"h_item({a()})"),
            ("h_np", lambda: f"h_np({v})"),
            ("h_try", lambda: f"h_try({a()})"),
            (None, lambda: f"(lambda t: t * 2 + 1)({a()})"),
        ]
        name, fn = self.r.choice(opts)
        if name:
            self.helpers.add(name)
        if name in ("h_glob", "h_try"):
            self.uses_global = True
        return fn()

    def S(self, d=1):
        v = self.tvar()
        a = lambda: self.T(max(d - 1, 0))
        choices = [
            (4, lambda: f"{a()}.sum()"), (3, lambda: f"{a()}.mean()"), (2, lambda: f"{a()}.max()"),
            (2, lambda: f"{a()}.abs().amax()"), (2, lambda: f"{v}[0, 0]"), (1, lambda: f"{v}[-1, 1]"),
            (2, lambda: f"{a()}.norm()"), (2, lambda: f"({a()} > 0).sum()"), (1, lambda: f"{a()}.std()"),
            (1, lambda: f"(torch.dot({v}.flatten(), {v}.flatten()) * 0.01)"),
        ]
        if self.env["V"]:
            choices.append((2, lambda: f"{self.pick('V')}.sum()"))
        return self.weighted(choices)()

    def I(self, d=1):
        r = self.r
        v = self.tvar()
        choices = [
            (4, lambda: self.small()), (2, lambda: f"{v}.shape[0]"), (2, lambda: f"{v}.size(1)"),
            (1, lambda: f"len({v})"), (1, lambda: f"{v}.dim()"), (1, lambda: f"{v}.numel()"),
        ]
        if self.env["I"]:
            choices.append((6, lambda: self.pick("I")))
        if d > 0:
            choices += [(2, lambda: f"({self.I(d - 1)} + {self.I(d - 1)})"), (1, lambda: f"({self.I(d - 1)} * 2)"),
                        (1, lambda: f"({self.I(d - 1)} % 3)"),
                        (1, lambda: f"int(({v} > 0).sum())"), (1, lambda: f"({v} > 0).sum().item()")]
        if self.env["L"]:
            choices.append((2, lambda: f"len({self.pick('L')})"))
        if self.env["V"]:
            choices.append((1, lambda: f"{self.pick('V')}.shape[0]"))
        if self.env["Z"]:
            choices.append((1, lambda: f"len({self.pick('Z')})"))
        if self.has_obj:
            choices.append((1, lambda: "obj.count"))
        return self.weighted(choices)()

    def F(self, d=1):
        choices = [(2, lambda: self.fl()), (3, lambda: f"{self.S(d)}.item()"), (2, lambda: f"float({self.S(d)})"),
                   (1, lambda: f"sum({self.tvar()}[0].tolist())"), (1, lambda: f"round({self.S(d)}.item(), 2)")]
        if self.env["F"]:
            choices.append((4, lambda: self.pick("F")))
        return self.weighted(choices)()

    def cond(self, data_dep=None):
        r = self.r
        if data_dep is None:
            data_dep = r.random() < 0.4
        v = self.tvar()
        if data_dep:
            return self.weighted([
                (4, lambda: f"{self.S()} > 0"), (2, lambda: f"bool(({self.T(1)} > 0).any())"),
                (2, lambda: f"{self.S()}.item() > 0.5"), (2, lambda: f"{v}[0, 0] < 0"),
                (1, lambda: f"torch.all({self.T(1)} < 3)"),
                (1, lambda: f"{self.pick('F')} > 0" if self.env["F"] else f"{v}.sum() < 1"),
            ])()
        choices = [(3, lambda: f"{self.I()} > {self.r.randint(0, 4)}"), (2, lambda: f"{v}.shape[0] > 3"),
                   (1, lambda: f"{v}.dtype == torch.float32"), (1, lambda: f"{v}.dim() == 2"),
                   (1, lambda: f"isinstance({v}, torch.Tensor)"), (2, lambda: f"{v} is {self.tvar()}"),
                   (1, lambda: f"{self.I()} == {self.I()}"), (1, lambda: f"{v}.is_contiguous()"),
                   (1, lambda: f"{v}.t().is_contiguous()"), (1, lambda: f"(k_w := {self.I()}) > 2"),
                   (1, lambda: f"{v}.requires_grad")]
        if self.has_flag:
            choices.append((3, lambda: "flag"))
            choices.append((1, lambda: "not flag"))
        if self.env["D"]:
            choices.append((1, lambda: f"'b' in {self.pick('D')}"))
        if self.env["L"]:
            choices.append((1, lambda: f"len({self.pick('L')}) > 2"))
        if self.env["Z"]:
            choices.append((1, lambda: f"{self.small()} in {self.pick('Z')}"))
        if self.has_obj:
            choices.append((1, lambda: "obj.count > 1"))
        return self.weighted(choices)()

    # ------------------------------------------------------------------ statements
    def new_T(self, expr):
        name = self.fresh("t")
        self.emit(f"{name} = {expr}")
        self.env["T"].append(name)
        return name

    def block(self, n=None, loop=False):
        """Emits an indented block of statements; variables made inside stay local to the block."""
        snap = self.snapshot()
        self.ind += 1
        self.depth += 1
        if loop:
            self.in_loop += 1
        n = n if n is not None else self.r.randint(1, 3)
        start = len(self.lines)
        for _ in range(n):
            self.stmt()
        if len(self.lines) == start:
            self.emit("pass")
        if loop:
            self.in_loop -= 1
        self.depth -= 1
        self.ind -= 1
        self.restore(snap)

    def stmt(self):
        self.budget -= 1
        simple = [
            (14, self.s_assign), (8, self.s_reassign), (6, self.s_inplace), (5, self.s_print),
            (3, self.s_alias), (2, self.s_tuple_assign), (3, self.s_list), (2, self.s_dict), (1, self.s_set),
            (2, self.s_int), (2, self.s_float), (2, self.s_return_types), (2, self.s_global), (2, self.s_argmut),
            (1, self.s_numpy), (1, self.s_V), (2, self.s_fail), (1, self.s_helper_stmt),
        ]
        if self.has_obj:
            simple.append((2, self.s_obj))
        simple += [(2, self.s_misc), (1, self.s_class), (1, self.s_unbind), (1, self.s_nested_containers),
                   (2, self.s_side_effects), (1, self.s_del), (2, self.s_aug_container), (2, self.s_pylist),
                   (1, self.s_pyarith), (1, self.s_format)]
        if self.env["P"]:
            simple.append((1, self.s_backward))
        compound = [
            (6, self.s_if), (4, self.s_for), (2, self.s_while), (2, self.s_try), (2, self.s_nograd),
            (2, self.s_closure), (2, self.s_comprehension), (2, self.s_alias_break),
        ]
        if self.in_loop:
            simple.append((3, self.s_break_continue))
        if self.depth >= 1:
            simple.append((1, self.s_early_return))
        if self.depth < 3 and self.budget > 0:
            self.weighted(simple + compound)()
        else:
            self.weighted(simple)()

    def s_side_effects(self):
        """Several side effects, then (usually) a graph break, then reads of what was changed."""
        r = self.r
        for _ in range(r.randint(1, 3)):
            c = r.random()
            if c < 0.25 and self.env["L"]:
                self.emit(f"{self.pick('L')}.append({self.T(1)})")
            elif c < 0.45:
                self.uses_global = True
                self.emit(r.choice([f"G = G + {self.I(0)}", f"GL.append({self.tvar()})"]))
            elif c < 0.6 and self.has_obj:
                self.emit(r.choice(["obj.count += 1", f"obj.w = {self.T(1)}", "obj.hist.append(len(obj.hist))"]))
            elif c < 0.75 and self.env["D"]:
                self.emit(f"{self.pick('D')}['s{self.counter}'] = {self.tvar()}")
            else:
                self.emit(f"{self.tvar()}.add_({self.fl()})")
        if r.random() < 0.7:
            self.emit(r.choice(["print('se', G, len(GL))", f"_ = {self.tvar()}.sum().item()",
                                f"print('se', {self.tvar()}.sum())", "print('se')"]))
            self.uses_global = True
        if r.random() < 0.3:
            self.emit(self.failing() if r.random() < 0.5 else f"if {self.cond()}:\n{'    ' * (self.ind + 1)}{self.failing()}")
        self.new_T(r.choice([f"{self.tvar()} + G", f"{self.tvar()} * len(GL)", f"{self.tvar()} + 1"]))
        self.uses_global = True

    def s_misc(self):
        r = self.r
        v, u = self.tvar(), self.tvar()
        opts = [
            lambda: (self.helpers.add("h_default"), self.new_T(f"h_default({v})")),
            lambda: (self.helpers.update(["h_nested_brk", "h_inner_brk"]),
                     self.new_T(f"h_nested_brk({v}, {self.pick('L') or '[]'})")),
            lambda: (self.emit(f"sa{self.counter}, sb{self.counter} = {v}.shape"),
                     self.new_T(f"{u} * sa{self.counter} - sb{self.counter}")),
            lambda: self.new_T(f"{v} * ({v}.shape == {u}.shape) + ({v}.size() == torch.Size([2, 3]))"),
            lambda: self.new_T(f"{v}.mT.mT + {v}.T.T"),
            lambda: self.new_T(f"torch.max({v}, {u}) + torch.max({v}, 1, True)[0]"),
            lambda: self.new_T(f"{v} + abs({v}.sum()) * 0.01"),
            lambda: self.new_T(f"{v} * int({v}[0, 0] > 0) + float({v}.mean())"),
            lambda: self.new_T(f"torch.einsum('ij,kj->ik', {v}, {u}) @ {v} * 0.1"),
            lambda: self.new_T(f"{v} + len(torch.where({v} > 0)[0])"),
            lambda: self.new_T(f"{v} + torch.unique({v}.round()).numel()"),
            lambda: self.new_T(f"{v} + {v}.nonzero().shape[0]"),
            lambda: self.new_T(f"{v} * (0 < {self.I()} < 3)"),
            lambda: self.new_T(f"{v} + sum(range(int({v}.abs().sum().item()) % 4))"),
            lambda: self.new_T(f"{v} + dict(zip('ab', [{v}, {u}]))['b']"),
            lambda: self.new_T(f"{v} * list(enumerate([{u}], start=1))[0][0]"),
            lambda: (self.emit(f"print('pr', *[{v}.shape[0], {u}.dim()], sep='|', end='!\\n')")),
            lambda: (self.emit(f"print('pr', str({v}.shape), repr({v}.dtype))")),
            lambda: (self.emit(f"ix{self.counter} = torch.tensor([0, 0, 1])"),
                     self.emit(f"{v}[ix{self.counter}] += 1")),
            lambda: self.new_T(f"{v}.index_add(0, torch.tensor([0, 0]), {v}[:2] * 2)"),
            lambda: self.new_T(f"{v}.scatter(1, {v}.argsort(1), {u})"),
            lambda: self.new_T(f"torch.gather({v}, 1, {v}.argsort(1))"),
        ]
        r.choice(opts)()

    def s_class(self):
        r = self.r
        cls = "C" if r.random() < 0.4 else "D"
        self.helpers.add(cls)
        v = self.tvar()
        c = self.fresh("c")
        self.emit(f"{c} = {cls}({v})")
        for _ in range(r.randint(1, 2)):
            self.emit(f"{self.fresh('q')} = {c}.step({self.T(1)})")
        if cls == "C":
            self.new_T(r.choice([f"{c}.double", f"{c}.t + len({c}.log)", f"{c}.t * C.k"]))
        else:
            self.new_T(r.choice([f"{c}.t * 1", f"{c}.t + len({c}.log)"]))
        if self.has_obj and r.random() < 0.3:
            self.emit(f"obj.c = {c}")

    def s_unbind(self):
        r = self.r
        v = self.tvar()
        name = self.fresh("l")
        self.emit(f"{name} = list({v}.{r.choice(['unbind(0)', 'split(1)', 'chunk(2, dim=1)', 'split(1, dim=1)'])})")
        if r.random() < 0.5:
            self.emit(f"{name}[0].{r.choice(['add_(1)', 'mul_(2)', 'zero_()'])}")
        self.new_T(f"{v} + {name}[0].sum() * len({name})")

    def s_nested_containers(self):
        r = self.r
        v = self.tvar()
        if self.env["L"] and r.random() < 0.5:
            lv = self.pick("L")
            al = self.fresh("al")
            self.emit(f"{al} = {lv}")
            self.emit(f"{al}.append({v})")
            self.new_T(f"{v} * len({lv})")
            return
        if self.env["D"] and r.random() < 0.5:
            dv = self.pick("D")
            nd = self.fresh("nest")
            self.emit(f"{nd} = [{dv}, [{v}, {v}]]")
            self.emit(f"{nd}[0]['n'] = {nd}[1][0]")
            self.emit(f"{nd}[1][1].add_(1)")
            self.new_T(f"{dv}['n'] + {nd}[1][0]")
            return
        pl = self.fresh("pl")
        self.emit(f"{pl} = [{v}, {v}]")
        self.emit(f"{pl}[0].mul_(2)")
        self.new_T(f"{pl}[1] + {pl}[0]")

    def s_del(self):
        ts = [t for t in self.env["T"] if t not in ("x", "y")]
        if len(ts) < 2:
            return self.s_assign()
        v = self.r.choice(ts)
        self.emit(f"del {v}")
        self.env["T"].remove(v)

    def s_aug_container(self):
        r = self.r
        opts = []
        if self.env["L"]:
            lv = self.pick("L")
            opts.append(lambda: self.emit(f"if {lv}: {lv}[0] += {self.T(1)}"))
            opts.append(lambda: self.emit(f"if {lv}: {lv}[-1] *= {self.fl()}"))
        if self.env["D"]:
            dv = self.pick("D")
            opts.append(lambda: self.emit(f"{dv}['a'] += {self.T(1)}"))
            opts.append(lambda: self.emit(f"{dv}['a'] = {dv}['a'] * 2"))
        if self.has_obj:
            opts.append(lambda: self.emit(f"obj.w += {self.T(1)}"))
            opts.append(lambda: self.emit(f"obj.w -= 1"))
        if not opts:
            return self.s_inplace()
        r.choice(opts)()

    def s_pylist(self):
        r = self.r
        lv = self.pick("L")
        if lv is None:
            return self.s_list()
        opts = [
            lambda: self.new_T(f"sorted({lv} + [{self.tvar()}], key=lambda q: q.sum().item())[0]"),
            lambda: self.new_T(f"max([{self.tvar()}] + {lv}, key=lambda q: float(q.mean()))"),
            lambda: self.new_T(f"({lv}[1:] or [{self.tvar()}])[0]"),
            lambda: self.new_T(f"sum(({lv} * 2)[:3], {self.tvar()})"),
            lambda: (self.emit(f"head{self.counter}, *tail{self.counter} = {lv} + [{self.tvar()}]"),
                     self.new_T(f"head{self.counter} + len(tail{self.counter})")),
            lambda: self.new_T(f"{self.tvar()} * ({self.tvar()} in {lv})"),
            lambda: self.new_T(f"{self.tvar()} + sum(1 for q in {lv} if q is {self.tvar()})"),
            lambda: self.new_T(f"list(reversed({lv} + [{self.tvar()}]))[0]"),
            lambda: self.new_T(f"[a + b for a, b in zip({lv}, {lv}[1:] + [{self.tvar()}])][-1] if {lv} else {self.tvar()}"),
            lambda: self.new_T(f"{self.tvar()} + any(q.sum() > 0 for q in {lv})"),
            lambda: self.new_T(f"{self.tvar()} * len(list(map(lambda q: q * 2, {lv})))"),
            lambda: self.emit(f"{lv}.sort(key=lambda q: q.sum().item())"),
        ]
        r.choice(opts)()

    def s_pyarith(self):
        r = self.r
        name = self.fresh("k")
        i1, i2 = self.I(), self.I()
        self.emit(f"{name} = " + r.choice([f"{i1} // 2 + {i2}", f"divmod({i1} + 7, 3)[1]", f"abs(-{i1}) % 4",
                                            f"min({i1}, 3) + max({i2}, 1)", f"int({i1} / 2)", f"-{i1} + 5",
                                            f"(k_w := {i1}) + k_w"]))
        self.env["I"].append(name)

    def s_format(self):
        r = self.r
        v = self.tvar()
        self.emit(r.choice([f"print(f'fmt {{{self.S()}:.3f}}')", f"print('stride', {v}.stride(), {v}.is_contiguous())",
                            f"print('size', {v}.size(), {v}.shape[-1])", f"print('dt', {v}.dtype, {v}.requires_grad)",
                            f"print('{{}} {{}}'.format({self.I()}, {v}.dim()))"]))

    def s_backward(self):
        t = self.tvar()
        self.emit(f"if {t}.requires_grad:")
        self.ind += 1
        self.emit(f"{t}.sum().backward(retain_graph=True)")
        self.emit(r"print('grad', p.grad is not None)")
        self.ind -= 1

    def s_assign(self):
        self.new_T(self.T(self.r.randint(1, 3)))

    def s_reassign(self):
        v = self.tvar()
        self.emit(f"{v} = {self.T(2)}")

    def s_inplace(self):
        v = self.tvar()
        r = self.r
        ops = [
            lambda: f"{v}.add_({self.T(1)})", lambda: f"{v}.mul_({self.fl()})", lambda: f"{v}.clamp_(-1.5, 1.5)",
            lambda: f"{v}.sub_({self.S()} * 1)", lambda: f"{v}[0] = {self.fl()}", lambda: f"{v}[:, 0] += 1",
            lambda: f"{v}[{v} > 1] = 0.0", lambda: f"{v}.copy_({self.T(1)})", lambda: f"{v}.sigmoid_()",
            lambda: f"{v}.t().mul_(2)", lambda: f"{v} += {self.T(1)}", lambda: f"{v} *= {self.fl()}",
            lambda: f"{v}[1:].add_(1)", lambda: f"{v}.masked_fill_({v} < 0, 0.0)",
            lambda: f"{v}.detach().mul_(2)", lambda: f"{v}.view(-1).add_(1)",
        ]
        if r.random() < 0.3:
            w = self.fresh("w")
            if r.random() < 0.6:
                self.emit(f"{w} = {v}[{r.choice(['1:', ':, 1:', '0', ':, 0', '::2', '...', '-1'])}]")
            else:
                self.emit(f"{w} = {v}.{r.choice(['detach()', 'view_as(' + v + ')', 'T', 'unsqueeze(0)', 'reshape(-1)', 'view(-1)', 'narrow(1, 0, 1)', 'diagonal()', 'squeeze()'])}")
            if r.random() < 0.3:
                self.emit(self.r.choice(["print('view')", f"_ = {w}.sum().item()"]))
            self.emit(f"{w}.{r.choice(['add_(1)', 'mul_(-1)', 'zero_()', 'fill_(2.0)'])}")
        else:
            self.emit(r.choice(ops)())

    def s_print(self):
        r = self.r
        v = self.tvar()
        tag = f"'p{self.counter}'"
        self.counter += 1
        opts = [lambda: f"print({tag}, {self.I()}, tuple({v}.shape))", lambda: f"print({tag}, {self.S()})",
                lambda: f"print({tag}, {v})", lambda: f"print(f'{{{self.I()}}}-{{{v}.dtype}}')",
                lambda: f"print({tag}, {self.F()})"]
        if self.env["L"]:
            opts.append(lambda: f"print({tag}, len({self.pick('L')}))")
        if self.env["D"]:
            opts.append(lambda: f"print({tag}, sorted({self.pick('D')}.keys()))")
        self.emit(r.choice(opts)())

    def s_alias(self):
        v = self.tvar()
        name = self.fresh("r")
        self.emit(f"{name} = {v}")
        self.env["T"].append(name)

    def s_alias_break(self):
        # r = x; x = x * 2; <break>; use r  (the alias must keep the old object)
        v = self.tvar()
        name = self.fresh("r")
        self.emit(f"{name} = {v}")
        if self.chance(0.5):
            self.emit(f"{v} = {v} * 2")
        else:
            self.emit(f"{v}.mul_(2)")
        self.emit(self.r.choice([f"print('ab', {self.I(0)})", f"_ = {v}.sum().item()", "print('ab')"]))
        self.new_T(f"{v} + {name}")
        self.env["T"].append(name)

    def s_tuple_assign(self):
        r = self.r
        if r.random() < 0.4 and len(self.env["T"]) >= 2:
            a, b = r.sample(self.env["T"], 2)
            if r.random() < 0.5:
                self.emit(f"{a}, {b} = {b}, {a}")
            else:
                self.helpers.add("h_pair")
                self.emit(f"{a}, {b} = h_pair({a}, {b})")
        else:
            v = self.tvar()
            a, b = self.fresh("a"), self.fresh("b")
            self.emit(f"{a}, {b} = {v}, {r.choice([v, self.T(1)])}")
            self.env["T"] += [a, b]

    def s_list(self):
        r = self.r
        lv = self.pick("L")
        c = r.random()
        if lv is None or c < 0.25:
            name = self.fresh("l")
            items = ", ".join(self.T(1) for _ in range(r.randint(0, 3)))
            self.emit(f"{name} = [{items}]")
            self.env["L"].append(name)
            return
        opts = [
            lambda: self.emit(f"{lv}.append({self.T(1)})"),
            lambda: self.emit(f"{lv}.extend([{self.T(1)}, {self.tvar()}])"),
            lambda: self.emit(f"if {lv}: {lv}.pop()"),
            lambda: self.emit(f"{lv}.insert(0, {self.T(1)})"),
            lambda: self.emit(f"{lv}.reverse()"),
            lambda: self.new_T(f"torch.stack({lv} + [{self.tvar()}]).sum(0)"),
            lambda: self.new_T(f"sum({lv}, {self.tvar()} * 0)"),
            lambda: self.new_T(f"({lv}[-1] if {lv} else {self.tvar()})"),
            lambda: (self.helpers.add("h_va"), self.new_T(f"h_va(*{lv}, {self.tvar()})")),
            lambda: self.emit(f"{lv}[:] = {lv}[::-1]"),
        ]
        if "h_mut" not in self.helpers or r.random() < 0.5:
            opts.append(lambda: (self.helpers.add("h_mut"), self.emit(f"_ = h_mut({lv}, {self.T(1)})")))
        opts.append(lambda: (self.helpers.add("h_alias"), self.new_T(f"h_alias({self.tvar()}, {lv})")))
        r.choice(opts)()

    def s_dict(self):
        r = self.r
        dv = self.pick("D")
        if dv is None or r.random() < 0.25:
            name = self.fresh("m")
            extra = f", 'b': {self.T(1)}" if r.random() < 0.5 else ""
            self.emit(f"{name} = {{'a': {self.T(1)}{extra}}}")
            self.env["D"].append(name)
            return
        opts = [
            lambda: self.emit(f"{dv}['{r.choice('bce')}'] = {self.T(1)}"),
            lambda: self.new_T(f"{dv}.get('{r.choice('bz')}', {self.tvar()})"),
            lambda: self.new_T(f"{dv}.setdefault('a', {self.tvar()})"),
            lambda: self.emit(f"{dv}.update(e={self.T(1)})"),
            lambda: self.emit(f"{dv}.pop('{r.choice('bce')}', None)"),
            lambda: self.new_T(f"{dv}['a'] * len({dv})"),
            lambda: self.new_T(f"sum({dv}.values(), {self.tvar()} * 0)"),
            lambda: self.new_T(f"{dv}[sorted({dv})[-1]] + 1"),
            lambda: self.emit(f"{dv}['a'].{r.choice(['add_(1)', 'mul_(0.5)', 'neg_()'])}"),
        ]
        r.choice(opts)()

    def s_set(self):
        r = self.r
        zv = self.pick("Z")
        if zv is None or r.random() < 0.3:
            name = self.fresh("z")
            self.emit(f"{name} = {{1, 2, {self.I(0)}}}")
            self.env["Z"].append(name)
            return
        opts = [
            lambda: self.emit(f"{zv}.add({self.I()})"), lambda: self.emit(f"{zv}.discard(1)"),
            lambda: self.emit(f"{zv} = {zv} | {{5, {self.I(0)}}}"),
            lambda: self.new_T(f"{self.tvar()} * len({zv})"),
            lambda: self.new_T(f"{self.tvar()} + sum(sorted({zv}))"),
            lambda: self.new_T(f"{self.tvar()} * (3 in {zv})"),
        ]
        r.choice(opts)()

    def s_int(self):
        name = self.fresh("k")
        self.emit(f"{name} = {self.I(2)}")
        self.env["I"].append(name)

    def s_float(self):
        r = self.r
        name = self.fresh("f")
        if r.random() < 0.3:
            vals = self.fresh("vals")
            self.emit(f"{vals} = {self.tvar()}.tolist()")
            self.emit(f"{name} = {vals}[0][{r.randint(0, 1)}] + len({vals})")
        else:
            self.emit(f"{name} = {self.F()}")
        self.env["F"].append(name)

    def s_return_types(self):
        r = self.r
        v = self.tvar()
        n = self.fresh("rt")
        opts = [
            lambda: (self.emit(f"{n} = torch.sort({v}, dim=1)"), self.new_T(f"{n}.values + {n}.indices")),
            lambda: (self.emit(f"{n} = {v}.max(dim=0)"), self.new_T(f"{v} - {n}.values + {n}.indices")),
            lambda: (self.emit(f"{n} = {v}.topk(2, dim=1)"), self.new_T(f"{n}.values.sum(1, keepdim=True) * {v}")),
            lambda: (self.emit(f"vals_{n}, idx_{n} = {v}.min(dim=1)"),
                     self.new_T(f"{v} * vals_{n}.unsqueeze(1) + idx_{n}.unsqueeze(1)")),
            lambda: (self.helpers.add("h_tuple_ret"), self.emit(f"{n} = h_tuple_ret({v})"),
                     self.new_T(f"{v} + {n}[0]")),
            lambda: (self.emit(f"{n} = torch.sort({v}, dim=0, descending=True)"),
                     self.new_T(f"{n}[0] * {n}[1]")),
        ]
        r.choice(opts)()

    def s_global(self):
        self.uses_global = True
        r = self.r
        opts = [lambda: self.emit(f"G = G + {self.I()}"), lambda: self.emit(f"GL.append({self.I()})"),
                lambda: self.emit(f"GL.append({self.T(1)}.sum())"),
                lambda: self.new_T(f"{self.tvar()} * (G % 4)"), lambda: self.new_T(f"{self.tvar()} + len(GL)")]
        r.choice(opts)()

    def s_argmut(self):
        r = self.r
        opts = [lambda: self.emit(f"{self.tvar()}.add_(1)")]
        if "lst" in self.env["L"]:
            opts += [lambda: self.emit(f"lst.append({self.T(1)})"), lambda: self.emit("lst[0].mul_(2)"),
                     lambda: self.emit("lst[-1] = lst[0] + 1")]
        if "d" in self.env["D"]:
            opts += [lambda: self.emit(f"d['new'] = {self.T(1)}"), lambda: self.emit("d['a'].sub_(1)")]
        r.choice(opts)()

    def s_obj(self):
        r = self.r
        opts = [lambda: self.emit("obj.count += 1"), lambda: self.emit(f"obj.w = {self.T(1)}"),
                lambda: self.emit(f"obj.hist.append({self.I()})"), lambda: self.emit("obj.w.mul_(0.5)"),
                lambda: self.emit(f"obj.extra = {self.T(1)}"), lambda: self.new_T(f"{self.tvar()} * obj.count"),
                lambda: self.new_T(f"obj.w + {self.tvar()}")]
        r.choice(opts)()

    def s_numpy(self):
        r = self.r
        v = self.tvar()
        arr = self.fresh("arr")
        c = r.random()
        if c < 0.4:
            self.emit(f"{arr} = {v}.numpy()")
            self.new_T(f"torch.from_numpy({arr} * 2 + 1)")
        elif c < 0.7:
            # writes through the numpy view alias the tensor
            self.emit(f"{v}.numpy()[0, 0] = 5.0")
        else:
            self.emit(f"{arr} = np.abs({v}.numpy()).sum(axis=0)")
            self.new_T(f"{v} + torch.from_numpy({arr})")

    def s_V(self):
        r = self.r
        v = self.tvar()
        name = self.fresh("v")
        self.emit(f"{name} = " + r.choice([f"{v}[{v} > 0]", f"{v}.flatten()", f"{v}[{v} < 0.5] * 2",
                                            f"torch.masked_select({v}, {v} > 0)"]))
        self.env["V"].append(name)
        if r.random() < 0.5:
            self.emit(r.choice([f"print('V', {name}.shape[0])", f"print('V', {name}.sum())"]))

    def failing(self):
        """A statement that raises. Failing tensor ops feed GL (a live output), so a compiled graph cannot
        drop them as dead code (aot_eager and torch.compile do drop unused failing ops)."""
        v = self.tvar()
        self.uses_global = True
        ops = [
            lambda: f"torch.cat([{v}, {v}.t()])", lambda: f"{v} @ {v}",
            lambda: f"{v}.view(-1, 3)", lambda: f"{v}.reshape(3, -1)", lambda: f"{v} + {v}.t()",
            lambda: f"{v}[10]", lambda: f"{v}[({v}.sum() > -1e9).long() * 10]",
            lambda: f"torch.ones(3)[{v}.argmax() + 10]", lambda: f"{v}[5:].max()",
            lambda: f"torch.zeros(2).view(-1, 3)",
        ]
        py = [
            lambda: "raise ValueError('boom')", lambda: f"_ = [{v}][3]", lambda: f"_ = {{'a': {v}}}['zz']",
            lambda: f"_ = torch.randn(2, 2) in [{v}]", lambda: f"_ = {v}.numpy()[10]",
        ]
        c = self.r.random()
        if c < 0.25:
            self.helpers.add("h_raise")
            return f"_ = h_raise({v}, {self.I()})"
        if c < 0.6:
            return f"GL.append({self.r.choice(ops)()})"
        return self.r.choice(py)()

    def s_fail(self):
        # top-level failures are conditional (else the rest of the program would be dead)
        self.emit(f"if {self.cond(False)}:")
        self.ind += 1
        self.emit(self.failing())
        self.ind -= 1

    def s_helper_stmt(self):
        r = self.r
        v = self.tvar()
        opts = [lambda: (self.helpers.add("h_inplace"), self.emit(f"_ = h_inplace({v})")),
                lambda: (self.helpers.add("h_inplace"), self.new_T(f"h_inplace({v})")),
                lambda: (self.helpers.add("h_gen"), self.new_T(f"list(h_gen({v}, 2))[-1]")),
                lambda: (self.helpers.add("h_brk"), self.emit(f"{v} = h_brk({v})"))]
        r.choice(opts)()

    def s_break_continue(self):
        self.emit(f"if {self.cond()}:")
        self.ind += 1
        self.emit(self.r.choice(["break", "continue"]))
        self.ind -= 1

    def s_early_return(self):
        self.emit(f"if {self.cond()}:")
        self.ind += 1
        self.emit(f"return {self.ret_expr()}")
        self.ind -= 1

    def s_if(self):
        self.emit(f"if {self.cond()}:")
        self.block()
        if self.r.random() < 0.5:
            if self.r.random() < 0.3:
                self.emit(f"elif {self.cond()}:")
                self.block()
            self.emit("else:")
            self.block()

    def s_for(self):
        r = self.r
        c = r.random()
        snap = self.snapshot()
        if c < 0.45 or not self.env["L"]:
            i = self.fresh("i")
            self.emit(f"for {i} in range({r.choice([self.small(), '3', self.I(0)])}):")
            self.env["I"].append(i)
        elif c < 0.75:
            t = self.fresh("it")
            self.emit(f"for {t} in {self.pick('L')}:")
            self.env["T"].append(t)
        elif c < 0.9:
            i, t = self.fresh("j"), self.fresh("it")
            self.emit(f"for {i}, {t} in enumerate({self.pick('L')}):")
            self.env["I"].append(i)
            self.env["T"].append(t)
        else:
            if not self.env["D"]:
                self.restore(snap)
                return self.s_dict()
            kk, t = self.fresh("key"), self.fresh("it")
            self.emit(f"for {kk}, {t} in {self.pick('D')}.items():")
            self.env["T"].append(t)
        # mutating the list being iterated would make an endless loop: only rebind / in-place in the body
        saved_L, saved_D = self.env["L"], self.env["D"]
        self.env["L"], self.env["D"] = [], []
        self.block(loop=True)
        self.env["L"], self.env["D"] = saved_L, saved_D
        self.restore(snap)

    def s_while(self):
        i = self.fresh("i")
        self.emit(f"{i} = 0")
        data = self.r.random() < 0.4
        extra = f" and {self.cond(True)}" if data else ""
        self.emit(f"while {i} < {self.r.randint(1, 4)}{extra}:")
        snap = self.snapshot()
        self.ind += 1
        self.emit(f"{i} += 1")
        self.ind -= 1
        self.env["I"].append(i)
        saved_L = self.env["L"]
        self.env["L"] = []
        self.block(loop=True)
        self.env["L"] = saved_L
        self.restore(snap)

    def s_try(self):
        self.emit("try:")
        snap = self.snapshot()
        self.ind += 1
        self.depth += 1
        n = self.r.randint(0, 2)
        fail_at = self.r.randint(0, n)
        for k in range(n + 1):
            if k == fail_at and self.r.random() < 0.7:
                if self.r.random() < 0.5:
                    self.emit(self.failing())
                else:
                    self.emit(f"if {self.cond()}:")
                    self.ind += 1
                    self.emit(self.failing())
                    self.ind -= 1
            else:
                self.stmt()
        self.depth -= 1
        self.ind -= 1
        self.restore(snap)
        exc = self.r.choice(["RuntimeError", "(RuntimeError, ValueError)", "Exception", "IndexError",
                             "(IndexError, KeyError)", "ValueError"])
        self.emit(f"except {exc} as e:")
        self.ind += 1
        self.emit(f"print('caught', type(e).__name__)")
        self.ind -= 1
        self.block(self.r.randint(0, 1))
        if self.r.random() < 0.4:
            self.emit("finally:")
            self.ind += 1
            self.emit(self.r.choice(["print('finally')", f"{self.tvar()}.add_(0.5)", "GL.append(0)"]))
            if "GL" in self.lines[-1]:
                self.uses_global = True
            self.ind -= 1

    def s_nograd(self):
        self.emit("with torch.no_grad():")
        self.block()

    def s_closure(self):
        r = self.r
        inner = self.fresh("inner")
        cnt = self.fresh("cnt")
        cap = self.tvar()
        self.emit(f"{cnt} = 0")
        self.emit(f"def {inner}(t):")
        self.ind += 1
        self.emit(f"nonlocal {cnt}")
        self.emit(f"{cnt} += 1")
        self.emit(r.choice([f"return t * {cnt}", f"return t + {cap} * {cnt}", f"return (t - {cnt}).abs()"]))
        self.ind -= 1
        v = self.tvar()
        for _ in range(r.randint(1, 2)):
            self.emit(f"{v} = {inner}({v})")
        if r.random() < 0.5:
            self.new_T(f"{v} * {cnt}")
        self.env["I"].append(cnt)

    def s_comprehension(self):
        r = self.r
        v = self.tvar()
        name = self.fresh("l")
        c = r.random()
        if c < 0.3:
            self.emit(f"{name} = [{v} * q for q in range({r.randint(1, 3)})]")
            self.env["L"].append(name)
        elif c < 0.5 and self.env["L"]:
            self.emit(f"{name} = [q for q in {self.pick('L')} if q.sum() > 0]")
            self.env["L"].append(name)
        elif c < 0.7:
            self.new_T(f"{v} + sum(q.sum() for q in [{v}, {self.tvar()}])")
        elif c < 0.85:
            m = self.fresh("m")
            self.emit(f"{m} = {{k: {v} * i for i, k in enumerate('ab')}}")
            self.env["D"].append(m)
        else:
            self.emit(f"{name} = [t + 1 for t in (lambda *a: a)({v}, {self.tvar()})]")
            self.env["L"].append(name)

    # ------------------------------------------------------------------ return
    def ret_expr(self):
        r = self.r
        parts = []
        for _ in range(r.randint(1, 3)):
            c = r.random()
            if c < 0.5:
                parts.append(self.tvar())
            elif c < 0.6:
                parts.append(self.I())
            elif c < 0.7 and self.env["L"]:
                parts.append(self.pick("L"))
            elif c < 0.75 and self.env["D"]:
                parts.append(self.pick("D"))
            elif c < 0.8 and self.env["F"]:
                parts.append(self.pick("F"))
            elif c < 0.85:
                parts.append(f"{self.tvar()}.max(dim=1)")
            elif c < 0.88:
                parts.append(f"({self.tvar()} > 0)")
            elif c < 0.91:
                parts.append(f"{self.tvar()}.long()")
            else:
                parts.append(self.T(1))
        if len(parts) == 1 and r.random() < 0.7:
            return parts[0]
        return "(" + ", ".join(parts) + ",)"

    # ------------------------------------------------------------------ program
    def program(self):
        r = self.r
        args = ["x"]
        for name in ["y", "n", "flag", "lst", "d", "obj"]:
            if r.random() < 0.5:
                args.append(name)
        if r.random() < 0.2:
            args.append("p")
        star = r.choice([None] * 6 + ["args", "kwargs", "both"])
        self.has_obj = "obj" in args
        self.has_flag = "flag" in args
        for a in args:
            k = ARG_KINDS[a]
            if k in self.env:
                self.env[k].append(a)
        if star in ("args", "both"):
            self.emit("rest = list(rest)")
            self.emit("if rest: x = x + rest[0]")
        if star in ("kwargs", "both"):
            self.emit("scale = kw.get('scale', 1.0)")
            self.emit("x = x * scale")
        self.budget = r.randint(5, 18)
        while self.budget > 0:
            self.stmt()
        if r.random() < 0.1:
            pass  # implicit None return: only mutations / prints / globals are compared
        else:
            self.emit(f"return {self.ret_expr()}")
        sig = list(args)
        if star in ("args", "both"):
            sig.append("*rest")
        if star in ("kwargs", "both"):
            sig.append("**kw")
        head = [f"# fuzz program, seed {self.seed}", "import torch", "import numpy as np", "", "G = 0", "GL = []", ""]
        for h in sorted(self.helpers):
            head.append(HELPERS[h].strip("\n"))
            head.append("")
        head.append(f"def f({', '.join(sig)}):")
        body = self.lines
        if self.uses_global or any("G =" in l or "GL." in l for l in body):
            body = ["    global G"] + body
        src = "\n".join(head + body) + "\n"
        return Program(self.seed, src, args, star)


def generate(seed):
    """The program for ``seed`` (deterministic: same seed, same source)."""
    return _Gen(seed).program()


if __name__ == "__main__":
    import sys
    for s in (sys.argv[1:] or ["0"]):
        print(generate(int(s)).source)
