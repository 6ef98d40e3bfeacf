# gen_modules.py — owns the module-shaped program generator of the differential fuzzer: generate(seed) -> Program (nn.Module hierarchies, configs, outputs, hooks).
"""Seeded generator of programs shaped like library models, for the differential runner (run.py --gen modules).

A program defines a config object (plain class, dataclass, properties, or a ``__getattribute__`` with an
attribute map as transformers' configs have), a few ``nn.Module`` block classes (some subclassing others and
calling ``super().__init__`` / ``super().forward``), a top ``Model`` holding the blocks in a ModuleList,
ModuleDict or Sequential, an output type (dataclass, OrderedDict subclass, NamedTuple, tuple, dict), maybe
forward hooks, and ``f``: either the module itself (``f = MODEL``, compiled as an OptimizedModule) or a
function calling it. Block bodies combine residuals, graph breaks (print, ``.item()``, data-dependent
``if``, ``torch._dynamo.graph_break()``, ``torch.compiler.disable`` helpers), in-place ops on aliases and
views, mutation of ``self`` (counters, caches, buffers), globals, closures, comprehensions, generators,
try/except/finally and ``torch.no_grad()`` blocks holding breaks, isinstance/type dispatch,
``is_compiling()`` branches with equal results, and exceptions raised deep inside the model on the call
with the larger batch.

Every tensor the blocks pass on has shape (B, D): D (the hidden size) is fixed per program, B changes
between calls (see ``ModuleProgram.make_inputs``). The runner compares, besides results / prints /
exceptions, the state of ``MODEL`` (parameters with grads, buffers, Python attributes of every submodule),
``CFG``, ``G`` and ``GL``.
"""
import random

from .gen import Program


# Bug 15 (tests/fuzz/FINDINGS.md, fixed): dict views were traced as tuple snapshots. The probes that keep a view
# alive or observe its type are on; False makes them turn the view into a list at once (same random draws).
DICT_VIEW_PROBES = True


class ModuleProgram(Program):
    """A Program whose inputs the runner takes from ``make_inputs`` (batch size B changes on call 2)."""

    def __init__(self, seed, source, args, star, d):
        super().__init__(seed, source, args, star)
        self.d = d

    def make_inputs(self, call):
        import torch
        b = 3 if call == 2 else 2
        g = torch.Generator().manual_seed(self.seed * 31 + call)
        T = lambda: torch.randn(b, self.d, generator=g) * 1.5  # noqa: E731
        vals = {"x": T(), "y": T(), "n": 3 if call == 2 else 2, "flag": call != 2}
        if call == 3:
            vals["y"] = vals["x"]  # aliased arguments
        args = [vals[a] for a in self.args]
        kw = {"scale": 0.5 if call == 2 else 2.0} if self.star == "kwargs" else {}
        return args, [], kw


class _Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.seed = seed
        self.d = self.r.randint(3, 5)
        self.out = []          # lines of the program
        self.counter = 0
        self.blocks = []       # names of block classes defined so far
        self.cfg_kind = None
        self.strict = self.r.random() < 0.3
        self.helpers = set()
        self.r2 = random.Random(seed ^ 0x7A11)  # constructs added later draw here, so older seeds stay the same
        self.tuple_out = {}    # block class -> whether its forward returns (hidden, aux)
        self.r3 = random.Random(seed ^ 0x3D1C7)  # the probes of values the trace models (s_probe)

    # ------------------------------------------------------------------ utilities
    def chance(self, p):
        return self.r.random() < p

    def fresh(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def cfg(self, attr, base="self.cfg"):
        """An access of a config attribute, through an alias where the config kind has one."""
        if attr == "d" and self.cfg_kind in ("prop", "getattr") and self.chance(0.5):
            return f"{base}.hidden"
        if attr == "n_layers" and self.cfg_kind == "getattr" and self.chance(0.5):
            return f"{base}.num_layers"
        if attr == "alpha" and self.cfg_kind == "prop" and self.chance(0.4):
            return f"({base}.scale / 2)"
        return f"{base}.{attr}"

    # ------------------------------------------------------------------ config
    def config(self):
        r = self.r
        self.cfg_kind = r.choice(["plain", "dataclass", "prop", "getattr"])
        L = r.randint(2, 3)
        alpha = r.choice([0.5, 1.5, 2.0])
        stop = r.randint(0, L)
        vals = dict(d=self.d, n_layers=L, alpha=alpha, stop=stop, strict=self.strict, mode=r.choice(["add", "mul"]))
        self.n_layers = L
        if self.cfg_kind == "dataclass":
            lines = ["@dataclasses.dataclass", "class Config:"]
            for k, v in vals.items():
                lines.append(f"    {k}: {type(v).__name__} = {v!r}")
            lines.append("    extras: dict = dataclasses.field(default_factory=dict)")
        else:
            lines = ["class Config:"]
            if self.cfg_kind == "getattr":
                lines += ['    attribute_map = {"hidden": "d", "num_layers": "n_layers"}', ""]
            lines.append("    def __init__(self, **kw):")
            for k, v in vals.items():
                lines.append(f"        self.{k} = {v!r}")
            lines.append("        self.extras = {}")
            lines.append("        for k, v in kw.items():")
            lines.append("            setattr(self, k, v)")
            if self.cfg_kind == "prop":
                lines += ["", "    @property", "    def hidden(self):", "        return self.d", "",
                          "    @property", "    def scale(self):", "        return self.alpha * 2"]
            if self.cfg_kind == "getattr":
                lines += ["", "    def __getattribute__(self, name):",
                          '        amap = super().__getattribute__("attribute_map")',
                          "        if name in amap:", "            name = amap[name]",
                          "        return super().__getattribute__(name)"]
        self.out += lines + ["", "", "CFG = Config()", ""]

    # ------------------------------------------------------------------ helpers at module level
    def helper(self, name):
        self.helpers.add(name)
        return name

    HELPERS = {
        "dis_helper": '''
@torch.compiler.disable
def dis_helper(t, tag):
    GL.append(tag)
    print("disabled", tag, tuple(t.shape))
    return t * 0.5
''',
        "bump": '''
def bump(k=1):
    global G
    G = G + k
    return G
''',
        "scope": '''
@contextlib.contextmanager
def scope(tag):
    GL.append(("enter", tag))
    try:
        yield tag
    finally:
        GL.append(("exit", tag))
''',
        "first": '''
def first(out):
    if isinstance(out, tuple):
        return out[0]
    return out
''',
        "act": '''
def act(t, kind):
    if kind == "relu":
        return torch.relu(t)
    if kind == "gelu":
        return F.gelu(t)
    return torch.tanh(t)
''',
    }

    # ------------------------------------------------------------------ block classes
    def block_class(self, idx):
        r = self.r
        name = f"Block{idx}"
        parent = None
        if self.blocks and self.chance(0.3):
            parent = r.choice(self.blocks)
        init = []            # lines in __init__ after super().__init__
        subs = []            # (attr, kind) submodules
        self.attrs = set()   # python attributes set in __init__
        self.cur_subs = subs
        self.cur_init = init
        self.cur_methods = []
        self.cur_block = name
        self.class_attrs = set()
        nsub = r.randint(1, 3)
        for _ in range(nsub):
            self.add_sub()
        body = []
        self.body = body
        self.ind = 2
        self.depth = 0
        self.uses_global = False
        sup = "x = super().forward(x, **kwargs)" + ("[0]" if parent and self.tuple_out[parent] else "")
        if parent is not None:
            if self.chance(0.5):
                self.emit(sup)
        for _ in range(r.randint(2, 6)):
            self.stmt()
        if parent is not None and not any("super().forward" in l for l in body):
            self.emit(sup)
        self.tuple_out[name] = self.r2.random() < 0.3
        if self.tuple_out[name]:
            self.emit(self.r2.choice(["return x, x.mean()", "return (x, None)", "return x, {'aux': x.sum()}"]))
        else:
            self.emit("return x")
        base = parent or "nn.Module"
        lines = [f"class {name}({base}):"]
        if self.class_attrs:
            lines.append("    seen = 0")
        if self.chance(0.3):
            lines.append(f'    """Block {idx}."""')
        lines.append("    def __init__(self, cfg):")
        lines.append("        super().__init__(cfg)" if parent else "        super().__init__()")
        if not parent:
            lines.append("        self.cfg = cfg")
        lines += ["        " + l for l in init]
        lines.append("")
        sig = r.choice(["self, x, **kwargs", "self, x, *args, **kwargs"])
        lines.append(f"    def forward({sig}):")
        lines += body
        for m in self.cur_methods:
            lines.append("")
            lines += m
        self.out += lines + ["", ""]
        self.blocks.append(name)

    def add_sub(self):
        r = self.r
        k = len(self.cur_subs)
        attr = f"{self.cur_block.lower()}_m{k}"
        d = self.cfg("d", "cfg")
        opts = [("lin", f"nn.Linear({d}, {d})"), ("ln", f"nn.LayerNorm({d})"),
                ("seq", f"nn.Sequential(nn.Linear({d}, {d}), nn.Tanh())"), ("id", "nn.Identity()"),
                ("lin", f"nn.Linear({d}, {d}, bias=False)")]
        if self.chance(0.25):
            opts.append(("bn", f"nn.BatchNorm1d({d})"))
        if self.blocks and self.chance(0.5):
            b = r.choice(self.blocks)
            opts.append(("block", f"{b}(cfg)"))
        kind, expr = r.choice(opts)
        self.cur_init.append(f"self.{attr} = {expr}")
        self.cur_subs.append((attr, kind))

    def emit(self, line):
        self.body.append("    " * self.ind + line)

    def attr(self, name, init):
        if name not in self.attrs:
            self.attrs.add(name)
            self.cur_init.append(f"self.{name} = {init}")
        return f"self.{name}"

    def call_sub(self):
        attr, kind = self.r.choice(self.cur_subs)
        if kind == "block":
            cls = self.cur_init[[l.startswith(f"self.{attr} =") for l in self.cur_init].index(True)].split("= ")[1][:-5]
            return self.r.choice([f"self.{attr}(x, **kwargs)", f"self.{attr}(x)",
                                  f"self.{attr}(x, scale=kwargs.get('scale', 1.0))"]) + ("[0]" if self.tuple_out[cls] else "")
        return f"self.{attr}(x)"

    def brk(self, tag=None):
        r = self.r
        tag = tag or self.fresh("b")
        self.emit(r.choice([f"print('{tag}', tuple(x.shape))", f"print('{tag}', x.sum().item() > 0)",
                            f"print('{tag}', type(self).__name__)", "torch._dynamo.graph_break()",
                            f"_ = x.sum().item()", f"print('{tag}', x.dtype, x.requires_grad)"]))

    def body_block(self, n=None):
        self.ind += 1
        self.depth += 1
        for _ in range(n or self.r.randint(1, 2)):
            self.stmt()
        self.depth -= 1
        self.ind -= 1

    def stmt(self):
        r = self.r
        if self.r3.random() < 0.07:
            self.s_probe()
            return
        choices = [
            (3, self.s_sub), (2, self.s_residual), (2, self.s_break), (1, self.s_act), (2, self.s_inplace),
            (2, self.s_self_mut), (1, self.s_buffer), (1, self.s_global), (1, self.s_closure), (1, self.s_comp),
            (1, self.s_isinstance), (1, self.s_compiling), (1, self.s_disabled), (1, self.s_kwargs),
            (1, self.s_raise), (1, self.s_view_alias), (1, self.s_gen_method),
            (1, self.s_nonlocal), (1, self.s_ctx), (1, self.s_param_update), (1, self.s_dyn_attr),
            (1, self.s_nograd_method), (1, self.s_training), (1, self.s_prop),
            (2, self.s_attention), (1, self.s_mask), (1, self.s_class_counter), (1, self.s_lazy_buffer),
            (1, self.s_data), (1, self.s_item_scale), (1, self.s_kw_dict), (1, self.s_partial),
        ]
        if self.depth < 2:
            choices.append((1, self.s_while))
        if self.depth < 2:
            choices += [(2, self.s_datadep), (2, self.s_try), (1, self.s_nograd)]
        tot = sum(w for w, _ in choices)
        k = r.random() * tot
        for w, fn in choices:
            k -= w
            if k < 0:
                fn()
                return
        choices[-1][1]()

    # ---- statements (each keeps x of shape (B, D))
    def s_sub(self):
        self.emit(f"x = {self.call_sub()}")

    def s_residual(self):
        r = self.r
        self.emit("residual = x")
        if self.chance(0.3):
            self.emit("x += 1.0" if self.chance(0.5) else "x.mul_(0.5)")  # in place on the alias
        else:
            self.emit(f"x = {self.call_sub()}")
        if self.chance(0.5):
            self.brk()
        self.emit(r.choice(["x = x + residual", "x = residual + x * 0.5", "x += residual",
                            f"x = x + residual * {self.cfg('alpha')}"]))

    def s_break(self):
        self.brk()

    def s_act(self):
        r = self.r
        if self.chance(0.4):
            self.helper("act")
            self.emit(f"x = act(x, {r.choice(['relu', 'gelu', 'tanh'])!r})")
        else:
            self.emit(r.choice(["x = torch.relu(x)", "x = F.gelu(x)", "x = torch.tanh(x) * 2", "x = F.silu(x)"]))

    def s_inplace(self):
        r = self.r
        self.emit(r.choice(["x.mul_(0.5)", "x += 0.25", "x[:, 0] = 1.0", "x.add_(x.detach().mean())",
                            "x[0] = x[0] * 2", "x.clamp_(-3, 3)", "x[:, -1] += 1"]))

    def s_view_alias(self):
        r = self.r
        v = self.fresh("v")
        self.emit(r.choice([f"{v} = x[:, :2]", f"{v} = x.view(-1)", f"{v} = x.t()", f"{v} = x[0]"]))
        if self.chance(0.4):
            self.brk()
        self.emit(r.choice([f"{v}.mul_(2)", f"{v}.add_(1)", f"{v}.zero_()"]))
        if self.chance(0.3):
            self.brk()

    def s_self_mut(self):
        r = self.r
        c = r.randint(0, 5)
        if c == 5:  # a cache read on the next call (guards on the dict's keys)
            self.emit(f"if str(x.shape[0]) in {self.attr('cache', '{}')}:")
            self.emit("    x = x + self.cache[str(x.shape[0])]")
            self.emit("self.cache[str(x.shape[0])] = x.detach()")
        elif c == 0:
            self.emit(f"{self.attr('calls', '0')} += 1")
        elif c == 1:
            self.emit(f"{self.attr('cache', '{}')}[str(x.shape[0])] = x.detach()")
        elif c == 2:
            self.emit(f"{self.attr('hist', '[]')}.append(x.shape[0])")
        elif c == 3:
            self.emit(f"self.last = x")
        else:
            self.emit(f"{self.attr('calls', '0')} += 1")
            self.emit(f"if self.calls > 2:")
            self.ind += 1
            self.emit("x = x * 0.5")
            self.ind -= 1

    def s_buffer(self):
        r = self.r
        name = self.fresh("run")
        d = self.cfg("d", "cfg")
        self.cur_init.append(f"self.register_buffer({name!r}, torch.zeros({d}))")
        c = r.randint(0, 2)
        if c == 0:
            self.emit("with torch.no_grad():")
            self.emit(f"    self.{name}.mul_(0.9).add_(x.mean(0) * 0.1)")
        elif c == 1:
            self.emit(f"self.{name} += x.detach().mean(0)")
        else:
            self.emit(f"self.{name} = self.{name} * 0.5 + x.detach().sum(0)")
        if self.chance(0.3):
            self.emit(f"x = x + self.{name}")

    def s_global(self):
        r = self.r
        if self.chance(0.5):
            self.helper("bump")
            self.emit(r.choice(["bump()", "x = x * (bump() % 3)", "bump(x.shape[0])"]))
        else:
            self.emit(r.choice(["GL.append(x.shape[0])", f"GL.append({self.cur_block!r})",
                                "GL.append(x.sum().item() > 0)"]))

    def s_closure(self):
        r = self.r
        fn = self.fresh("fn")
        s = self.fresh("s")
        self.emit(f"{s} = kwargs.get('scale', 1.0)")
        self.emit(f"def {fn}(t):")
        self.emit(r.choice([f"    return t * {s} + {self.cfg('alpha')}", f"    return {self.call_sub().replace('(x', '(t')}",
                            f"    self.{self.attr('ncl', '0')[5:]} += 1\n" + "    " * self.ind + f"    return t - {s}"]))
        self.emit(f"x = {fn}(x)")

    def s_comp(self):
        r = self.r
        c = r.randint(0, 2)
        if c == 0:
            self.emit("parts = [torch.tanh(c) * (i + 1) for i, c in enumerate(x.split(1, dim=-1))]")
            self.emit("x = torch.cat(parts, dim=-1)")
        elif c == 1:
            self.emit("stats = {k: v.mean() for k, v in (('a', x), ('b', x * 2))}")
            self.emit("x = x + stats['a'] - stats['b'] * 0.5")
        else:
            self.emit("x = sum([m(x) for m in self.modules() if isinstance(m, nn.Linear) and m.in_features == m.out_features], x * 0)"
                      if any(k == "lin" for _, k in self.cur_subs) else "x = sum(x * i for i in range(3))")

    def s_isinstance(self):
        r = self.r
        attr, kind = r.choice(self.cur_subs)
        self.emit(r.choice([f"if isinstance(self.{attr}, (nn.Linear, nn.LayerNorm)):",
                            f"if type(self.{attr}).__name__ == 'Linear':",
                            "if isinstance(self.cfg, Config) and not isinstance(x, list):",
                            f"if type(self) is {self.cur_block}:"]))
        self.body_block(1)
        self.emit("else:")
        self.body_block(1)

    def s_compiling(self):
        self.emit(self.r.choice(["if torch.compiler.is_compiling():", "if torch._dynamo.is_compiling():"]))
        self.emit("    x = x * 2")
        self.emit("else:")
        self.emit("    x = x + x")

    def s_disabled(self):
        self.helper("dis_helper")
        self.emit(f"x = dis_helper(x, {self.fresh('d')!r})")

    def s_kwargs(self):
        r = self.r
        self.emit(r.choice(["x = x * kwargs.get('scale', 1.0)", "if 'scale' in kwargs:\n" + "    " * (self.ind + 1)
                            + "x = x + kwargs['scale']", "x = x * len(kwargs) + x"]))

    def s_raise(self):
        if self.strict:
            self.emit(f"if {self.cfg('strict')} and x.shape[0] > 2:")
            self.emit(f"    raise ValueError(f'{self.cur_block}: batch {{x.shape[0]}} too large')")
        else:
            self.emit("if x.dim() != 2:")
            self.emit("    raise RuntimeError('rank')")

    def s_gen_method(self):
        r = self.r
        m = self.fresh("_steps")
        if self.chance(0.5):
            self.cur_methods.append([f"    def {m}(self, x):",
                                     f"        for i in range({self.cfg('n_layers')}):",
                                     "            print('gen', i)" if self.chance(0.3) else "            pass",
                                     "            yield x * (i + 1)"])
            self.emit(f"x = sum(self.{m}(x)) / 3")
        else:
            self.cur_methods.append([f"    def {m}(self):",
                                     "        for name, mod in self.named_children():",
                                     "            yield name, mod"])
            self.emit(f"for name, mod in self.{m}():")
            self.emit("    if isinstance(mod, (nn.Linear, nn.LayerNorm, nn.Identity)):")
            self.emit("        x = mod(x)")
            if self.chance(0.5):
                self.emit("        break")

    def s_nonlocal(self):
        fn, c = self.fresh("inc"), self.fresh("cnt")
        self.emit(f"{c} = 0")
        self.emit(f"def {fn}(t):")
        self.emit(f"    nonlocal {c}")
        self.emit(f"    {c} += 1")
        if self.chance(0.4):
            self.emit(f"    print('nl', {c})")
        self.emit(f"    return t * {c}")
        self.emit(f"x = {fn}({fn}(x))")
        self.emit(self.r.choice([f"GL.append({c})", f"x = x + {c}"]))

    def s_ctx(self):
        self.helper("scope")
        self.emit(f"with scope({self.fresh('c')!r}):")
        self.body_block()

    def s_param_update(self):
        lins = [a for a, k in self.cur_subs if k in ("lin", "ln")]
        self.emit("with torch.no_grad():")
        if lins:
            a = self.r.choice(lins)
            self.emit(self.r.choice([f"    self.{a}.weight.mul_(0.99)", f"    self.{a}.weight[0] += 0.01",
                                     f"    self.{a}.weight.copy_(self.{a}.weight * 0.5)"]))
        else:
            name = self.fresh("w")
            self.cur_init.append(f"self.{name} = nn.Parameter(torch.ones({self.cfg('d', 'cfg')}))")
            self.emit(f"    self.{name}.add_(0.1)")
            self.emit(f"x = x * self.{name}")

    def s_dyn_attr(self):
        r = self.r
        if self.chance(0.5):
            self.emit("for name, _ in list(self.named_children()):")
            self.emit("    mod = getattr(self, name)")
            self.emit("    if isinstance(mod, nn.Identity):")
            self.emit("        x = mod(x) + 0.5")
        else:
            self.emit("if hasattr(self, 'tmp'):")
            self.emit("    x = x + self.tmp")
            self.emit("    del self.tmp")
            self.emit("else:")
            self.emit(f"    setattr(self, 'tmp', x.detach().mean())")

    def s_nograd_method(self):
        m = self.fresh("_update")
        self.cur_methods.append(["    @torch.no_grad()", f"    def {m}(self, x):",
                                 f"        {self.attr('stat', 'None')} = x.sum()",
                                 "        if self.stat > 0:" if self.chance(0.5) else "        if True:",
                                 "            print('stat', x.requires_grad)", "        return x * 2"])
        self.emit(self.r.choice([f"x = x + self.{m}(x)", f"self.{m}(x)"]))

    def s_training(self):
        self.emit("if self.training:")
        self.emit("    x = F.dropout(x, p=0.0, training=True) * 1.5")
        self.emit("else:")
        self.emit("    x = x * 0.5")

    def s_prop(self):
        p = self.fresh("gain")
        self.cur_methods.append(["    @property", f"    def {p}(self):",
                                 f"        return {self.cfg('alpha')} * (2 if self.training else 1)"])
        self.emit(f"x = x * self.{p}")

    def s_attention(self):
        q = self.attr(f"{self.cur_block.lower()}_qkv", f"nn.Sequential(nn.Linear({self.cfg('d', 'cfg')}, 3 * {self.cfg('d', 'cfg')}))")
        self.emit(f"q, k, v = {q}(x).chunk(3, dim=-1)")
        self.emit(self.r.choice(["scores = q @ k.transpose(0, 1) / math.sqrt(q.shape[-1])",
                                 "scores = torch.matmul(q, k.t()) * (1.0 / q.shape[-1] ** 0.5)"]))
        if self.chance(0.4):
            self.emit("scores = scores.masked_fill(torch.eye(scores.shape[0], dtype=torch.bool), float('-inf'))"
                      if self.chance(0.5) else "scores = scores + torch.triu(torch.full_like(scores, -1e4), 1)")
        self.emit("attn = scores.softmax(dim=-1)")
        if self.chance(0.3):
            self.emit(f"{self.attr('attn_maps', '[]')}.append(attn.detach())")
        self.emit(self.r.choice(["x = x + attn @ v", "x = torch.einsum('ij,jd->id', attn, v)"]))

    def s_mask(self):
        self.emit(self.r.choice(["x = x.masked_fill(x > 2, 2.0)", "x = torch.where(x > 0, x, x * 0.1)",
                                 "mask = (x.abs() < 1).to(x.dtype)\n" + "    " * self.ind + "x = x * mask + (1 - mask) * x.sign()"]))

    def s_class_counter(self):
        self.class_attrs.add("seen")
        self.emit(self.r.choice(["type(self).seen += 1", f"{self.cur_block}.seen = {self.cur_block}.seen + 1"]))
        if self.chance(0.3):
            self.emit("x = x * (1 + type(self).seen % 2)")

    def s_lazy_buffer(self):
        self.emit("if getattr(self, 'lazy', None) is None:")
        self.emit("    self.register_buffer('lazy', torch.zeros_like(x[0]))")
        self.emit("self.lazy += x.detach().mean(0)" if self.chance(0.5) else "x = x + self.lazy")

    def s_data(self):
        lins = [a for a, k in self.cur_subs if k in ("lin", "ln")]
        if lins:
            a = self.r.choice(lins)
            self.emit(self.r.choice([f"self.{a}.weight.data.mul_(0.9)", f"self.{a}.weight.data[0].fill_(0.1)"]))
        else:
            self.emit("x.data.mul_(0.5)")

    def s_item_scale(self):
        self.emit("s = x.abs().mean().item()")
        self.emit(self.r.choice(["x = x / (s + 1)", "x = x * min(s, 2.0)", "if s > 1.0:\n" + "    " * (self.ind + 1) + "x = x / s"]))

    def s_kw_dict(self):
        blocks = [(a, k) for a, k in self.cur_subs if k == "block"]
        self.emit("layer_kwargs = dict(kwargs)")
        self.emit(self.r.choice(["layer_kwargs['scale'] = layer_kwargs.get('scale', 1.0) * 2",
                                 "layer_kwargs.pop('scale', None)", "layer_kwargs.update(extra=1)"]))
        if blocks:
            a, _ = self.r.choice(blocks)
            cls = self.cur_init[[l.startswith(f"self.{a} =") for l in self.cur_init].index(True)].split("= ")[1][:-5]
            self.emit(f"x = self.{a}(x, **layer_kwargs)" + ("[0]" if self.tuple_out[cls] else ""))
        else:
            self.emit("x = x * layer_kwargs.get('scale', 1.0)")

    def s_partial(self):
        attr, kind = self.r.choice(self.cur_subs)
        if kind == "block":
            self.emit(f"x = {self.call_sub()}")
            return
        self.emit(f"call = functools.partial(self.{attr})")
        self.emit("x = call(x)")

    def s_while(self):
        self.emit("steps = 0")
        self.emit("while x.abs().max() > 3 and steps < 4:")
        self.emit("    x = x * 0.5")
        self.emit("    steps += 1")
        if self.chance(0.3):
            self.emit("    print('shrink', steps)")

    def s_probe(self):
        """Values the trace models instead of running: dict views, __dict__, iterators / bound methods alive
        at a break (drawn from a third stream, so programs that draw none stay as they were)."""
        r3 = self.r3
        c = r3.randint(0, 6)
        if c == 6:  # a parameter registered lazily, then the module's parameter dict read (bug 16)
            self.emit("if not hasattr(self, 'gate'):")
            self.emit("    self.gate = nn.Parameter(torch.ones(x.shape[-1]))")
            self.emit("x = x * self.gate")
            self.emit(r3.choice(["GL.append(sorted(self._parameters))", "GL.append(len(list(self.parameters())))",
                                 "GL.append('gate' in self._parameters)"]))
        elif c == 0:
            self.emit("self.note = x.detach()")
            self.emit("if 'note' in self.__dict__:")
            self.emit("    x = x + self.__dict__['note'] * 0.5")
        elif c == 1:
            self.emit("stats = {'mean': x.mean()}")
            self.emit("names = stats.keys()" if DICT_VIEW_PROBES else "names = list(stats.keys())")
            self.emit("stats['sum'] = x.sum()")
            self.emit(r3.choice(["GL.append(len(names))", "GL.append(sorted(names))", "print('names', names)"]))
        elif c == 2:
            cond = r3.choice(["if kwargs.keys() == {'scale'}:", "if kwargs.keys() - {'extra'}:",
                              "if 'scale' in kwargs.keys():"])
            if not DICT_VIEW_PROBES:
                cond = cond.replace("kwargs.keys() ", "set(kwargs.keys()) ")
            self.emit(cond)
            self.emit("    x = x * 2")
            out = r3.choice(["print('kw', kwargs.keys())", "print('kw', sorted(kwargs))"])
            self.emit(out if DICT_VIEW_PROBES else out.replace("kwargs.keys()", "list(kwargs.keys())"))
        elif c == 3:
            self.emit("it = iter(self.children())")
            self.emit("mod = next(it)")
            self.brk()
            self.emit("if isinstance(mod, (nn.Linear, nn.LayerNorm, nn.Identity)):")
            self.emit("    x = mod(x)")
        elif c == 4:
            attr, kind = r3.choice(self.cur_subs)
            self.emit(f"fwd = self.{attr}.forward")
            self.brk()
            self.emit("x = fwd(x)" + ("" if kind != "block" else "[0]" if self.tuple_out[self.sub_class(attr)] else ""))
        else:
            self.emit("seen = {id(m) for m in self.modules()}")
            self.emit("GL.append(len(seen))")

    def sub_class(self, attr):
        return self.cur_init[[l.startswith(f"self.{attr} =") for l in self.cur_init].index(True)].split("= ")[1][:-5]

    def s_datadep(self):
        self.emit(self.r.choice(["if x.sum() > 0:", "if x.abs().max() > 2:", "if (x > 0).any():"]))
        self.body_block()
        if self.chance(0.6):
            self.emit("else:")
            self.body_block()

    def s_try(self):
        r = self.r
        self.emit("try:")
        self.body_block(r.randint(1, 3))
        if self.chance(0.7):
            exc = r.choice(["ValueError", "RuntimeError", "(ValueError, RuntimeError)", "Exception"])
            self.emit(f"except {exc} as e:")
            self.emit("    GL.append(type(e).__name__)")
            if self.chance(0.5):
                self.emit("    print('caught', e)")
            self.emit("    x = x * 0")
            if self.chance(0.5):
                self.emit("finally:")
                self.emit(f"    {self.attr('fin', '0')} += 1")
        else:
            self.emit("finally:")
            self.emit(r.choice([f"    {self.attr('fin', '0')} += 1", "    GL.append('finally')", "    print('finally')"]))

    def s_nograd(self):
        self.emit(self.r.choice(["with torch.no_grad():", "with torch.enable_grad():", "with torch.inference_mode(False):"]))
        self.body_block()

    # ------------------------------------------------------------------ output type and model
    def output_type(self):
        r = self.r
        self.out_kind = r.choice(["dataclass", "odict", "namedtuple", "tuple", "dict", "tensor", "hf"])
        if self.out_kind == "hf":
            self.out += ["class OutputBase(collections.OrderedDict):",
                         "    def __post_init__(self):",
                         "        for f in dataclasses.fields(self):",
                         "            v = getattr(self, f.name)",
                         "            if v is not None:",
                         "                self[f.name] = v", "",
                         "    def __getitem__(self, k):",
                         "        if isinstance(k, str):",
                         "            return dict(self.items())[k]",
                         "        return self.to_tuple()[k]", "",
                         "    def __setattr__(self, name, value):",
                         "        if name in self.keys() and value is not None:",
                         "            super().__setitem__(name, value)",
                         "        super().__setattr__(name, value)", "",
                         "    def to_tuple(self):", "        return tuple(self[k] for k in self.keys())", "", "",
                         "@dataclasses.dataclass", "class ModelOutput(OutputBase):",
                         "    last_hidden: typing.Optional[torch.Tensor] = None",
                         "    pooled: typing.Optional[torch.Tensor] = None", "", ""]
        if self.out_kind == "dataclass":
            self.out += ["@dataclasses.dataclass", "class ModelOutput:", "    last_hidden: torch.Tensor",
                         "    pooled: typing.Optional[torch.Tensor] = None", "    extra: typing.Any = None", "", ""]
        elif self.out_kind == "odict":
            self.out += ["class ModelOutput(collections.OrderedDict):",
                         "    def __getattr__(self, name):",
                         "        try:", "            return self[name]",
                         "        except KeyError:", "            raise AttributeError(name)", "",
                         "    def to_tuple(self):", "        return tuple(self[k] for k in self.keys())", "", ""]
        elif self.out_kind == "namedtuple":
            self.out += ["class ModelOutput(typing.NamedTuple):", "    last_hidden: torch.Tensor",
                         "    pooled: torch.Tensor", "", ""]

    def make_output(self, h, p):
        k = self.out_kind
        if k == "dataclass":
            return f"ModelOutput(last_hidden={h}, pooled={p}, extra=len(GL))"
        if k in ("odict", "hf"):
            return f"ModelOutput(last_hidden={h}, pooled={p})"
        if k == "namedtuple":
            return f"ModelOutput({h}, {p})"
        if k == "tuple":
            return f"({h}, {p})"
        if k == "dict":
            return f"{{'last_hidden': {h}, 'pooled': {p}}}"
        return h

    def read_output(self, o):
        k = self.out_kind
        r = self.r
        if k == "dataclass":
            return r.choice([f"{o}.last_hidden", f"{o}.pooled"])
        if k in ("odict", "hf"):
            return r.choice([f"{o}.last_hidden", f"{o}['pooled']", f"{o}.to_tuple()[0]"]
                            + ([f"{o}[0]"] if k == "hf" else []))
        if k == "namedtuple":
            return r.choice([f"{o}.last_hidden", f"{o}[1]", f"{o}.pooled"])
        if k in ("tuple",):
            return f"{o}[0]"
        if k == "dict":
            return f"{o}['last_hidden']"
        return o

    def model(self):
        r = self.r
        L = self.n_layers
        self.container = r.choice(["list", "dict", "seq"])
        pick = [r.choice(self.blocks) for _ in range(L - 1)] + [self.blocks[-1]]  # the last block nests the others
        r.shuffle(pick)
        tuples = any(self.tuple_out[b] for b in pick)
        if tuples and self.container == "seq":
            self.container = "list"
        lines = ["class Model(nn.Module):", "    def __init__(self, cfg):", "        super().__init__()",
                 "        self.cfg = cfg"]
        if self.container == "list":
            lines.append(f"        self.layers = nn.ModuleList([{', '.join(b + '(cfg)' for b in pick)}])")
        elif self.container == "dict":
            lines.append("        self.layers = nn.ModuleDict({" + ", ".join(f"'l{i}': {b}(cfg)" for i, b in enumerate(pick)) + "})")
        else:
            lines.append(f"        self.layers = nn.Sequential({', '.join(b + '(cfg)' for b in pick)})")
        lines.append(f"        self.norm = nn.LayerNorm({self.cfg('d', 'cfg')})")
        lines.append(f"        self.pool = nn.Linear({self.cfg('d', 'cfg')}, {self.cfg('d', 'cfg')})")
        lines.append("        self.steps = 0")
        lines.append("")
        lines.append("    def forward(self, x, y=None, n=1, flag=True, **kwargs):")
        body = []
        I = "        "
        body.append(I + "self.steps += 1")
        if self.chance(0.4):
            body += [I + "if y is not None:", I + "    x = x + y"]
        if self.chance(0.2):
            body += [I + "if flag:", I + "    x = x * 2"]
        if self.chance(0.3):
            body.append(I + "print('model', self.steps, tuple(x.shape))")
        loop = r.randint(0, 4)
        if self.container == "seq":
            body.append(I + r.choice(["x = self.layers(x)", "for layer in self.layers:\n" + I + "    x = layer(x)"]))
        else:
            it = "self.layers" if self.container == "list" else "self.layers.values()"
            if loop == 0:
                body += [I + f"for i, layer in enumerate({it}):", I + "    x = layer(x, **kwargs)",
                         I + f"    if i >= {self.cfg('stop')}:", I + "        break"]
            elif loop == 1:
                body += [I + f"for layer in {it}:", I + "    residual = x", I + "    x = layer(x, **kwargs)",
                         I + f"    if {self.cfg('mode')} == 'add':", I + "        x = x + residual",
                         I + "    else:", I + "        x = x * torch.sigmoid(residual)"]
            elif loop == 2:
                body += [I + f"for layer in {it}:", I + "    x = layer(x)", I + "    if x.abs().max() > 50:",
                         I + "        break"]
            elif loop == 3:
                if self.container == "dict":
                    body += [I + "for name, layer in self.layers.items():", I + "    x = layer(x, **kwargs)",
                             I + "    GL.append(name)"]
                else:
                    body += [I + "hidden = []", I + "for layer in self.layers:", I + "    x = layer(x)",
                             I + "    hidden.append(x)", I + "x = torch.stack(hidden).mean(0)"]
            else:
                body += [I + "for _ in range(n):", I + f"    x = self.layers[{0 if self.container == 'list' else repr('l0')}](x)"]
        if self.r2.random() < 0.3 and self.container != "seq":  # transformers' all_hidden_states
            loop_at = next(i for i, l in enumerate(body) if l.lstrip().startswith("for ") or "self.layers(" in l)
            body.insert(loop_at, I + "all_hidden = () if flag else None")
            body.append(I + "if all_hidden is not None:")
            body.append(I + "    all_hidden = all_hidden + (x,)")
            body.append(I + "    GL.append(len(all_hidden))")
        if self.chance(0.3):
            body += [I + "try:", I + "    x = self.norm(x)", I + "    print('norm')", I + "except RuntimeError:",
                     I + "    x = x * 0", I + "finally:", I + "    self.steps += 10"]
        else:
            body.append(I + "x = self.norm(x)")
        body.append(I + "pooled = torch.tanh(self.pool(x[:, 0:1].expand(-1, x.shape[1])))"
                    if self.chance(0.5) else I + "pooled = self.pool(x).mean(0)")
        body.append(I + f"return {self.make_output('x', 'pooled')}")
        if tuples:  # the layers' (hidden, aux) outputs: the hidden state goes on, as library models index [0]
            self.helper("first")
            body = [l.replace("layer(x, **kwargs)", "first(layer(x, **kwargs))").replace("layer(x)", "first(layer(x))")
                    .replace("](x)", "](x))").replace("= self.layers[", "= first(self.layers[") for l in body]
        self.out += lines + body + ["", ""]

    def hooks(self):
        r = self.r
        lines = []
        tgt = r.choice(["MODEL.layers[0]", "MODEL.norm", "MODEL.pool"]) if self.container != "dict" else \
            r.choice(["MODEL.layers['l0']", "MODEL.norm"])
        c = r.randint(0, 3)
        if c == 0:
            lines += ["def pre_hook(mod, args):", "    GL.append(('pre', type(mod).__name__))",
                      "    return (args[0] * 0.5,) + tuple(args[1:])", "", f"{tgt}.register_forward_pre_hook(pre_hook)"]
        elif c == 1:
            lines += ["def post_hook(mod, args, out):", "    if isinstance(out, tuple):", "        return (out[0] + 1,) + out[1:]",
                      "    return out + 1", "", f"{tgt}.register_forward_hook(post_hook)"]
        elif c == 2:
            lines += ["def post_hook(mod, args, out):", "    print('hook', type(mod).__name__, type(out).__name__)",
                      "", f"{tgt}.register_forward_hook(post_hook)"]
        elif self.r2.random() < 0.3:  # a hook that raises on the larger batch
            lines += ["def pre_hook(mod, args):", "    if args[0].shape[0] > 2:",
                      "        raise RuntimeError(f'hook refused {tuple(args[0].shape)}')", "",
                      f"{tgt}.register_forward_pre_hook(pre_hook)"]
        else:
            lines += ["def pre_hook(mod, args):", "    mod.hook_calls = getattr(mod, 'hook_calls', 0) + 1", "",
                      f"{tgt}.register_forward_pre_hook(pre_hook)"]
        self.out += lines + [""]

    def driver(self):
        r = self.r
        star = "kwargs" if self.chance(0.4) else None
        direct = self.chance(0.3)
        if direct:
            args = ["x", "y", "n", "flag"][:r.randint(1, 4)]
            self.out.append("f = MODEL")
            return args, star
        args = ["x"] + [a for a in ("y", "n", "flag") if self.chance(0.4)]
        sig = ", ".join(args + (["**kw"] if star else []))
        call = ", ".join(a if a == "x" else f"{a}={a}" for a in args) + (", **kw" if star else "")
        lines = [f"def f({sig}):"]
        if self.chance(0.25):  # state changed between calls: the guards must see it
            lines.append(r.choice(["    MODEL.cfg.stop = x.shape[0] - 2", "    MODEL.train(x.shape[0] == 2)",
                                   "    CFG.mode = 'add' if x.shape[0] == 2 else 'mul'",
                                   "    MODEL.layers[0].cfg = Config(alpha=float(x.shape[0]))"
                                   if self.container != "dict" else "    CFG.alpha = float(x.shape[0])"]))
        r2 = self.r2
        if r2.random() < 0.3:  # more state changed between calls, drawn from the second stream
            first_layer = "MODEL.layers[0]" if self.container != "dict" else "MODEL.layers['l0']"
            lines.append(r2.choice([
                f"    if x.shape[0] == 3:\n        {first_layer} = type({first_layer})(CFG)",
                "    if x.shape[0] == 3 and not MODEL.norm._forward_hooks:\n"
                "        MODEL.norm.register_forward_hook(lambda m, a, o: o * 2)",
                "    MODEL.pool.weight.requires_grad_(x.shape[0] == 2)",
                "    MODEL.norm.eps = 1e-5 if x.shape[0] == 2 else 1e-3",
                "    GL.clear()" if r2.random() < 0.5 else "    del GL[:1]",
            ]))
        how = r2.random()
        c = r.randint(0, 4)
        if how < 0.15:
            lines.append(f"    out = MODEL.forward({call})")  # bypasses __call__ and its hooks
        elif how < 0.3 and c != 2:
            lines += ["    with torch.no_grad():", f"        out = MODEL({call})"]
        else:
            lines.append(f"    out = MODEL({call})")
        if c == 0:
            lines.append("    return out")
        elif c == 1:
            lines.append(f"    h = {self.read_output('out')}")
            if self.chance(0.5):
                lines.append("    print('driver', tuple(h.shape))")
            lines.append("    return h * 2, MODEL.steps")
        elif c == 2:
            lines += [f"    loss = {self.read_output('out')}.sum()", "    loss.backward()", "    return loss.detach()"]
        elif c == 3:
            lines += ["    with torch.no_grad():", f"        h = {self.read_output('out')}.clone()",
                      "    MODEL.cfg.extras['last'] = h.shape[0]", "    return h, out"]
        else:
            lines += ["    try:", f"        out2 = MODEL({call})", "    except ValueError as e:",
                      "        GL.append(str(e))", "        out2 = out", f"    return {self.read_output('out2')}"]
        self.out += lines
        return args, star

    def program(self):
        r = self.r
        self.out = [f"# module-shaped fuzz program, seed {self.seed}", "import collections", "import contextlib", "import dataclasses", "import functools", "import math",
                    "import typing", "import torch", "import torch.nn as nn", "import torch.nn.functional as F", "",
                    f"torch.manual_seed({self.seed})", "G = 0", "GL = []", ""]
        self.config()
        head_len = len(self.out)
        for i in range(r.randint(1, 4)):
            self.block_class(i)
        self.output_type()
        self.model()
        self.out.append("MODEL = Model(CFG)")
        if self.chance(0.25):
            self.out.append("MODEL.eval()")
        self.out.append("")
        if self.chance(0.35):
            self.hooks()
        args, star = self.driver()
        helpers = []
        for h in sorted(self.helpers):
            helpers += self.HELPERS[h].strip("\n").splitlines() + [""]
        self.out[head_len:head_len] = helpers
        src = "\n".join(self.out) + "\n"
        return ModuleProgram(self.seed, src, args, star, self.d)


def generate(seed):
    """The module-shaped program for ``seed`` (deterministic: same seed, same source)."""
    return _Gen(seed).program()


if __name__ == "__main__":
    import sys
    for s in (sys.argv[1:] or ["0"]):
        print(generate(int(s)).source)
