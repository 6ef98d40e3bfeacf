// test_guards.cpp — GoogleTest suite for csrc/guards: fast-path verdicts of GuardSet::check equal the
// full Guard::check verdicts (TENSOR_MATCH, NO_TENSOR_ALIASING), with the same failure reasons.
#include <gtest/gtest.h>
#include <pybind11/embed.h>

#include <string>
#include <vector>

#include "guards/guard.h"

namespace py = pybind11;
using namespace cdynamo::guards;

namespace {

py::object torch() { return py::module_::import("torch"); }
py::object randn(int n) { return torch().attr("randn")(n); }

// A frame view over `slots` (borrowed: the test keeps the objects alive).
struct Frame {
  std::vector<PyObject*> slots;
  FrameView view() {
    FrameView fv;
    fv.localsplus = slots.data();
    return fv;
  }
};

// TENSOR_MATCH on locals 0..n-1 plus NO_TENSOR_ALIASING over them, built from `values`.
GuardSet tensor_guards(const std::vector<py::object>& values) {
  GuardSet g;
  std::vector<SourcePtr> srcs;
  for (size_t i = 0; i < values.size(); ++i) {
    std::string name = "x";
    name += std::to_string(i);  // (not "x" + ...: GCC 12 -Wrestrict false positive)
    auto s = Source::local(static_cast<int>(i), name);
    g.add(tensor_match(s, values[i].ptr()));
    srcs.push_back(s);
  }
  if (srcs.size() > 1) g.add(no_aliasing(srcs));
  return g;
}

Frame frame_of(const std::vector<py::object>& values) {
  Frame f;
  for (const auto& v : values) f.slots.push_back(v.ptr());
  return f;
}

}  // namespace

TEST(Guards, TensorMatchPassesAndExplainsFailures) {
  std::vector<py::object> xs;
  for (int i = 0; i < 20; ++i) xs.push_back(randn(3));
  GuardSet g = tensor_guards(xs);
  Frame f = frame_of(xs);
  EXPECT_TRUE(g.check(f.view()));

  std::vector<py::object> other = xs;
  other[7] = randn(4);  // size mismatch
  Frame f2 = frame_of(other);
  std::string why;
  EXPECT_FALSE(g.check(f2.view()));
  EXPECT_FALSE(g.check(f2.view(), &why));
  EXPECT_EQ(why, "local 'x7' TENSOR_MATCH: size mismatch at index 0: expected [3], actual [4]");

  other[7] = xs[7].attr("double")();
  Frame f3 = frame_of(other);
  EXPECT_FALSE(g.check(f3.view(), &why));
  EXPECT_EQ(why, "local 'x7' TENSOR_MATCH: dtype mismatch: expected Float, actual Double");

  other[7] = py::int_(3);
  Frame f4 = frame_of(other);
  EXPECT_FALSE(g.check(f4.view(), &why));
  EXPECT_EQ(why, "local 'x7' TENSOR_MATCH: expected a tensor, got int");

  other[7] = xs[7].attr("requires_grad_")();
  Frame f5 = frame_of(other);
  EXPECT_FALSE(g.check(f5.view(), &why));
  EXPECT_EQ(why, "local 'x7' TENSOR_MATCH: requires_grad mismatch: expected False");
  xs[7].attr("requires_grad_")(false);

  Frame f6 = frame_of(xs);
  f6.slots[3] = nullptr;  // unbound local
  EXPECT_FALSE(g.check(f6.view(), &why));
  EXPECT_EQ(why, "local 'x3' TENSOR_MATCH: value is missing");

  // stride mismatch: a transposed 3x2 tensor against a contiguous 2x3 one
  GuardSet g2;
  g2.add(tensor_match(Source::local(0, "a"), torch().attr("randn")(2, 3).ptr()));
  py::object transposed = torch().attr("randn")(3, 2).attr("t")();
  Frame f7;
  f7.slots = {transposed.ptr()};
  EXPECT_FALSE(g2.check(f7.view(), &why));
  EXPECT_EQ(why, "local 'a' TENSOR_MATCH: stride mismatch at index 0: expected [3, 1], actual [1, 2]");
}

TEST(Guards, NoAliasingAtEverySize) {
  for (int n : {2, 5, 8, 9, 50, 300, 600}) {
    std::vector<py::object> xs;
    for (int i = 0; i < n; ++i) xs.push_back(randn(2));
    GuardSet g = tensor_guards(xs);
    Frame ok = frame_of(xs);
    std::string ok_why;
    EXPECT_TRUE(g.check(ok.view())) << n;
    EXPECT_TRUE(g.check(ok.view(), &ok_why)) << ok_why;
    for (int dup : {1, n - 1}) {
      Frame bad = frame_of(xs);
      bad.slots[static_cast<size_t>(dup)] = bad.slots[0];
      std::string why;
      EXPECT_FALSE(g.check(bad.view())) << n;
      EXPECT_FALSE(g.check(bad.view(), &why)) << n;
      EXPECT_NE(why.find("tensor inputs alias each other"), std::string::npos) << why;
      EXPECT_EQ(why.rfind("NO_TENSOR_ALIASING(local 'x0', ", 0), 0u) << why;
    }
  }
}

TEST(Guards, ItemSourcesOfTuplesListsAndSubclasses) {
  py::object a = randn(2), b = randn(2);
  auto xs = Source::local(0, "xs");
  GuardSet g;
  g.add(tensor_match(Source::item(xs, 0), a.ptr()));
  g.add(tensor_match(Source::item(xs, 1), b.ptr()));
  g.add(no_aliasing({Source::item(xs, 0), Source::item(xs, 1)}));
  py::object subclass = py::module_::import("collections").attr("UserList");
  std::string why;
  for (py::object seq : {py::object(py::make_tuple(a, b)), py::object(py::list(py::make_tuple(a, b))),
                         subclass(py::make_tuple(a, b))}) {
    Frame f;
    f.slots = {seq.ptr()};
    EXPECT_TRUE(g.check(f.view()));
    EXPECT_TRUE(g.check(f.view(), &why));
  }
  Frame same;
  py::object dup = py::make_tuple(a, a);
  same.slots = {dup.ptr()};
  EXPECT_FALSE(g.check(same.view(), &why));
  EXPECT_EQ(why, "NO_TENSOR_ALIASING(local 'xs'[0], local 'xs'[1]): tensor inputs alias each other");
  Frame shorter;
  py::object one = py::make_tuple(a);
  shorter.slots = {one.ptr()};
  EXPECT_FALSE(g.check(shorter.view(), &why));
  EXPECT_EQ(why, "local 'xs'[1] TENSOR_MATCH: value is missing");
}

// Guards on h.cfg.a and h.cfg.b, whose bases are two Source objects for the same path (two reads of h.cfg in
// the traced code): one check fetches h.cfg once; Guard::check alone (no memo) fetches it each time.
TEST(Guards, SharedBasePathIsFetchedOncePerCheck) {
  py::dict ns;
  py::exec(R"(
class Cfg:
    a = 2
    b = 3
class Holder:
    fetches = 0
    @property
    def cfg(self):
        Holder.fetches += 1
        return Cfg
h = Holder()
)", ns);
  py::object h = ns["h"];
  auto local_h = Source::local(0, "h");
  GuardSet g;
  g.add(equals_match(Source::attr(Source::attr(local_h, "cfg"), "a"), py::int_(2).ptr()));
  g.add(equals_match(Source::attr(Source::attr(local_h, "cfg"), "b"), py::int_(3).ptr()));
  Frame f = frame_of({h});
  auto fetches = [&] { return ns["Holder"].attr("fetches").cast<int>(); };
  EXPECT_TRUE(g.check(f.view()));
  EXPECT_EQ(fetches(), 1);
  EXPECT_TRUE(g.check(f.view()));
  EXPECT_EQ(fetches(), 2);
  ns["Cfg"].attr("b") = py::int_(4);
  std::string why;
  EXPECT_FALSE(g.check(f.view(), &why));
  EXPECT_EQ(fetches(), 3);
  EXPECT_NE(why.find("b"), std::string::npos) << why;
}

// DictKey / DictValue: the entry at a position of a dict (or subclass) in its storage order, no Python code; a
// DUPLICATE_INPUT between a local and the key at a position is checked by the tree and the flat list alike.
TEST(Guards, DictKeyAndValueSourcesReadByPosition) {
  py::object a = randn(2), b = randn(2), va = randn(2), vb = randn(2);
  py::dict d;
  d[a] = va;
  d[b] = vb;
  auto memo = Source::local(0, "memo");
  auto x = Source::local(1, "x");
  Frame f;
  f.slots = {d.ptr(), b.ptr()};
  FrameView fv = f.view();
  PyObject* k1 = Source::dict_key(memo, 1)->fetch(fv);  // new reference
  PyObject* v1 = Source::dict_value(memo, 1)->fetch(fv);  // new reference
  EXPECT_EQ(k1, b.ptr());
  EXPECT_EQ(v1, vb.ptr());
  Py_XDECREF(k1);
  Py_XDECREF(v1);
  EXPECT_EQ(Source::dict_key(memo, 2)->fetch(fv), nullptr);  // past the end: missing
  EXPECT_EQ(Source::dict_key(memo, 1)->describe(), "key 1 of local 'memo'");
  EXPECT_EQ(Source::dict_value(memo, 1)->dynamo_name(), "L['memo'][list(L['memo'].keys())[1]]");
  GuardSet g;
  g.add(same_object(x, Source::dict_key(memo, 1)));
  g.add(tensor_match(Source::dict_value(memo, 1), vb.ptr()));
  std::string why;
  EXPECT_TRUE(g.check(fv));
  EXPECT_TRUE(g.check(fv, &why));
  f.slots = {d.ptr(), a.ptr()};  // x is the key at position 0, not 1
  EXPECT_FALSE(g.check(f.view()));
  EXPECT_FALSE(g.check(f.view(), &why));
  EXPECT_NE(why.find("local 'x' is key 1 of local 'memo'"), std::string::npos) << why;
  py::object not_a_dict = py::make_tuple(a, b);
  f.slots = {not_a_dict.ptr(), b.ptr()};
  EXPECT_FALSE(g.check(f.view()));
}

// Each kind carries its own payload (guard_kinds.h): the builders fill it, its accessor reads it, another
// family's accessor and a constructor given another kind's payload refuse.
TEST(Guards, PayloadIsTheKindsOwn) {
  auto x = Source::local(0, "x");
  py::list items = py::list(py::make_tuple(1, 2, 3));
  Guard len = length_match(x, items.ptr());
  EXPECT_EQ(len.length().type.get(), reinterpret_cast<PyObject*>(&PyList_Type));
  EXPECT_EQ(len.length().length, 3);
  EXPECT_EQ(len.label, "LIST_LENGTH");
  EXPECT_THROW(len.type(), std::logic_error);
  EXPECT_THROW(len.identity(), std::logic_error);
  EXPECT_THROW(len.related(), std::logic_error);
  EXPECT_EQ(len.tensor_or_null(), nullptr);
  Guard ty = type_match(x, items.ptr());
  EXPECT_EQ(ty.type().type.get(), reinterpret_cast<PyObject*>(&PyList_Type));
  EXPECT_THROW(ty.length(), std::logic_error);
  py::object t = randn(2);
  Guard tm = tensor_match(x, t.ptr());
  EXPECT_EQ(tm.tensor_or_null(), tm.tensor().match.get());
  EXPECT_NE(tm.tensor_or_null(), nullptr);
  Guard attr = has_attr(x, "weight", false);
  EXPECT_EQ(std::string(PyUnicode_AsUTF8(attr.attr().name.get())), "weight");
  EXPECT_FALSE(attr.attr().present);
  Guard key = dict_contains(x, py::str("k").ptr(), true);
  EXPECT_TRUE(key.key().present);
  EXPECT_THROW(key.attr(), std::logic_error);
  Guard alias = no_aliasing({x, Source::local(1, "y")}, true);
  EXPECT_TRUE(alias.distinct().storages);
  EXPECT_EQ(alias.related().size(), 2u);
  Guard dup = same_object(x, Source::local(1, "y"));
  EXPECT_EQ(&dup.related(), &dup.same().sources);
  EXPECT_THROW(dup.distinct(), std::logic_error);
  EXPECT_EQ(grad_mode_guard().grad_mode().enabled, grad_mode_enabled());
  EXPECT_EQ(default_dtype_guard().default_dtype().code, default_dtype_code());
  EXPECT_THROW(default_dtype_guard().autocast(), std::logic_error);
  EXPECT_THROW(Guard(GuardKind::TypeMatch, x, "TYPE_MATCH", LengthCheck{}), std::logic_error);
  EXPECT_THROW(Guard(GuardKind::NoAliasing, nullptr, "NO_TENSOR_ALIASING", SameCheck{}), std::logic_error);
  EXPECT_NO_THROW(Guard(GuardKind::SameObject, nullptr, "DUPLICATE_INPUT", SameCheck{}));
  EXPECT_THROW(Guard(GuardKind::ShapeEnv, nullptr, "SHAPE_ENV", TypeCheck{}), std::logic_error);
  EXPECT_THROW(Guard(GuardKind::TensorMatch, x, "TENSOR_MATCH", ShapeCheck()), std::logic_error);
}

// What a payload owns: ID_MATCH holds a user object weakly (the guard dies with it) and a module strongly;
// EQUALS_MATCH owns its constant until the guard is destroyed; a moved guard keeps what it held.
TEST(Guards, PayloadReferencesAreOwnedAsStated) {
  py::dict ns;
  py::exec("class Obj:\n    pass\nobj = Obj()\n", ns);
  py::object obj = ns["obj"];
  const Py_ssize_t before = Py_REFCNT(obj.ptr());
  {
    Guard id = id_match(Source::local(0, "o"), obj.ptr());
    EXPECT_EQ(Py_REFCNT(obj.ptr()), before);  // weakly held
    EXPECT_TRUE(id.identity().weak);
    EXPECT_FALSE(id.identity().strong);
    EXPECT_EQ(id.identity().object, obj.ptr());
    EXPECT_FALSE(id.dead());
    Guard moved(std::move(id));
    EXPECT_EQ(moved.identity().object, obj.ptr());
    ns.attr("pop")("obj");
    obj = py::none();
    EXPECT_TRUE(moved.dead());
    std::string why;
    PyObject* other = Py_None;  // borrowed
    EXPECT_FALSE(moved.check_value(other, &why));
    EXPECT_NE(why.find("has died"), std::string::npos) << why;
  }
  py::object mod = py::module_::import("math");
  const Py_ssize_t mod_before = Py_REFCNT(mod.ptr());
  {
    Guard id = id_match(Source::local(0, "m"), mod.ptr());
    EXPECT_EQ(id.label, "FUNCTION_MATCH");
    EXPECT_TRUE(id.identity().strong);
    EXPECT_FALSE(id.identity().weak);
    EXPECT_EQ(Py_REFCNT(mod.ptr()), mod_before + 1);
  }
  EXPECT_EQ(Py_REFCNT(mod.ptr()), mod_before);
  py::object big = py::reinterpret_steal<py::object>(PyLong_FromString("123456789123456789123456789", nullptr, 10));
  const Py_ssize_t big_before = Py_REFCNT(big.ptr());
  {
    Guard eq = equals_match(Source::local(0, "n"), big.ptr());
    EXPECT_EQ(Py_REFCNT(big.ptr()), big_before + 1);
    Guard moved(std::move(eq));
    EXPECT_EQ(Py_REFCNT(big.ptr()), big_before + 1);
    EXPECT_EQ(moved.constant().value.get(), big.ptr());
  }
  EXPECT_EQ(Py_REFCNT(big.ptr()), big_before);
}
