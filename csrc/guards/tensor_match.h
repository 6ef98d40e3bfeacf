// tensor_match.h — owns the torch-facing guard pieces (TENSOR_MATCH, meta example values, global torch state)
// behind a header that needs no LibTorch includes.
#pragma once

#include <Python.h>

#include <memory>
#include <string>
#include <vector>

namespace cdynamo::guards {

// Properties of one tensor at compile time; check() compares a runtime value against them.
class TensorMatch {
 public:
  virtual ~TensorMatch() = default;
  // Borrowed `tensor` (must satisfy is_tensor). Records exact Python class, dispatch keys (with TLS
  // includes/excludes), dtype, device, requires_grad, ndim, sizes and strides.
  static std::unique_ptr<TensorMatch> make(PyObject* tensor);
  // True if `value` (borrowed) matches. On mismatch, fills *why (if non-null) with a readable reason.
  virtual bool check(PyObject* value, std::string* why) const = 0;
};

bool is_tensor(PyObject* obj);  // isinstance(obj, torch.Tensor), fast path in C++
// New reference: a meta tensor with the sizes, strides, dtype and requires_grad of `tensor` (borrowed).
PyObject* make_meta(PyObject* tensor);
// True if `obj` is a tensor on the meta device.
bool is_meta_tensor(PyObject* obj);
bool grad_mode_enabled();
// Sets this thread's grad mode (what torch._C._set_grad_enabled does, without a Python call).
void set_grad_mode_enabled(bool enabled);
// torch's default dtype as an int ScalarType code.
int default_dtype_code();

}  // namespace cdynamo::guards
