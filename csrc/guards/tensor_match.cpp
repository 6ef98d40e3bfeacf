// tensor_match.cpp — owns TENSOR_MATCH evaluated on at::Tensor, meta example values and torch global
// state; the only translation unit of cdynamo that includes LibTorch headers.
#include "guards/tensor_match.h"

#include <ATen/ATen.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/autocast_mode.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/frontend/tracer.h>

#include <string>

namespace cdynamo::guards {

namespace {

c10::DispatchKeySet effective_keys(const at::Tensor& t) {
  auto tls = c10::impl::tls_local_dispatch_key_set();
  return (t.key_set() | tls.included_) - tls.excluded_;
}

// "[a, b, c]" without iostreams: on the GPU machine's torch 2.11 build, an ostringstream here crashed (its
// locale facets were null) when a guard failed.
template <typename T>
std::string join(c10::ArrayRef<T> v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// join() with "?" in place of the entries whose bit is set in `dynamic` (dimensions left to SHAPE_ENV).
std::string join_masked(c10::ArrayRef<int64_t> v, uint64_t dynamic) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + (i < 64 && (dynamic >> i & 1) ? std::string("?") : std::to_string(v[i]));
  return s + "]";
}

std::string bit_list(uint64_t bits) {
  std::string s = "[";
  for (int i = 0; i < 64; ++i)
    if (bits >> i & 1) s += (s.size() > 1 ? ", " : "") + std::to_string(i);
  return s + "]";
}

c10::DispatchKeySet from_raw(uint64_t bits) { return c10::DispatchKeySet(c10::DispatchKeySet::RAW, bits); }

bool fail(std::string* why, std::string msg) {
  if (why) *why = std::move(msg);
  return false;
}

}  // namespace

TlsKeys read_tls_keys() {
  auto tls = c10::impl::tls_local_dispatch_key_set();
  return TlsKeys{tls.included_.raw_repr(), tls.excluded_.raw_repr()};
}

std::unique_ptr<TensorMatch> TensorMatch::make(PyObject* obj, uint64_t dynamic_sizes, uint64_t dynamic_strides) {
  std::unique_ptr<TensorMatch> m(new TensorMatch());
  const at::Tensor& t = THPVariable_Unpack(obj);
  m->keys_ = effective_keys(t).raw_repr();
  m->dtype_ = static_cast<int8_t>(t.scalar_type());
  m->device_type_ = static_cast<int8_t>(t.device().type());
  m->device_index_ = static_cast<int8_t>(t.device().index());
  m->requires_grad_ = t.requires_grad();
  auto sizes = t.sizes();
  auto strides = t.strides();
  m->ndim_ = sizes.size();
  int64_t* dims = m->inline_dims_;
  if (sizes.size() > kInlineDims) {
    m->heap_dims_.resize(2 * sizes.size());
    dims = m->heap_dims_.data();
  }
  std::copy(sizes.begin(), sizes.end(), dims);
  std::copy(strides.begin(), strides.end(), dims + sizes.size());
  const uint64_t in_range = m->ndim_ >= 64 ? ~uint64_t{0} : (uint64_t{1} << m->ndim_) - 1;
  m->dyn_sizes_ = dynamic_sizes & in_range;
  m->dyn_strides_ = dynamic_strides & in_range;
  m->cls_ = Py_TYPE(obj);
  Py_INCREF(m->cls_);  // owned: keeps the class (and its identity) alive
  return m;
}

TensorMatch::~TensorMatch() { Py_XDECREF(cls_); }

std::string TensorMatch::describe_dynamic() const {
  std::string s;
  if (dyn_sizes_) s = "dynamic sizes " + bit_list(dyn_sizes_);
  if (dyn_strides_) s += (s.empty() ? "" : ", ") + std::string("dynamic strides ") + bit_list(dyn_strides_);
  return s;
}

bool TensorMatch::check(PyObject* value, std::string* why) const {
  if (Py_TYPE(value) != cls_)
    return fail(why, std::string("type mismatch: expected ") + cls_->tp_name + ", actual " + Py_TYPE(value)->tp_name);
  const at::Tensor& t = THPVariable_Unpack(value);
  auto dtype = static_cast<at::ScalarType>(dtype_);
  if (t.scalar_type() != dtype)
    return fail(why, std::string("dtype mismatch: expected ") + c10::toString(dtype) + ", actual " +
                         c10::toString(t.scalar_type()));
  c10::Device device(static_cast<c10::DeviceType>(device_type_), static_cast<c10::DeviceIndex>(device_index_));
  if (t.device() != device)
    return fail(why, "device mismatch: expected " + device.str() + ", actual " + t.device().str());
  if (t.requires_grad() != requires_grad_)
    return fail(why, std::string("requires_grad mismatch: expected ") + (requires_grad_ ? "True" : "False"));
  if (effective_keys(t) != from_raw(keys_)) return fail(why, "dispatch key set mismatch");
  c10::IntArrayRef want_sizes(dims(), ndim_);
  c10::IntArrayRef want_strides(dims() + ndim_, ndim_);
  auto sizes = t.sizes();
  if (sizes.size() != ndim_)
    return fail(why, "ndim mismatch: expected " + std::to_string(ndim_) + ", actual " + std::to_string(sizes.size()));
  // A dimension whose bit is set in dyn_sizes_ / dyn_strides_ is skipped (printed "?" in the expected list).
  for (size_t i = 0; i < ndim_; ++i) {
    if (sizes[i] != want_sizes[i] && !(i < 64 && (dyn_sizes_ >> i & 1)))
      return fail(why, "size mismatch at index " + std::to_string(i) + ": expected " +
                           join_masked(want_sizes, dyn_sizes_) + ", actual " + join(sizes));
  }
  auto strides = t.strides();
  for (size_t i = 0; i < ndim_; ++i) {
    if (strides[i] != want_strides[i] && !(i < 64 && (dyn_strides_ >> i & 1)))
      return fail(why, "stride mismatch at index " + std::to_string(i) + ": expected " +
                           join_masked(want_strides, dyn_strides_) + ", actual " + join(strides));
  }
  return true;
}

// Hot path: the checks of check(), dispatch keys first (see below) and the out-of-line requires_grad()
// last. Borrowed `value`; no Python calls, no allocation.
bool TensorMatch::matches(PyObject* value, const TlsKeys& tls) const {
  // An exact class match with a class recorded from a tensor implies is_tensor(value).
  if (Py_TYPE(value) != cls_) return false;
  const at::Tensor& t = THPVariable_Unpack(value);
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  // Keys first: they encode layout (sparse, nested, ...), so sizes()/strides() below cannot throw on a
  // value whose keys equal those of the strided tensor seen at compile time.
  if (((impl->key_set() | from_raw(tls.included)) - from_raw(tls.excluded)).raw_repr() != keys_) return false;
  if (static_cast<int8_t>(t.scalar_type()) != dtype_) return false;
  c10::Device dev = impl->device();
  if (static_cast<int8_t>(dev.type()) != device_type_ || static_cast<int8_t>(dev.index()) != device_index_)
    return false;
  auto sizes = impl->sizes();
  if (sizes.size() != ndim_) return false;
  auto strides = impl->strides();
  const int64_t* want = dims();
  if (!(dyn_sizes_ | dyn_strides_)) {  // static shapes: the loop as it always was
    for (size_t i = 0; i < ndim_; ++i) {
      if (sizes[i] != want[i] || strides[i] != want[ndim_ + i]) return false;
    }
  } else {  // a set bit skips that dimension's size / stride (only dimensions 0..63 have a bit)
    for (size_t i = 0; i < ndim_; ++i) {
      const uint64_t bit = i < 64 ? uint64_t{1} << i : 0;
      if ((sizes[i] != want[i] && !(dyn_sizes_ & bit)) || (strides[i] != want[ndim_ + i] && !(dyn_strides_ & bit)))
        return false;
    }
  }
  return t.requires_grad() == requires_grad_;
}

size_t first_fast_tensor_failure(const FrameView& fv, const FastTensorCheck* checks, size_t n) {
  TlsKeys tls = read_tls_keys();
  for (size_t i = 0; i < n; ++i) {
    PyObject* v = checks[i].ref.peek(fv);  // borrowed
    if (!v || !checks[i].match->matches(v, tls)) return i;
  }
  return n;
}

// A torch.Tensor by its type (Tensor, Parameter or a subclass). THPVariable_Check's isinstance() would read
// obj.__class__ for any other object, running a Python __getattribute__ (transformers' configs) on every guard
// check, and could raise; an object that only reports Tensor as its __class__ is not one either.
static bool real_tensor(PyObject* obj) {
  return THPVariableClass &&
         (THPVariable_CheckExact(obj) || PyObject_TypeCheck(obj, reinterpret_cast<PyTypeObject*>(THPVariableClass)));
}

bool is_tensor(PyObject* obj) { return real_tensor(obj); }

bool tensor_geometry(PyObject* obj, int dim, int64_t* size, int64_t* stride) {
  if (!obj || !real_tensor(obj)) return false;
  try {
    const c10::TensorImpl* impl = THPVariable_Unpack(obj).unsafeGetTensorImpl();
    if (dim < 0 || dim >= impl->dim()) return false;
    *size = impl->size(dim);
    *stride = impl->stride(dim);
    return true;
  } catch (const std::exception&) {  // c10::Error: no strides (sparse), no sizes (nested), symbolic sizes
    return false;
  }
}

bool tensor_storage_offset(PyObject* obj, int64_t* offset) {
  if (!obj || !real_tensor(obj)) return false;
  try {
    *offset = THPVariable_Unpack(obj).unsafeGetTensorImpl()->storage_offset();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

bool tensor_version(PyObject* obj, int64_t* out) {
  if (!real_tensor(obj)) return false;
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (!t.defined() || t.is_inference()) return false;
  *out = static_cast<int64_t>(t._version());
  return true;
}

bool is_meta_tensor(PyObject* obj) { return real_tensor(obj) && THPVariable_Unpack(obj).is_meta(); }

PyObject* make_meta(PyObject* tensor) {
  try {
    const at::Tensor& t = THPVariable_Unpack(tensor);
    at::Tensor m = at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta).requires_grad(false));
    if (t.requires_grad()) m.set_requires_grad(true);
    // A tensor an autograd op made (a previous graph's output reaching a continuation, an activation passed
    // in) may be changed in place, which a leaf that requires grad may not: its example is a non-leaf too, with
    // the same sizes and strides. A view of a leaf stays a leaf's example (changing it in place raises).
    bool view_of_leaf = t.is_view() && t._base().is_leaf();
    if (t.requires_grad() && !t.is_leaf() && !view_of_leaf) {
      c10::AutoGradMode grad_on(true);  // the trace may be inside no_grad: the clone must record its grad_fn
      if (m.is_non_overlapping_and_dense()) {
        m = m.clone();  // preserves dense strides
      } else {
        int64_t extent = m.numel() == 0 ? 0 : 1;  // elements the strides reach
        if (extent)
          for (int64_t d = 0; d < m.dim(); ++d) extent += (m.size(d) - 1) * m.stride(d);
        at::Tensor buf = at::empty({extent}, t.options().device(c10::kMeta).requires_grad(false));
        buf.set_requires_grad(true);
        m = buf.clone().as_strided(t.sizes(), t.strides(), 0);
      }
    }
    return THPVariable_Wrap(std::move(m));  // new reference
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

const void* storage_key(PyObject* tensor) {
  const at::Tensor& t = THPVariable_Unpack(tensor);
  if (!t.defined()) return nullptr;
  // The storage pointer itself (null: none), without has_storage()'s out-of-line call or storage()'s access check.
  return t.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
}

bool grad_mode_enabled() { return c10::GradMode::is_enabled(); }

void set_grad_mode_enabled(bool enabled) { c10::GradMode::set_enabled(enabled); }

int autocast_state() {
  return (at::autocast::is_autocast_enabled(at::kCPU) ? 1 : 0) | (at::autocast::is_autocast_enabled(at::kCUDA) ? 2 : 0) |
         (static_cast<int>(at::autocast::get_autocast_dtype(at::kCPU)) & 0xff) << 8 |
         (static_cast<int>(at::autocast::get_autocast_dtype(at::kCUDA)) & 0xff) << 16;
}

int64_t dispatch_mode_stack_len() { return c10::impl::TorchDispatchModeTLS::stack_len(); }

int global_state_code() {
  int64_t modes = at::impl::PythonTorchFunctionTLS::stack_len();
  int64_t dispatch_modes = dispatch_mode_stack_len();
  return (c10::InferenceMode::is_enabled() ? 1 : 0) | (at::globalContext().deterministicAlgorithms() ? 2 : 0) |
         (static_cast<int>(at::impl::PythonTorchFunctionTLS::get_disabled_state()) & 3) << 2 |
         static_cast<int>(modes > 255 ? 255 : modes) << 4 |
         static_cast<int>(dispatch_modes > 255 ? 255 : dispatch_modes) << 12;
}

bool jit_tracing() { return torch::jit::tracer::isTracing(); }

bool torch_function_mode_active() { return at::impl::PythonTorchFunctionTLS::stack_len() > 0; }

int default_dtype_code() { return static_cast<int>(c10::get_default_dtype_as_scalartype()); }

}  // namespace cdynamo::guards
