// test_graph.cpp — GoogleTest suite for csrc/graph: fx naming parity, printers, verifier, to_fx.
#include <gtest/gtest.h>
#include <pybind11/embed.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace py = pybind11;
using namespace cdynamo::graph;
using namespace pybind11::literals;

namespace {

py::object torch_attr(const char* name) { return py::module_::import("torch").attr(name); }
py::object op_attr(const char* name) { return py::module_::import("operator").attr(name); }

// One node of a naming scenario: op and its target (a Python object for call_function, else a str).
struct Spec {
  OpKind op;
  py::object target;
};

Spec ph(const char* n) { return {OpKind::Placeholder, py::str(n)}; }
Spec fn(py::object f) { return {OpKind::CallFunction, std::move(f)}; }
Spec meth(const char* m) { return {OpKind::CallMethod, py::str(m)}; }
Spec mod(const char* m) { return {OpKind::CallModule, py::str(m)}; }
Spec attr(const char* m) { return {OpKind::GetAttr, py::str(m)}; }

std::vector<std::string> our_names(const std::vector<Spec>& specs) {
  Graph g;
  std::vector<std::string> out;
  for (const Spec& s : specs) {
    std::string t = s.op == OpKind::CallFunction ? std::string() : py::cast<std::string>(s.target);
    Node* n = nullptr;
    switch (s.op) {
      case OpKind::Placeholder: n = g.placeholder(t, py::none()); break;
      case OpKind::GetAttr: n = g.get_attr(t, py::none()); break;
      case OpKind::CallFunction: n = g.call_function(s.target, {}, {}, py::none()); break;
      case OpKind::CallMethod: n = g.call_method(t, {}, {}, py::none()); break;
      case OpKind::CallModule: n = g.call_module(t, {}, {}, py::none()); break;
      case OpKind::Output: n = g.output(Arg::tuple({})); break;
    }
    out.push_back(n->name);
  }
  return out;
}

// The same sequence through torch.fx.Graph's own public node constructors.
std::vector<std::string> fx_names(const std::vector<Spec>& specs) {
  py::object g = py::module_::import("torch.fx").attr("Graph")();
  std::vector<std::string> out;
  for (const Spec& s : specs) {
    py::object n;
    switch (s.op) {
      case OpKind::Placeholder: n = g.attr("placeholder")(s.target); break;
      case OpKind::GetAttr: n = g.attr("create_node")("get_attr", s.target); break;
      case OpKind::CallFunction: n = g.attr("call_function")(s.target); break;
      case OpKind::CallMethod: n = g.attr("call_method")(s.target); break;
      case OpKind::CallModule: n = g.attr("create_node")("call_module", s.target); break;
      case OpKind::Output: n = g.attr("output")(py::tuple()); break;
    }
    out.push_back(py::cast<std::string>(n.attr("name")));
  }
  return out;
}

void expect_same_names(const std::vector<Spec>& specs) {
  std::vector<std::string> ours = our_names(specs);
  std::vector<std::string> theirs = fx_names(specs);
  ASSERT_EQ(ours.size(), theirs.size());
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_EQ(ours[i], theirs[i]) << "node #" << i;
}

// Toy graph of the seeds: x; sin = torch.sin(x); cos = torch.cos(x); mul = sin * cos; return (mul,).
Graph toy_graph(py::object example = py::none()) {
  Graph g;
  Node* x = g.placeholder("x", example);
  Node* s = g.call_function(torch_attr("sin"), {Arg::ref(x)}, {}, py::none());
  Node* c = g.call_function(torch_attr("cos"), {Arg::ref(x)}, {}, py::none());
  Node* m = g.call_function(op_attr("mul"), {Arg::ref(s), Arg::ref(c)}, {}, py::none());
  g.output(Arg::tuple({Arg::ref(m)}));
  return g;
}

void expect_verify_error(const Graph& g, const std::string& needle) {
  try {
    g.verify();
    ADD_FAILURE() << "verify() did not throw; expected: " << needle;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

bool allclose(py::handle a, py::handle b) {
  return py::cast<bool>(py::module_::import("torch").attr("allclose")(a, b));
}

}  // namespace

TEST(GraphNaming, SeedToyExampleMatchesFx) {
  std::vector<Spec> specs = {ph("a"),          ph("b"),          fn(torch_attr("abs")), fn(op_attr("add")),
                             fn(op_attr("truediv")), meth("sum"), fn(op_attr("lt")),   {OpKind::Output, py::str("output")}};
  EXPECT_EQ(our_names(specs),
            (std::vector<std::string>{"a", "b", "abs_1", "add", "truediv", "sum_1", "lt", "output"}));
  expect_same_names(specs);
}

TEST(GraphNaming, RepeatsKeywordsBuiltinsMatchFx) {
  std::vector<Spec> specs = {
      ph("x"),          fn(op_attr("mul")),     fn(op_attr("mul")),      fn(op_attr("mul")),
      fn(op_attr("getitem")), meth("__getitem__"), fn(op_attr("getitem")), meth("sum"),
      meth("sum"),      fn(torch_attr("sum")),  fn(torch_attr("abs")),   fn(torch_attr("max")),
      meth("abs"),      fn(torch_attr("sin")),  fn(torch_attr("sin")),   meth("view"),
      fn(py::module_::import("torch.nn.functional").attr("relu")),       fn(op_attr("truediv")),
      fn(py::module_::import("builtins").attr("getattr")),               meth("__add__"),
      mod("layer.0"),   mod("layer.0"),         mod("encoder.Block1"),   attr("self.weight"),
      attr("weight"),   attr("weight"),         fn(torch_attr("Size")),  fn(op_attr("not_")),
      {OpKind::Output, py::str("output")}};
  expect_same_names(specs);
  std::vector<std::string> ours = our_names(specs);
  EXPECT_EQ(ours[1], "mul");
  EXPECT_EQ(ours[2], "mul_1");
  EXPECT_EQ(ours[3], "mul_2");
  EXPECT_EQ(ours[4], "getitem");
  EXPECT_EQ(ours[5], "getitem_1");
  EXPECT_EQ(ours[7], "sum_1");
  EXPECT_EQ(ours[10], "abs_1");
}

TEST(GraphNaming, PlaceholderEdgeCasesMatchFx) {
  std::vector<Spec> specs = {ph("x"),     ph("x_1"),  ph("x"),     ph("xY"),    ph("sum"),  ph("None"),
                             ph("torch"), ph("input"), ph("1abc"), ph(""),      ph("__"),   ph("a__1"),
                             ph("mul_5"), ph("mul"),  ph("mul"),   ph("_1"),    ph("x_01"), ph("x"),
                             ph("a.b-c"), ph("déjà"), ph("__init__"), ph("class"), ph("HTTPServer"), ph("x_1")};
  expect_same_names(specs);
}

TEST(GraphNaming, RandomizedAgainstFx) {
  const char* pool[] = {"x",   "x_1", "x_0", "_",     "__",  "sum", "a.b", "mul_2", "mul", "A",  "aB",
                        "9",   "",    "None", "torch", "x_01", "a__1", "_1", "max_3", "max", "len", "fooBar_2"};
  const size_t n_pool = sizeof(pool) / sizeof(pool[0]);
  std::vector<Spec> specs;
  uint32_t state = 12345;
  for (int i = 0; i < 3000; ++i) {
    state = state * 1664525u + 1013904223u;
    const char* t = pool[(state >> 8) % n_pool];
    specs.push_back((state >> 20) % 3 == 0 ? meth(t) : ph(t));
  }
  expect_same_names(specs);
}

TEST(GraphPrinter, TabularSeedToyGraph) {
  Graph g = toy_graph();
  const std::string expected =
      "opcode         name    target        args        kwargs\n"
      "-------------  ------  ------------  ----------  --------\n"
      "placeholder    x       x             ()          {}\n"
      "call_function  sin     torch.sin     (x,)        {}\n"
      "call_function  cos     torch.cos     (x,)        {}\n"
      "call_function  mul     operator.mul  (sin, cos)  {}\n"
      "output         output  output        ((mul,),)   {}\n";
  EXPECT_EQ(g.tabular(), expected);
}

TEST(GraphPrinter, TabularKwargsColumnWidths) {
  Graph g;
  Node* x = g.placeholder("x", py::none());
  Node* s = g.call_method("sum", {Arg::ref(x)},
                          {{"dim", Arg::constant(py::int_(0))}, {"keepdim", Arg::constant(py::bool_(true))}}, py::none());
  g.output(Arg::tuple({Arg::ref(s)}));
  // Text checked against tabulate 0.10 on the equivalent torch.fx graph.
  EXPECT_EQ(g.tabular(),
            "opcode       name    target    args         kwargs\n"
            "-----------  ------  --------  -----------  ---------------------------\n"
            "placeholder  x       x         ()           {}\n"
            "call_method  sum_1   sum       (x,)         {'dim': 0, 'keepdim': True}\n"
            "output       output  output    ((sum_1,),)  {}\n");
  EXPECT_EQ(g.readable(),
            "def forward(self, x):\n"
            "    sum_1 = x.sum(dim=0, keepdim=True)\n"
            "    return (sum_1,)\n");
}

TEST(GraphPrinter, ReadableToyGraph) {
  Graph g = toy_graph();
  EXPECT_EQ(g.readable(),
            "def forward(self, x):\n"
            "    sin = torch.sin(x)\n"
            "    cos = torch.cos(x)\n"
            "    mul = sin * cos\n"
            "    return (mul,)\n");
  EXPECT_EQ(g.op_count(), 3);
}

TEST(GraphPrinter, TargetNames) {
  EXPECT_EQ(target_name(torch_attr("sin")), "torch.sin");
  EXPECT_EQ(target_name(torch_attr("abs")), "torch.abs");
  EXPECT_EQ(target_name(op_attr("mul")), "operator.mul");
  EXPECT_EQ(target_name(op_attr("getitem")), "operator.getitem");
  EXPECT_EQ(target_name(py::module_::import("torch.nn.functional").attr("relu")), "torch.nn.functional.relu");
  EXPECT_EQ(target_name(torch_attr("Tensor").attr("add")), "torch.Tensor.add");
  EXPECT_EQ(target_name(py::module_::import("builtins").attr("len")), "len");
  EXPECT_EQ(target_name(py::str("sum")), "sum");
  EXPECT_EQ(target_name(py::eval("torch.ops.aten.add.Tensor", py::dict("torch"_a = py::module_::import("torch")))),
            "torch.ops.aten.add.Tensor");
}

TEST(GraphPrinter, FormatArg) {
  Graph g;
  Node* a = g.placeholder("a", py::none());
  Node* s = g.call_function(torch_attr("sin"), {Arg::ref(a)}, {}, py::none());
  py::dict env("torch"_a = py::module_::import("torch"));
  EXPECT_EQ(format_arg(Arg::tuple({Arg::ref(a), Arg::constant(py::int_(1))})), "(a, 1)");
  EXPECT_EQ(format_arg(Arg::tuple({Arg::ref(s)})), "(sin,)");
  EXPECT_EQ(format_arg(Arg::tuple({})), "()");
  EXPECT_EQ(format_arg(Arg::list({Arg::ref(a), Arg::ref(s)})), "[a, sin]");
  EXPECT_EQ(format_arg(Arg::dict({"k", "it's"}, {Arg::ref(a), Arg::constant(py::none())})),
            "{'k': a, \"it's\": None}");
  EXPECT_EQ(format_arg(Arg::constant(py::eval("slice(None, 2)"))), "slice(None, 2, None)");
  EXPECT_EQ(format_arg(Arg::constant(py::ellipsis())), "Ellipsis");
  EXPECT_EQ(format_arg(Arg::constant(py::eval("torch.float32", env))), "torch.float32");
  EXPECT_EQ(format_arg(Arg::constant(py::str("s"))), "'s'");
  EXPECT_EQ(format_arg(Arg::constant(py::float_(1.5))), "1.5");
  EXPECT_EQ(format_arg(Arg::constant(py::object())), "None");
  // Same text as fx's args column (str of the args tuple) for a mixed getitem index.
  Node* gi = g.call_function(op_attr("getitem"),
                             {Arg::ref(s), Arg::tuple({Arg::constant(py::eval("slice(None, 2)")),
                                                       Arg::constant(py::ellipsis()), Arg::constant(py::none())})},
                             {}, py::none());
  g.output(Arg::tuple({Arg::ref(gi)}));
  py::object gm = g.to_fx(py::none());
  py::list fx_nodes(gm.attr("graph").attr("nodes"));
  EXPECT_EQ(format_arg(Arg::tuple(gi->args)), py::cast<std::string>(py::str(fx_nodes[2].attr("args"))));
}

TEST(GraphVerify, AcceptsToyGraph) { EXPECT_NO_THROW(toy_graph().verify()); }

TEST(GraphVerify, ForwardReference) {
  Graph g = toy_graph();
  Node* sin = g.nodes()[1].get();
  Node* mul = g.nodes()[3].get();
  sin->args[0] = Arg::ref(mul);
  expect_verify_error(g, "'sin'");
  expect_verify_error(g, "'mul' is defined at or after its use");
}

TEST(GraphVerify, SelfReference) {
  Graph g = toy_graph();
  Node* cos = g.nodes()[2].get();
  cos->kwargs.push_back({"out", Arg::list({Arg::ref(cos)})});
  expect_verify_error(g, "'cos'");
}

TEST(GraphVerify, ForeignNode) {
  Graph other = toy_graph();
  Graph g = toy_graph();
  g.nodes()[3]->args[1] = Arg::tuple({Arg::ref(other.nodes()[2].get())});
  expect_verify_error(g, "node 'mul'");
  expect_verify_error(g, "not a node of this graph");
}

TEST(GraphVerify, DuplicateName) {
  Graph g = toy_graph();
  g.nodes()[2]->name = "sin";
  expect_verify_error(g, "duplicate name 'sin'");
}

TEST(Graph, LatePlaceholderGoesInFront) {
  // An input discovered after ops were traced is still a leading placeholder; rollback keeps it.
  Graph g;
  Node* x = g.placeholder("x", py::none());
  size_t m = g.mark();
  g.call_function(torch_attr("sin"), {Arg::ref(x)}, {}, py::none());
  Node* y = g.placeholder("y", py::none());
  ASSERT_EQ(g.nodes().size(), 3u);
  EXPECT_EQ(g.nodes()[0]->name, "x");
  EXPECT_EQ(g.nodes()[1]->name, "y");
  EXPECT_EQ(g.nodes()[2]->name, "sin");
  g.output(Arg::tuple({Arg::ref(y)}));
  EXPECT_NO_THROW(g.verify());
  g.rollback(m);
  ASSERT_EQ(g.nodes().size(), 2u);
  EXPECT_EQ(g.nodes()[1]->name, "y");
  EXPECT_EQ(g.op_count(), 0);
}

TEST(GraphVerify, OutputLayout) {
  {
    Graph g;
    Node* x = g.placeholder("x", py::none());
    g.call_function(torch_attr("sin"), {Arg::ref(x)}, {}, py::none());
    expect_verify_error(g, "no output");
  }
  {
    Graph g;
    Node* x = g.placeholder("x", py::none());
    g.output(Arg::tuple({Arg::ref(x)}));
    g.call_function(torch_attr("sin"), {Arg::ref(x)}, {}, py::none());
    expect_verify_error(g, "not the last node");
  }
  {
    Graph g;
    Node* x = g.placeholder("x", py::none());
    g.output(Arg::tuple({Arg::ref(x)}));
    g.output(Arg::tuple({Arg::ref(x)}));
    expect_verify_error(g, "node 'output_1'");
    expect_verify_error(g, "more than one output");
  }
}

TEST(GraphToFx, ToyRoundTrip) {
  py::module_ torch = py::module_::import("torch");
  py::object x = torch.attr("randn")(4, 5);
  Graph g = toy_graph(x);
  py::object gm = g.to_fx(torch.attr("nn").attr("Module")(), "ToyModule");
  EXPECT_EQ(py::cast<std::string>(py::type::of(gm).attr("__name__")), "ToyModule");
  py::object eager = torch.attr("sin")(x) * torch.attr("cos")(x);
  py::tuple out = gm(x);
  EXPECT_TRUE(allclose(out[0], eager));
}

TEST(GraphToFx, NamesMetaAndResult) {
  py::module_ torch = py::module_::import("torch");
  py::object x = torch.attr("randn")(4, 5);
  Graph g = toy_graph(x);
  py::object gm = g.to_fx(py::none());
  py::tuple out = gm(x);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(allclose(out[0], torch.attr("sin")(x) * torch.attr("cos")(x)));
  py::list fx_nodes(gm.attr("graph").attr("nodes"));
  ASSERT_EQ(fx_nodes.size(), g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_EQ(py::cast<std::string>(fx_nodes[i].attr("name")), g.nodes()[i]->name);
    EXPECT_EQ(py::cast<std::string>(fx_nodes[i].attr("op")), op_name(g.nodes()[i]->op));
  }
  py::object ev = fx_nodes[0].attr("meta")["example_value"];
  EXPECT_TRUE(ev.is(x));
  EXPECT_FALSE(py::cast<bool>(fx_nodes[1].attr("meta").attr("__contains__")("example_value")));
}

TEST(GraphToFx, ContainersKwargsMethodsModulesAttrs) {
  py::module_ torch = py::module_::import("torch");
  py::dict env("torch"_a = torch);
  py::exec(R"(
class _Root(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(5, 3)
        self.scale = torch.nn.Parameter(torch.full((3,), 2.0))
root = _Root()
)", env);
  py::object root = env["root"];
  Graph g;
  Node* x = g.placeholder("x", py::none());
  Node* y = g.placeholder("sum", py::none());  // builtin name: node "sum_1", fx arg named "sum"
  Node* lin = g.call_module("lin", {Arg::ref(x)}, {}, py::none());
  Node* sc = g.get_attr("scale", py::none());
  Node* m = g.call_function(op_attr("mul"), {Arg::ref(lin), Arg::ref(sc)}, {}, py::none());
  Node* cat = g.call_function(torch_attr("cat"), {Arg::list({Arg::ref(m), Arg::ref(y)})},
                              {{"dim", Arg::constant(py::int_(1))}}, py::none());
  Node* s = g.call_method("sum", {Arg::ref(cat)}, {{"dim", Arg::constant(py::int_(0))}}, py::none());
  Node* v = g.call_method("view", {Arg::ref(s), Arg::tuple({Arg::constant(py::int_(-1)), Arg::constant(py::int_(1))})},
                          {}, py::none());
  Node* gi = g.call_function(op_attr("getitem"),
                             {Arg::ref(v), Arg::tuple({Arg::constant(py::eval("slice(None, 2)")),
                                                       Arg::constant(py::ellipsis())})},
                             {}, py::none());
  g.output(Arg::tuple({Arg::ref(gi), Arg::dict({"m", "n"}, {Arg::ref(m), Arg::constant(py::none())})}));
  ASSERT_NO_THROW(g.verify());
  EXPECT_EQ(y->name, "sum_1");
  EXPECT_EQ(s->name, "sum_2");

  py::object gm = g.to_fx(root, "Mixed");
  py::object xv = torch.attr("randn")(4, 5);
  py::object yv = torch.attr("randn")(4, 2);
  py::tuple out = gm(xv, yv);
  env["xv"] = xv;
  env["yv"] = yv;
  py::object expected_m = py::eval("root.lin(xv) * root.scale", env);
  py::object expected = py::eval("torch.cat([root.lin(xv) * root.scale, yv], dim=1).sum(dim=0).view(-1, 1)[:2, ...]", env);
  EXPECT_TRUE(allclose(out[0], expected));
  EXPECT_TRUE(allclose(out[1]["m"], expected_m));
  EXPECT_TRUE(out[1]["n"].is_none());
  py::list fx_nodes(gm.attr("graph").attr("nodes"));
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_EQ(py::cast<std::string>(fx_nodes[i].attr("name")), g.nodes()[i]->name);
  }
}

TEST(GraphToFx, ThousandNodeChain) {
  py::module_ torch = py::module_::import("torch");
  Graph g;
  Node* cur = g.placeholder("x", py::none());
  py::object sin = torch_attr("sin"), mul = op_attr("mul"), add = op_attr("add");
  std::vector<Spec> specs = {ph("x")};
  for (int i = 0; i < 1000; ++i) {
    switch (i % 3) {
      case 0:
        cur = g.call_function(sin, {Arg::ref(cur)}, {}, py::none());
        specs.push_back(fn(sin));
        break;
      case 1:
        cur = g.call_function(mul, {Arg::ref(cur), Arg::constant(py::float_(1.5))}, {}, py::none());
        specs.push_back(fn(mul));
        break;
      default:
        cur = g.call_method("add", {Arg::ref(cur), Arg::constant(py::float_(0.25))}, {}, py::none());
        specs.push_back(meth("add"));
        break;
    }
  }
  g.output(Arg::tuple({Arg::ref(cur)}));
  specs.push_back({OpKind::Output, py::str("output")});
  ASSERT_NO_THROW(g.verify());
  EXPECT_EQ(g.op_count(), 1000);
  EXPECT_EQ(g.nodes()[1000]->name, "sin_333");

  py::object x = torch.attr("randn")(8);
  py::object gm = g.to_fx(py::none());
  py::object expected = x;
  for (int i = 0; i < 1000; ++i) {
    if (i % 3 == 0) expected = torch.attr("sin")(expected);
    else if (i % 3 == 1) expected = expected * py::float_(1.5);
    else expected = expected.attr("add")(py::float_(0.25));
  }
  py::tuple out = gm(x);
  EXPECT_TRUE(allclose(out[0], expected));
  std::vector<std::string> theirs = fx_names(specs);
  py::list fx_nodes(gm.attr("graph").attr("nodes"));
  ASSERT_EQ(fx_nodes.size(), g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_EQ(g.nodes()[i]->name, theirs[i]) << "node #" << i;
    ASSERT_EQ(py::cast<std::string>(fx_nodes[i].attr("name")), theirs[i]) << "node #" << i;
  }
}

// --- provenance: interned frames, inlined calls, module scopes, and the meta to_fx writes from them ---

namespace {

// A real code object of a two-line function defined in an exec'd source named `file`.
py::object code_of(const char* file, const char* src, const char* fn) {
  py::dict ns;
  py::module_ builtins = py::module_::import("builtins");
  builtins.attr("exec")(builtins.attr("compile")(src, file, "exec"), ns);
  return ns[fn].attr("__code__");
}

}  // namespace

TEST(GraphProvenance, FramesInternedPerLocationAndCaller) {
  py::object outer = code_of("<outer>", "def f(x):\n    return g(x)\n", "f");
  py::object inner = code_of("<inner>", "def g(x):\n    return x\n", "g");
  Graph g;
  g.set_location(outer.ptr(), 2, 11, 15);
  Node* a = g.call_function(torch_attr("sin"), {}, {}, py::none());
  Node* b = g.call_function(torch_attr("cos"), {}, {}, py::none());
  ASSERT_TRUE(a->where);
  EXPECT_EQ(a->where, b->where);  // one instruction: one frame object
  EXPECT_EQ(a->where->line, 2);
  EXPECT_EQ(a->where->col, 11);
  EXPECT_EQ(a->where->caller, nullptr);
  Graph::CallSave saved = g.enter_call();
  g.set_location(inner.ptr(), 2, 11, 12);
  Node* c = g.call_function(torch_attr("tan"), {}, {}, py::none());
  EXPECT_EQ(c->where->caller, a->where);  // the callee's frame hangs under the calling instruction's
  g.leave_call(std::move(saved));
  Node* d = g.call_function(torch_attr("exp"), {}, {}, py::none());
  EXPECT_EQ(d->where, a->where);  // back at the calling instruction
  Graph::CallSave again = g.enter_call();
  g.set_location(inner.ptr(), 2, 11, 12);
  Node* e = g.call_function(torch_attr("tan"), {}, {}, py::none());
  g.leave_call(std::move(again));
  EXPECT_EQ(e->where, c->where);  // the same callee line under the same caller: the same interned frame
  Node* out = g.output(Arg::tuple({}));
  EXPECT_EQ(out->where, nullptr);
}

TEST(GraphProvenance, ModuleScopesNestAndCountCalls) {
  py::object lin = py::module_::import("torch.nn").attr("Linear")(2, 2);
  py::object cls = py::type::of(lin);
  Graph g;
  ModuleScopePtr top = g.enter_module(lin.ptr(), cls.ptr(), "L['self'].lin");
  Node* a = g.call_function(torch_attr("sin"), {}, {}, py::none());
  g.leave_module(std::move(top));
  Node* b = g.call_function(torch_attr("cos"), {}, {}, py::none());
  ModuleScopePtr second = g.enter_module(lin.ptr(), cls.ptr(), "L['self'].lin");
  Node* c = g.call_function(torch_attr("tan"), {}, {}, py::none());
  g.leave_module(std::move(second));
  const std::string id = std::to_string(reinterpret_cast<uintptr_t>(lin.ptr()));
  ASSERT_TRUE(a->scope && c->scope);
  EXPECT_EQ(a->scope->key, id);
  EXPECT_EQ(b->scope, nullptr);
  EXPECT_EQ(c->scope->key, id + "@1");  // the second call of one path, as torch._dynamo keys it
  EXPECT_EQ(c->scope->path, "L['self'].lin");
}

TEST(GraphProvenance, ToFxWritesDynamoMeta) {
  py::object outer = code_of("<outer>", "def f(x):\n    return g(x)\n", "f");
  py::object lin = py::module_::import("torch.nn").attr("Linear")(2, 2);
  Graph g;
  Node* x = g.placeholder("x", py::none());
  g.set_location(outer.ptr(), 2, 11, 15);
  ModuleScopePtr saved = g.enter_module(lin.ptr(), py::type::of(lin).ptr(), "L['self'].lin");
  Node* s = g.call_function(torch_attr("sin"), {Arg::ref(x)}, {}, py::none());
  g.leave_module(std::move(saved));
  g.output(Arg::tuple({Arg::ref(s)}));
  py::object gm = g.to_fx(py::none());
  py::list nodes(gm.attr("graph").attr("nodes"));
  py::dict meta = nodes[1].attr("meta");
  EXPECT_EQ(py::cast<std::string>(meta["stack_trace"]), "  File \"<outer>\", line 2, in f\n");  // no source text
  py::dict stack = meta["nn_module_stack"];
  EXPECT_EQ(py::len(stack), 1u);
  py::list fn_stack = meta["source_fn_stack"];
  py::object fn_target = fn_stack[0].cast<py::tuple>()[1];
  EXPECT_TRUE(fn_target.is(py::type::of(lin)));  // a torch.nn layer names the ops made in it
  EXPECT_FALSE(py::dict(nodes[2].attr("meta")).contains("stack_trace"));  // the output
  py::object plain = g.to_fx(py::none(), "GraphModule", /*meta=*/false);
  EXPECT_FALSE(py::dict(py::list(plain.attr("graph").attr("nodes"))[1].attr("meta")).contains("stack_trace"));
}
