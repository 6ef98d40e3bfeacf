// test_shape_guard.cpp — GoogleTest suite for SHAPE_ENV guards (csrc/guards/shape_guard.*): the evaluator's
// Python int semantics and overflow handling, malformed programs, slot reading, the fallback, and
// TENSOR_MATCH with dynamic dimensions.
#include <gtest/gtest.h>
#include <pybind11/embed.h>

#include <climits>
#include <stdexcept>
#include <string>
#include <vector>

#include "guards/guard.h"
#include "guards/shape_guard.h"

namespace py = pybind11;
using namespace cdynamo::guards;

namespace {

py::object torch() { return py::module_::import("torch"); }
py::object eval_py(const std::string& src) { return py::eval(src); }

// `n` Int slots on locals s0..s{n-1} (a frame is not needed to run ShapeProgram::eval).
std::vector<ShapeSlot> int_slots(int n) {
  std::vector<ShapeSlot> out;
  for (int i = 0; i < n; ++i) {
    std::string name = "s";
    name += std::to_string(i);
    out.push_back(ShapeSlot{Source::local(i, name), ShapeSlot::Kind::Int, 0});
  }
  return out;
}

// Compiles one program given as Python source text over `nslots` Int slots.
ShapeProgram one(const std::string& program, int nslots = 2) {
  py::list exprs;
  exprs.append(eval_py(program));
  return ShapeProgram(int_slots(nslots), exprs.ptr(), Py_None, {program});
}

ShapeResult run1(const std::string& program, std::vector<int64_t> values) {
  values.resize(4);
  return one(program, 4).eval(0, values.data());
}

// The error text of building `program`, or "" if it compiles.
std::string build_error(const std::string& program, int nslots = 2) {
  try {
    one(program, nslots);
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(PyErr_Occurred(), nullptr);
    return e.what();
  }
  return "";
}

struct Frame {
  std::vector<PyObject*> slots;
  FrameView view() {
    FrameView fv;
    fv.localsplus = slots.data();
    return fv;
  }
};

}  // namespace

TEST(ShapeEval, FloorDivAndModFollowPython) {
  ShapeProgram fd = one("('floordiv', ('slot', 0), ('slot', 1))");
  ShapeProgram md = one("('mod', ('slot', 0), ('slot', 1))");
  // ('eq', <op>, ('int', expected)) programs are built per case below; here compare results through eq.
  for (int64_t a = -9; a <= 9; ++a) {
    for (int64_t b = -4; b <= 4; ++b) {
      if (b == 0) continue;
      int64_t q = py::eval(std::to_string(a) + " // " + std::to_string(b)).cast<int64_t>();
      int64_t r = py::eval(std::to_string(a) + " % " + std::to_string(b)).cast<int64_t>();
      EXPECT_EQ(run1("('eq', ('floordiv', ('slot', 0), ('slot', 1)), ('slot', 2))", {a, b, q}), ShapeResult::True)
          << a << " // " << b << " = " << q;
      EXPECT_EQ(run1("('eq', ('mod', ('slot', 0), ('slot', 1)), ('slot', 2))", {a, b, r}), ShapeResult::True)
          << a << " % " << b << " = " << r;
      EXPECT_EQ(run1("('eq', ('mod', ('slot', 0), ('slot', 1)), ('slot', 2))", {a, b, r + 1}), ShapeResult::False);
    }
  }
  int64_t zero[2] = {5, 0};
  EXPECT_EQ(fd.eval(0, zero), ShapeResult::DivisionByZero);
  EXPECT_EQ(md.eval(0, zero), ShapeResult::DivisionByZero);
  int64_t min_neg1[2] = {INT64_MIN, -1};
  EXPECT_EQ(fd.eval(0, min_neg1), ShapeResult::Overflow);
  EXPECT_EQ(run1("('eq', ('mod', ('slot', 0), ('slot', 1)), ('int', 0))", {INT64_MIN, -1}), ShapeResult::True);
  EXPECT_EQ(run1("('eq', ('floordiv', ('slot', 0), ('slot', 1)), ('slot', 2))", {INT64_MIN, 2, INT64_MIN / 2}),
            ShapeResult::True);
}

TEST(ShapeEval, OverflowIsAnErrorNotUB) {
  EXPECT_EQ(run1("('add', ('slot', 0), ('int', 1))", {INT64_MAX}), ShapeResult::Overflow);
  EXPECT_EQ(run1("('add', ('slot', 0), ('int', -1))", {INT64_MIN}), ShapeResult::Overflow);
  EXPECT_EQ(run1("('add', ('slot', 0), ('int', -1), ('int', 1))", {INT64_MAX}), ShapeResult::True);
  EXPECT_EQ(run1("('mul', ('slot', 0), ('slot', 1))", {INT64_MAX / 2 + 1, 2}), ShapeResult::Overflow);
  EXPECT_EQ(run1("('mul', ('slot', 0), ('slot', 1))", {INT64_MIN, -1}), ShapeResult::Overflow);
  EXPECT_EQ(run1("('neg', ('slot', 0))", {INT64_MIN}), ShapeResult::Overflow);
  EXPECT_EQ(run1("('abs', ('slot', 0))", {INT64_MIN}), ShapeResult::Overflow);
  EXPECT_EQ(run1("('eq', ('abs', ('slot', 0)), ('int', 7))", {-7}), ShapeResult::True);
  EXPECT_EQ(run1("('eq', ('neg', ('slot', 0)), ('int', -7))", {7}), ShapeResult::True);
  // pow: exact up to the int64 edge, an error past it, and for negative exponents
  EXPECT_EQ(run1("('eq', ('pow', ('slot', 0), ('slot', 1)), ('int', 2**62))", {2, 62}), ShapeResult::True);
  EXPECT_EQ(run1("('pow', ('slot', 0), ('slot', 1))", {2, 63}), ShapeResult::Overflow);
  EXPECT_EQ(run1("('eq', ('pow', ('slot', 0), ('slot', 1)), ('int', -2**63))", {-2, 63}), ShapeResult::True);
  EXPECT_EQ(run1("('pow', ('slot', 0), ('slot', 1))", {3, 40}), ShapeResult::Overflow);
  EXPECT_EQ(run1("('eq', ('pow', ('slot', 0), ('slot', 1)), ('int', 3**39))", {3, 39}), ShapeResult::True);
  EXPECT_EQ(run1("('eq', ('pow', ('slot', 0), ('slot', 1)), ('int', 1))", {0, 0}), ShapeResult::True);
  EXPECT_EQ(run1("('eq', ('pow', ('slot', 0), ('slot', 1)), ('int', 1))", {-1, INT64_MAX}), ShapeResult::False);
  EXPECT_EQ(run1("('eq', ('pow', ('slot', 0), ('slot', 1)), ('int', -1))", {-1, INT64_MAX}), ShapeResult::True);
  EXPECT_EQ(run1("('pow', ('slot', 0), ('slot', 1))", {2, -1}), ShapeResult::NegativeExponent);
}

TEST(ShapeEval, ComparisonsAndLogic) {
  struct Case {
    const char* op;
    bool lt, eq, gt;  // result for 1 op 2, 2 op 2, 3 op 2
  } cases[] = {{"eq", false, true, false}, {"ne", true, false, true}, {"lt", true, false, false},
               {"le", true, true, false},  {"gt", false, false, true}, {"ge", false, true, true}};
  for (const Case& c : cases) {
    std::string p = std::string("('") + c.op + "', ('slot', 0), ('int', 2))";
    EXPECT_EQ(run1(p, {1}) == ShapeResult::True, c.lt) << p;
    EXPECT_EQ(run1(p, {2}) == ShapeResult::True, c.eq) << p;
    EXPECT_EQ(run1(p, {3}) == ShapeResult::True, c.gt) << p;
  }
  EXPECT_EQ(run1("('not', ('eq', ('slot', 0), ('int', 2)))", {2}), ShapeResult::False);
  EXPECT_EQ(run1("('bool', True)", {}), ShapeResult::True);
  EXPECT_EQ(run1("('bool', False)", {}), ShapeResult::False);
  EXPECT_EQ(run1("('eq', ('max', ('slot', 0), ('slot', 1), ('int', 4)), ('int', 9))", {9, -3}), ShapeResult::True);
  EXPECT_EQ(run1("('eq', ('min', ('slot', 0), ('slot', 1), ('int', 4)), ('int', -3))", {9, -3}), ShapeResult::True);
  EXPECT_EQ(run1("('eq', ('add', ('slot', 0), ('slot', 1), ('int', 4)), ('int', 10))", {9, -3}), ShapeResult::True);
  // and / or short-circuit like Python: the skipped operand's division by zero never runs
  const char* guarded_mod = "('or', ('eq', ('slot', 0), ('int', 0)), ('eq', ('mod', ('int', 7), ('slot', 0)), ('int', 1)))";
  EXPECT_EQ(run1(guarded_mod, {0}), ShapeResult::True);
  EXPECT_EQ(run1(guarded_mod, {3}), ShapeResult::True);
  EXPECT_EQ(run1(guarded_mod, {2}), ShapeResult::True);
  EXPECT_EQ(run1(guarded_mod, {4}), ShapeResult::False);
  const char* guarded_and = "('and', ('ne', ('slot', 0), ('int', 0)), ('eq', ('mod', ('int', 8), ('slot', 0)), ('int', 0)))";
  EXPECT_EQ(run1(guarded_and, {0}), ShapeResult::False);
  EXPECT_EQ(run1(guarded_and, {4}), ShapeResult::True);
  EXPECT_EQ(run1(guarded_and, {3}), ShapeResult::False);
  EXPECT_EQ(run1("('and', ('slot', 0), ('slot', 1), ('slot', 2))", {1, 5, -1}), ShapeResult::True);
  EXPECT_EQ(run1("('and', ('slot', 0), ('slot', 1), ('slot', 2))", {1, 0, -1}), ShapeResult::False);
  EXPECT_EQ(run1("('or', ('slot', 0), ('slot', 1), ('slot', 2))", {0, 0, 0}), ShapeResult::False);
  EXPECT_EQ(run1("('or', ('slot', 0), ('slot', 1), ('slot', 2))", {0, 0, 3}), ShapeResult::True);
  EXPECT_EQ(run1("('and', ('slot', 0))", {7}), ShapeResult::True);
  // a value used as a boolean is true when non-zero (an and inside arithmetic is 0 / 1)
  EXPECT_EQ(run1("('eq', ('add', ('and', ('slot', 0), ('slot', 1)), ('int', 1)), ('int', 2))", {5, 6}), ShapeResult::True);
}

TEST(ShapeCompile, MalformedProgramsAreValueErrorsNamingTheNode) {
  EXPECT_NE(build_error("('foo', ('slot', 0))").find("unknown operator 'foo' in node ('foo', ('slot', 0))"),
            std::string::npos);
  EXPECT_NE(build_error("('eq', ('slot', 0), ('bar', 1))").find("('bar', 1)"), std::string::npos);
  EXPECT_NE(build_error("('eq', ('slot', 0))").find("'eq' takes 2 operands, got 1"), std::string::npos);
  EXPECT_NE(build_error("('neg', ('slot', 0), ('slot', 1))").find("'neg' takes 1 operand"), std::string::npos);
  EXPECT_NE(build_error("('add',)").find("'add' takes 1 or more operands"), std::string::npos);
  EXPECT_NE(build_error("('slot', 2)").find("slot index out of range (2 slots)"), std::string::npos);
  EXPECT_NE(build_error("('slot', -1)").find("slot index out of range"), std::string::npos);
  EXPECT_NE(build_error("('slot', 'a')").find("slot index must be an int"), std::string::npos);
  EXPECT_NE(build_error("('int', 2**63)").find("constant does not fit in int64"), std::string::npos);
  EXPECT_NE(build_error("('int', True)").find("constant must be an int"), std::string::npos);
  EXPECT_NE(build_error("('bool', 1)").find("'bool' takes True or False"), std::string::npos);
  EXPECT_NE(build_error("['slot', 0]").find("expected a tuple"), std::string::npos);
  EXPECT_NE(build_error("()").find("expected a tuple"), std::string::npos);
  EXPECT_NE(build_error("(1, 2)").find("expected a tuple"), std::string::npos);
  EXPECT_NE(build_error("('eq', 1, 2)").find("in node 1"), std::string::npos);
  EXPECT_NE(build_error("__import__('functools').reduce(lambda a, _: ('not', a), range(2000), ('slot', 0))").find("nesting deeper than"),
            std::string::npos);
  EXPECT_EQ(build_error("('le', ('int', 2), ('slot', 0))"), "");
  EXPECT_NE(build_error("('le', ('int', 2), ('slot', 0))", 0).find("program 0"), std::string::npos);
  // arguments other than the programs
  py::list exprs;
  exprs.append(eval_py("('bool', True)"));
  EXPECT_THROW(ShapeProgram(int_slots(1), exprs.ptr(), Py_None, {}), std::invalid_argument);         // no text
  EXPECT_THROW(ShapeProgram(int_slots(1), exprs.ptr(), Py_None, {"a", "b"}), std::invalid_argument);  // one too many
  py::object not_callable = py::int_(3);
  EXPECT_THROW(ShapeProgram(int_slots(1), exprs.ptr(), not_callable.ptr(), {"a"}), std::invalid_argument);
  py::object a_dict = py::dict();
  EXPECT_THROW(ShapeProgram(int_slots(1), a_dict.ptr(), Py_None, {}), std::invalid_argument);
  EXPECT_EQ(PyErr_Occurred(), nullptr);
}

TEST(ShapeGuard, ReadsSlotsFromTheFrameAndExplainsFailures) {
  py::object x = torch().attr("randn")(6, 4);
  py::object n = py::int_(3);
  std::vector<ShapeSlot> slots = {{Source::local(0, "x"), ShapeSlot::Kind::Size, 0},
                                  {Source::local(0, "x"), ShapeSlot::Kind::Stride, 0},
                                  {Source::local(0, "x"), ShapeSlot::Kind::StorageOffset, 0},
                                  {Source::local(1, "n"), ShapeSlot::Kind::Int, 0}};
  py::list exprs;
  exprs.append(eval_py("('le', ('int', 2), ('slot', 0))"));
  exprs.append(eval_py("('eq', ('mod', ('slot', 0), ('slot', 3)), ('int', 0))"));
  exprs.append(eval_py("('eq', ('add', ('slot', 1), ('slot', 2)), ('int', 4))"));
  GuardSet g;
  g.add(shape_guard(slots, exprs.ptr(), Py_None, {"2 <= L['x'].size()[0]", "Eq(Mod(s0, n), 0)", "stride + offset == 4"}));
  EXPECT_EQ(g.describe(), (std::vector<std::string>{"SHAPE_ENV: 2 <= L['x'].size()[0]", "SHAPE_ENV: Eq(Mod(s0, n), 0)",
                                                    "SHAPE_ENV: stride + offset == 4"}));
  auto check = [&](py::object a, py::object b) {
    Frame f;
    f.slots = {a.ptr(), b.ptr()};
    std::string why;
    bool ok = g.check(f.view(), &why);
    EXPECT_EQ(ok, g.check(f.view()));
    EXPECT_EQ(PyErr_Occurred(), nullptr);
    return ok ? std::string("ok") : why;
  };
  EXPECT_EQ(check(x, n), "ok");
  EXPECT_EQ(check(torch().attr("randn")(9, 4), n), "ok");
  EXPECT_EQ(check(torch().attr("randn")(1, 4), py::int_(1)),
            "SHAPE_ENV: 2 <= L['x'].size()[0] failed (L['x'].size()[0] = 1)");
  EXPECT_EQ(check(torch().attr("randn")(8, 4), n),
            "SHAPE_ENV: Eq(Mod(s0, n), 0) failed (L['x'].size()[0] = 8, L['n'] = 3)");
  EXPECT_EQ(check(x, py::int_(0)),
            "SHAPE_ENV: Eq(Mod(s0, n), 0) failed: division by zero (L['x'].size()[0] = 6, L['n'] = 0)");
  py::object offset = torch().attr("randn")(13).attr("__getitem__")(py::slice(1, 13, 1)).attr("view")(6, 2);
  EXPECT_EQ(check(offset, n),
            "SHAPE_ENV: stride + offset == 4 failed (L['x'].stride()[0] = 2, L['x'].storage_offset() = 1)");
  EXPECT_EQ(check(x, py::bool_(true)), "SHAPE_ENV: L['n'] cannot be read: not an int");
  EXPECT_EQ(check(x, eval_py("2**64")), "SHAPE_ENV: L['n'] cannot be read: does not fit in int64");
  EXPECT_EQ(check(x, eval_py("type('I', (int,), {})(3)")), "SHAPE_ENV: L['n'] cannot be read: not an int");
  EXPECT_EQ(check(torch().attr("randn")(6), n),
            "SHAPE_ENV: stride + offset == 4 failed (L['x'].stride()[0] = 1, L['x'].storage_offset() = 0)");
  EXPECT_EQ(check(torch().attr("randn")(py::tuple()), n),
            "SHAPE_ENV: L['x'].size()[0] cannot be read: not a tensor with that dimension");
  EXPECT_EQ(check(py::int_(6), n), "SHAPE_ENV: L['x'].size()[0] cannot be read: not a tensor with that dimension");
  Frame unbound;
  unbound.slots = {nullptr, n.ptr()};
  std::string why;
  EXPECT_FALSE(g.check(unbound.view(), &why));
  EXPECT_EQ(why, "SHAPE_ENV: L['x'].size()[0] cannot be read: value is missing");
}

TEST(ShapeGuard, FallbackSeesSlotValuesAndItsErrorsFailTheGuard) {
  py::object x = torch().attr("randn")(6, 4);
  std::vector<ShapeSlot> slots = {{Source::local(0, "x"), ShapeSlot::Kind::Size, 0},
                                  {Source::local(0, "x"), ShapeSlot::Kind::Size, 1}};
  py::list exprs;
  exprs.append(eval_py("('ge', ('slot', 0), ('int', 2))"));
  py::object fallback = eval_py("lambda v: (v[0] * v[1]) ** 0.5 == int((v[0] * v[1]) ** 0.5) or 1 // (v[0] - 5)");
  GuardSet g;
  g.add(shape_guard(slots, exprs.ptr(), fallback.ptr(), {"s0 >= 2", "sqrt(s0*s1) is an int"}));
  EXPECT_EQ(g.describe().size(), 2u);
  auto check = [&](int a, int b) {
    py::object t = torch().attr("randn")(a, b);
    Frame f;
    f.slots = {t.ptr()};
    std::string why;
    bool ok = g.check(f.view(), &why);
    EXPECT_EQ(PyErr_Occurred(), nullptr);
    return ok ? std::string("ok") : why;
  };
  EXPECT_EQ(check(4, 9), "ok");
  EXPECT_EQ(check(6, 4), "ok");  // 1 // (6 - 5)
  EXPECT_EQ(check(7, 4), "SHAPE_ENV: sqrt(s0*s1) is an int failed (L['x'].size()[0] = 7, L['x'].size()[1] = 4)");
  EXPECT_EQ(check(5, 3),
            "SHAPE_ENV: sqrt(s0*s1) is an int raised an exception (ZeroDivisionError: integer division or modulo by "
            "zero) (L['x'].size()[0] = 5, L['x'].size()[1] = 3)");
  EXPECT_EQ(check(1, 1), "SHAPE_ENV: s0 >= 2 failed (L['x'].size()[0] = 1)");  // programs run first
}

TEST(ShapeGuard, FloatSlotsReachTheFallbackAsFloatsAndNoProgramReadsThem) {
  std::vector<ShapeSlot> slots = {{Source::local(0, "t"), ShapeSlot::Kind::Float, 0}};
  py::list bad;
  bad.append(eval_py("('ge', ('slot', 0), ('int', 2))"));
  EXPECT_THROW(ShapeProgram(slots, bad.ptr(), Py_None, {"t >= 2"}), std::invalid_argument);
  py::list none;
  py::object fallback = eval_py("lambda v: type(v[0]) is float and v[0] <= 0.5 and v[0] == v[0]");
  GuardSet g;
  g.add(shape_guard(slots, none.ptr(), fallback.ptr(), {"L['t'] <= 0.5", "not math.isnan(L['t'])"}));
  auto check = [&](py::object value) {
    Frame f;
    f.slots = {value.ptr()};
    std::string why;
    bool ok = g.check(f.view(), &why);
    EXPECT_EQ(PyErr_Occurred(), nullptr);
    return ok ? std::string("ok") : why;
  };
  EXPECT_EQ(check(py::float_(0.5)), "ok");
  EXPECT_EQ(check(py::float_(0.25)), "ok");
  EXPECT_EQ(check(py::float_(0.5000000000000001)),
            "SHAPE_ENV: L['t'] <= 0.5; not math.isnan(L['t']) failed (L['t'] = 0.5000000000000001)");
  EXPECT_EQ(check(eval_py("float('nan')")),
            "SHAPE_ENV: L['t'] <= 0.5; not math.isnan(L['t']) failed (L['t'] = nan)");
  EXPECT_EQ(check(py::int_(0)), "SHAPE_ENV: L['t'] cannot be read: not a float");
}

TEST(TensorMatchDynamic, MaskedDimensionsAcceptAnySizeOthersStillFail) {
  py::object ex = torch().attr("randn")(2, 3, 4);
  auto mk = [&](uint64_t sizes, uint64_t strides) {
    GuardSet g;
    g.add(tensor_match(Source::local(0, "x"), ex.ptr(), sizes, strides));
    return g;
  };
  auto verdict = [&](GuardSet& g, py::object v) {
    Frame f;
    f.slots = {v.ptr()};
    std::string why;
    bool ok = g.check(f.view(), &why);
    EXPECT_EQ(ok, g.check(f.view())) << why;  // fast path (no reason) and full check agree
    return ok ? std::string("ok") : why;
  };
  GuardSet stat = mk(0, 0);
  GuardSet dyn0 = mk(1, 0b11);  // size 0 and strides 0, 1 are dynamic
  EXPECT_EQ(stat.describe(), std::vector<std::string>{"local 'x' TENSOR_MATCH"});
  EXPECT_EQ(dyn0.describe(), std::vector<std::string>{"local 'x' TENSOR_MATCH (dynamic sizes [0], dynamic strides [0, 1])"});
  py::object bigger = torch().attr("randn")(7, 3, 4);
  EXPECT_EQ(verdict(dyn0, bigger), "ok");
  EXPECT_EQ(verdict(dyn0, ex), "ok");
  EXPECT_EQ(verdict(stat, bigger), "local 'x' TENSOR_MATCH: size mismatch at index 0: expected [2, 3, 4], actual [7, 3, 4]");
  EXPECT_EQ(verdict(dyn0, torch().attr("randn")(7, 3, 5)),
            "local 'x' TENSOR_MATCH (dynamic sizes [0], dynamic strides [0, 1]): size mismatch at index 2: expected "
            "[?, 3, 4], actual [7, 3, 5]");
  // stride 2 stays static: a value with a different last stride fails
  py::object strided = torch().attr("randn")(7, 3, 8).attr("__getitem__")(
      py::make_tuple(py::ellipsis(), py::slice(0, 8, 2)));
  EXPECT_EQ(verdict(dyn0, strided),
            "local 'x' TENSOR_MATCH (dynamic sizes [0], dynamic strides [0, 1]): stride mismatch at index 2: expected "
            "[?, ?, 1], actual [24, 8, 2]");
  EXPECT_EQ(verdict(dyn0, torch().attr("randn")(7, 3)),
            "local 'x' TENSOR_MATCH (dynamic sizes [0], dynamic strides [0, 1]): ndim mismatch: expected 3, actual 2");
  EXPECT_EQ(verdict(dyn0, bigger.attr("double")()),
            "local 'x' TENSOR_MATCH (dynamic sizes [0], dynamic strides [0, 1]): dtype mismatch: expected Float, actual "
            "Double");
  // a dynamic size with static strides: a new size 0 passes while the strides stay (3*4, 4, 1)
  GuardSet size_only = mk(1, 0);
  EXPECT_EQ(verdict(size_only, bigger), "ok");
  // bits past ndim are dropped, so they change neither verdicts nor the readable form
  GuardSet extra = mk(1 | (uint64_t{1} << 40), 0);
  EXPECT_EQ(extra.describe(), std::vector<std::string>{"local 'x' TENSOR_MATCH (dynamic sizes [0])"});
}
