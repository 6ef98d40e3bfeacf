// test_codegen.cpp — GoogleTest suite for codegen: liveness of locals and continuation generation at graph
// breaks (the seeds' bar example), run without the frame hook.
#include <gtest/gtest.h>
#include <pybind11/embed.h>

#include <string>
#include <vector>

#include "codegen/codegen.h"
#include "codegen/liveness.h"
#include "compat/compat.h"
#include "interp/services.h"

namespace py = pybind11;
using namespace cdynamo;

namespace {

// The forward conditional jump on a false value, by its name in this Python.
#if PY_VERSION_HEX < 0x030C0000
const char* const kJumpIfFalse = "POP_JUMP_FORWARD_IF_FALSE";
#else
const char* const kJumpIfFalse = "POP_JUMP_IF_FALSE";
#endif

// The Tracer calls cdynamo's Python side through interp::services(): this binary links its own copy of the core, so
// it installs the package's services into that copy (importing cdynamo, as `import cdynamo` does for cdynamo._C).
void ensure_services() {
  static bool done = false;
  if (done) return;
  interp::install_services(py::module_::import("cdynamo._services").attr("Services")());
  done = true;
}

py::dict run(const std::string& src) {
  ensure_services();
  py::dict g;
  g["__builtins__"] = py::module_::import("builtins");
  g["torch"] = py::module_::import("torch");
  py::exec(src, g);
  return g;
}

PyCodeObject* code_of(py::handle fn) {
  return reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(fn.ptr()));  // borrowed
}

// Index of the first instruction with opname `name` at or after `from`.
size_t find_op(const bytecode::Bytecode& bc, const char* name, size_t from = 0) {
  for (size_t i = from; i < bc.insts.size(); ++i)
    if (std::string(bytecode::opname(bc.insts[i]->opcode)) == name) return i;
  throw std::runtime_error(std::string("no ") + name);
}

// The pieces of a frame about to run `co` with `args` in its first slots (borrowed; args kept alive).
struct FakeFrame {
  std::vector<py::object> args;
  std::vector<PyObject*> slots;
  guards::FrameView fv;
  FakeFrame(PyCodeObject* co, py::dict globals, std::vector<py::object> a)
      : args(std::move(a)), slots(static_cast<size_t>(compat::code_nlocalsplus(co)), nullptr) {
    for (size_t i = 0; i < args.size(); ++i) slots[i] = args[i].ptr();
    fv.localsplus = slots.data();
    fv.globals = globals.ptr();
    fv.builtins = py::module_::import("builtins").attr("__dict__").ptr();
  }
};

const char* kBar =
    "def bar(a, b):\n"
    "    x = a / (torch.abs(a) + 1)\n"
    "    if b.sum() < 0:\n"
    "        b = b * -1\n"
    "    return x * b\n";

}  // namespace

TEST(Liveness, StraightLineAndBranches) {
  py::dict g = run(
      "def f(a, b, c):\n"
      "    x = a + 1\n"       // reads a
      "    if b:\n"           // reads b
      "        y = x\n"
      "    else:\n"
      "        y = c\n"       // c live only on this path
      "    del x\n"
      "    return y\n");
  PyCodeObject* co = code_of(g["f"]);
  bytecode::Bytecode bc = bytecode::decode(co);
  auto live = codegen::live_locals(bc, co->co_nlocals);  // slots: a=0 b=1 c=2 x=3 y=4
  ASSERT_EQ(live.size(), bc.insts.size());
  // At the start everything read before written is live: a, b, c; x and y are not.
  EXPECT_TRUE(live[0][0]);
  EXPECT_TRUE(live[0][1]);
  EXPECT_TRUE(live[0][2]);
  EXPECT_FALSE(live[0][3]);
  EXPECT_FALSE(live[0][4]);
  // After `x = a + 1` is stored, a is dead; x (read on one branch) and c (read on the other) are live.
  size_t after_store = find_op(bc, "STORE_FAST") + 1;
  EXPECT_FALSE(live[after_store][0]);
  EXPECT_TRUE(live[after_store][2]);
  EXPECT_TRUE(live[after_store][3]);
  // At the return only y is live.
  size_t ret = find_op(bc, "RETURN_VALUE");
  size_t load_y = ret - 1;
  EXPECT_TRUE(live[load_y][4]);
  EXPECT_FALSE(live[load_y][0]);
  EXPECT_FALSE(live[load_y][3]);
}

TEST(Liveness, LoopKeepsLoopCarriedLocalsLive) {
  py::dict g = run(
      "def f(n):\n"
      "    s = 0\n"
      "    i = 0\n"
      "    while i < n:\n"
      "        s = s + i\n"
      "        i = i + 1\n"
      "    return s\n");
  PyCodeObject* co = code_of(g["f"]);
  bytecode::Bytecode bc = bytecode::decode(co);
  auto live = codegen::live_locals(bc, co->co_nlocals);  // n=0 s=1 i=2
  // At the start of the body (after the loop test's jump), n, s and i are all live: the backward
  // jump carries them to the next iteration and to the return after it.
  size_t body = find_op(bc, kJumpIfFalse) + 1;
  EXPECT_TRUE(live[body][0]);
  EXPECT_TRUE(live[body][1]);
  EXPECT_TRUE(live[body][2]);
  // Once `s + i` has loaded s, s is dead until the store that follows.
  size_t add = find_op(bc, "BINARY_OP", body);
  EXPECT_FALSE(live[add][1]);
  EXPECT_TRUE(live[add][2]);
}

TEST(Continuations, BarBreaksOnTheBranchWithTwoContinuations) {
  py::dict g = run(kBar);
  py::object bar = g["bar"];
  PyCodeObject* co = code_of(bar);
  py::module_ torch = py::module_::import("torch");
  py::object a = torch.attr("randn")(10), b = torch.attr("randn")(10);

  FakeFrame frame(co, g, {a, b});
  interp::Tracer t(co, frame.fv);
  ASSERT_EQ(t.run(), interp::Tracer::Status::Break) << t.output().stop.reason;
  EXPECT_TRUE(t.output().conditional_break) << t.output().stop.reason;
  EXPECT_NE(t.output().stop.reason.find("tensor"), std::string::npos);
  EXPECT_EQ(t.trace().graph.op_count(), 5);  // abs, add, truediv, sum, lt

  std::vector<interp::ValuePtr> values = codegen::break_values(t);
  std::vector<graph::Node*> outs = codegen::collect_outputs(values);
  EXPECT_EQ(outs.size(), 2u);  // the condition and x
  int counter = 0;
  codegen::BreakCode bc = codegen::graph_break(t, "__compiled_fn_test", outs, counter);
  ASSERT_EQ(bc.resumes.size(), 2u);
  int if_offset = t.frame().bc.insts[t.frame().pc + 1]->offset;
  const bytecode::Bytecode& code = t.frame().bc;
  int else_offset = code.insts[static_cast<size_t>(code.index_of(code.insts[t.frame().pc]->target))]->offset;
  EXPECT_EQ(bc.resumes[0].name, "__resume_at_" + std::to_string(if_offset) + "_c1");
  EXPECT_EQ(bc.resumes[1].name, "__resume_at_" + std::to_string(else_offset) + "_c2");
  EXPECT_EQ(counter, 2);

  // Each continuation takes only the live locals (b, x): `a` is dead after the branch.
  for (const auto& r : bc.resumes) {
    py::object rc = r.code;
    EXPECT_EQ(rc.attr("co_argcount").cast<int>(), 2) << r.name;
    py::tuple names = rc.attr("co_varnames");
    EXPECT_EQ(names[0].cast<std::string>(), "b");
    EXPECT_EQ(names[1].cast<std::string>(), "x");
    EXPECT_EQ(rc.attr("co_name").cast<std::string>(), r.name);
  }
  // Run as plain functions, the continuations finish bar from the branch point exactly as bar does.
  py::object x = a / (torch.attr("abs")(a) + py::int_(1));
  py::function make_fn = py::module_::import("types").attr("FunctionType");
  py::object if_fn = make_fn(bc.resumes[0].code, g);
  py::object else_fn = make_fn(bc.resumes[1].code, g);
  py::object expect_if = x * (b * py::int_(-1));
  py::object expect_else = x * b;
  EXPECT_TRUE(torch.attr("equal")(if_fn(b, x), expect_if).cast<bool>());
  EXPECT_TRUE(torch.attr("equal")(else_fn(b, x), expect_else).cast<bool>());

  // The rewritten frame calls the graph, then one continuation on each side of the branch.
  std::string listing = bytecode::format(reinterpret_cast<PyCodeObject*>(bc.code.ptr()));
  EXPECT_NE(listing.find("__compiled_fn_test"), std::string::npos);
  EXPECT_NE(listing.find(bc.resumes[0].name), std::string::npos);
  EXPECT_NE(listing.find(bc.resumes[1].name), std::string::npos);
  EXPECT_NE(listing.find(kJumpIfFalse), std::string::npos);
}

TEST(Continuations, CallBreakPassesTheCallResultOnTheStack) {
  py::dict g = run(
      "def f(x):\n"
      "    y = x + 1\n"
      "    n = len(repr(y))\n"  // repr is not traced: a break at the CALL
      "    return y * 2, n\n");
  PyCodeObject* co = code_of(g["f"]);
  py::module_ torch = py::module_::import("torch");
  py::object x = torch.attr("ones")(3);
  FakeFrame frame(co, g, {x});
  interp::Tracer t(co, frame.fv);
  ASSERT_EQ(t.run(), interp::Tracer::Status::Break) << t.output().stop.reason;
  EXPECT_FALSE(t.output().conditional_break);
  EXPECT_EQ(std::string(bytecode::opname(t.frame().bc.insts[t.frame().pc]->opcode)), "CALL");
  std::vector<graph::Node*> outs = codegen::collect_outputs(codegen::break_values(t));
  int counter = 0;
  codegen::BreakCode bc = codegen::graph_break(t, "__compiled_fn_test", outs, counter);
  ASSERT_EQ(bc.resumes.size(), 1u);
  py::object rc = bc.resumes[0].code;
  // Stack at the break: [NULL, len, NULL-less repr(...) result]: the continuation receives the live
  // stack values (len and the result of repr(y)) and the live local y.
  py::tuple names = rc.attr("co_varnames");
  int argc = rc.attr("co_argcount").cast<int>();
  ASSERT_EQ(argc, 3);
  EXPECT_EQ(names[2].cast<std::string>(), "y");
  py::object fn = py::module_::import("types").attr("FunctionType")(rc, g);
  py::object y = x + py::int_(1);
  py::tuple out = fn(py::module_::import("builtins").attr("len"), py::repr(y), y);
  EXPECT_TRUE(torch.attr("equal")(out[0], y * py::int_(2)).cast<bool>());
  EXPECT_EQ(out[1].cast<size_t>(), py::len(py::repr(y)));
}
