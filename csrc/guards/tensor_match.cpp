// tensor_match.cpp — owns TENSOR_MATCH evaluated on at::Tensor, meta example values and torch global
// state; the only translation unit of cdynamo that includes LibTorch headers.
#include "guards/tensor_match.h"

#include <ATen/ATen.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/python_variable.h>

#include <sstream>

namespace cdynamo::guards {

namespace {

c10::DispatchKeySet effective_keys(const at::Tensor& t) {
  auto tls = c10::impl::tls_local_dispatch_key_set();
  return (t.key_set() | tls.included_) - tls.excluded_;
}

template <typename T>
std::string join(c10::ArrayRef<T> v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

class TensorMatchImpl final : public TensorMatch {
 public:
  explicit TensorMatchImpl(PyObject* obj) {
    const at::Tensor& t = THPVariable_Unpack(obj);
    cls_ = Py_TYPE(obj);
    Py_INCREF(cls_);  // owned: keeps the class (and its identity) alive
    keys_ = effective_keys(t);
    dtype_ = t.scalar_type();
    device_ = t.device();
    requires_grad_ = t.requires_grad();
    sizes_ = t.sizes().vec();
    strides_ = t.strides().vec();
  }
  ~TensorMatchImpl() override { Py_DECREF(cls_); }

  bool check(PyObject* value, std::string* why) const override {
    if (Py_TYPE(value) != cls_) return fail(why, std::string("type mismatch: expected ") + cls_->tp_name +
                                                     ", actual " + Py_TYPE(value)->tp_name);
    const at::Tensor& t = THPVariable_Unpack(value);
    if (t.scalar_type() != dtype_)
      return fail(why, std::string("dtype mismatch: expected ") + c10::toString(dtype_) + ", actual " +
                           c10::toString(t.scalar_type()));
    if (t.device() != device_) return fail(why, "device mismatch: expected " + device_.str() + ", actual " +
                                                    t.device().str());
    if (t.requires_grad() != requires_grad_)
      return fail(why, std::string("requires_grad mismatch: expected ") + (requires_grad_ ? "True" : "False"));
    if (effective_keys(t) != keys_) return fail(why, "dispatch key set mismatch");
    auto sizes = t.sizes();
    if (sizes.size() != sizes_.size())
      return fail(why, "ndim mismatch: expected " + std::to_string(sizes_.size()) + ", actual " +
                           std::to_string(sizes.size()));
    for (size_t i = 0; i < sizes_.size(); ++i) {
      if (sizes[i] != sizes_[i])
        return fail(why, "size mismatch at index " + std::to_string(i) + ": expected " + join(c10::ArrayRef(sizes_)) +
                             ", actual " + join(sizes));
    }
    auto strides = t.strides();
    for (size_t i = 0; i < strides_.size(); ++i) {
      if (strides[i] != strides_[i])
        return fail(why, "stride mismatch at index " + std::to_string(i) + ": expected " +
                             join(c10::ArrayRef(strides_)) + ", actual " + join(strides));
    }
    return true;
  }

 private:
  static bool fail(std::string* why, std::string msg) {
    if (why) *why = std::move(msg);
    return false;
  }
  PyTypeObject* cls_;
  c10::DispatchKeySet keys_;
  at::ScalarType dtype_;
  c10::Device device_{c10::kCPU};
  bool requires_grad_;
  std::vector<int64_t> sizes_;
  std::vector<int64_t> strides_;
};

}  // namespace

std::unique_ptr<TensorMatch> TensorMatch::make(PyObject* tensor) {
  return std::make_unique<TensorMatchImpl>(tensor);
}

bool is_tensor(PyObject* obj) { return THPVariable_Check(obj); }

bool is_meta_tensor(PyObject* obj) { return THPVariable_Check(obj) && THPVariable_Unpack(obj).is_meta(); }

PyObject* make_meta(PyObject* tensor) {
  try {
    const at::Tensor& t = THPVariable_Unpack(tensor);
    at::Tensor m = at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta).requires_grad(false));
    if (t.requires_grad()) m.set_requires_grad(true);
    return THPVariable_Wrap(std::move(m));  // new reference
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

bool grad_mode_enabled() { return c10::GradMode::is_enabled(); }

void set_grad_mode_enabled(bool enabled) { c10::GradMode::set_enabled(enabled); }

int default_dtype_code() { return static_cast<int>(c10::get_default_dtype_as_scalartype()); }

}  // namespace cdynamo::guards
