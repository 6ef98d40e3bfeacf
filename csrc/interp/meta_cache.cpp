// meta_cache.cpp — owns the shape-propagation memo (see meta_cache.h); the one interp translation unit
// that includes LibTorch headers (to read and create meta tensors without Python calls).
#include "interp/meta_cache.h"

#include <ATen/ATen.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstring>
#include <unordered_map>

namespace cdynamo::interp {

namespace {

struct Entry {
  std::vector<int64_t> sizes, strides;
  at::ScalarType dtype;
  bool requires_grad;
};

struct Cache {
  std::unordered_map<std::string, Entry> map;
  size_t hits = 0;
};

Cache& cache() {
  static auto* c = new Cache();  // process lifetime
  return *c;
}

constexpr size_t kMaxEntries = 1 << 16;

template <typename T>
void put(std::string& s, const T& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void put_str(std::string& s, const std::string& v) {
  put(s, v.size());
  s += v;
}

// Appends a constant exactly: its type and value. False for anything not keyable.
bool put_const(std::string& s, PyObject* o) {
  if (o == Py_None) {
    s += 'N';
  } else if (PyBool_Check(o)) {
    s += o == Py_True ? 'T' : 'F';
  } else if (PyLong_CheckExact(o)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return false;
    }
    s += 'i';
    put(s, v);
  } else if (PyFloat_CheckExact(o)) {
    s += 'f';
    put(s, PyFloat_AS_DOUBLE(o));
  } else if (PyUnicode_CheckExact(o)) {
    Py_ssize_t n = 0;
    const char* u = PyUnicode_AsUTF8AndSize(o, &n);  // borrowed buffer
    if (!u) {
      PyErr_Clear();
      return false;
    }
    s += 's';
    put_str(s, std::string(u, static_cast<size_t>(n)));
  } else if (PyTuple_Check(o) || PyList_Check(o)) {  // torch.Size, tuples and lists of constants
    s += PyList_Check(o) ? 'l' : 't';
    Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    put(s, n);
    for (Py_ssize_t i = 0; i < n; ++i)
      if (!put_const(s, PySequence_Fast_GET_ITEM(o, i))) return false;
  } else {
    // dtype / layout / memory_format / device and other torch constants: by type and repr.
    std::string type = Py_TYPE(o)->tp_name;
    if (type != "torch.dtype" && type != "torch.layout" && type != "torch.memory_format" && type != "torch.device")
      return false;
    PyObject* r = PyObject_Repr(o);  // new reference
    if (!r) {
      PyErr_Clear();
      return false;
    }
    const char* u = PyUnicode_AsUTF8(r);  // borrowed buffer of r
    bool ok = u != nullptr;
    if (ok) {
      s += 'o';
      put_str(s, type + ":" + u);
    }
    Py_DECREF(r);
    PyErr_Clear();
    return ok;
  }
  return true;
}

bool put_tensor(std::string& s, PyObject* obj) {
  if (!THPVariable_Check(obj)) return false;
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (t.layout() != at::kStrided || !t.is_meta()) return false;
  s += 'X';
  put(s, t.scalar_type());
  put(s, t.requires_grad());
  put(s, t.is_leaf());
  put(s, t.is_view());
  put(s, t.storage_offset());
  put(s, t.dim());
  for (int64_t v : t.sizes()) put(s, v);
  for (int64_t v : t.strides()) put(s, v);
  return true;
}

bool put_value(std::string& s, const ValuePtr& v) {
  switch (v->kind) {
    case VKind::Tensor: return put_tensor(s, v->tensor().example.ptr());
    case VKind::Const: return put_const(s, v->obj.ptr());
    case VKind::Tuple:
    case VKind::List: {
      s += v->kind == VKind::List ? 'L' : 'U';
      put(s, v->items.size());
      for (const auto& i : v->items)
        if (!put_value(s, i)) return false;
      return true;
    }
    default: return false;
  }
}

}  // namespace

MetaKey::MetaKey(const std::string& op_tag) {
  put_str(bytes, op_tag);
  put(bytes, c10::GradMode::is_enabled());
  put(bytes, c10::get_default_dtype_as_scalartype());
}

void MetaKey::add(const ValuePtr& v) {
  if (ok) ok = put_value(bytes, v);
}

void MetaKey::add_scalar_kind(const ValuePtr& v) {
  if (!ok) return;
  if (v->is_const()) {
    PyObject* o = v->obj.ptr();
    char tag = PyBool_Check(o) ? 'b' : PyLong_CheckExact(o) ? 'i' : PyFloat_CheckExact(o) ? 'f' : PyComplex_CheckExact(o) ? 'c' : 0;
    if (tag) {
      bytes += 'S';
      bytes += tag;
      return;
    }
  }
  add(v);
}

void MetaKey::add_kw(const std::string& name, const ValuePtr& v) {
  if (!ok) return;
  if (name == "out") {  // writes into an argument: never memoized
    ok = false;
    return;
  }
  bytes += 'k';
  put_str(bytes, name);
  ok = put_value(bytes, v);
}

py::object meta_cache_lookup(const MetaKey& key) {
  if (!key.ok) return py::object();
  auto& c = cache();
  auto it = c.map.find(key.bytes);
  if (it == c.map.end()) return py::object();
  const Entry& e = it->second;
  at::Tensor t = at::empty_strided(e.sizes, e.strides, at::TensorOptions().dtype(e.dtype).device(at::kMeta));
  if (e.requires_grad) {
    // A non-leaf, as the op's own result is: clone of a leaf that requires grad.
    t.set_requires_grad(true);
    t = t.clone();
  }
  ++c.hits;
  return py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(t)));  // new reference
}

void meta_cache_store(const MetaKey& key, py::handle result) {
  if (!key.ok || !THPVariable_CheckExact(result.ptr())) return;
  const at::Tensor& t = THPVariable_Unpack(result.ptr());
  if (!t.is_meta() || t.layout() != at::kStrided || t.is_view() || t.storage_offset() != 0 ||
      !t.is_non_overlapping_and_dense())
    return;
  if (t.requires_grad() && t.is_leaf()) return;  // only results of differentiable ops are reproduced
  auto& c = cache();
  if (c.map.size() >= kMaxEntries) c.map.clear();
  c.map.emplace(key.bytes, Entry{t.sizes().vec(), t.strides().vec(), t.scalar_type(), t.requires_grad()});
}

std::pair<size_t, size_t> meta_cache_stats() { return {cache().map.size(), cache().hits}; }

void meta_cache_clear() {
  cache().map.clear();
  cache().hits = 0;
}

}  // namespace cdynamo::interp
