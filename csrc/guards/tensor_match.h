// tensor_match.h — owns the torch-facing guard pieces (TENSOR_MATCH, meta example values, global torch state)
// behind a header that needs no LibTorch includes.
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "guards/source.h"

namespace cdynamo::guards {

// The calling thread's dispatch-key TLS (included/excluded sets as raw bits), read once per guard run.
struct TlsKeys {
  uint64_t included = 0;
  uint64_t excluded = 0;
};
TlsKeys read_tls_keys();

// Properties of one tensor at compile time, stored without LibTorch types; check() compares a runtime
// value against them.
class TensorMatch {
 public:
  ~TensorMatch();
  TensorMatch(const TensorMatch&) = delete;
  TensorMatch& operator=(const TensorMatch&) = delete;
  // Borrowed `tensor` (must satisfy is_tensor). Records exact Python class, dispatch keys (with TLS
  // includes/excludes), dtype, device, requires_grad, ndim, sizes and strides. Bit d of dynamic_sizes /
  // dynamic_strides set: dimension d's size / stride is not checked (bits past ndim are dropped).
  static std::unique_ptr<TensorMatch> make(PyObject* tensor, uint64_t dynamic_sizes = 0, uint64_t dynamic_strides = 0);
  // True if `value` (borrowed, must satisfy is_tensor) matches. On mismatch, fills *why (if non-null)
  // with a readable reason.
  bool check(PyObject* value, std::string* why) const;
  // Success-path test: the same checks as check() but also the class test (so any borrowed object may
  // be passed), no strings, no Python calls. True implies is_tensor(value) && check(value) would hold;
  // false means "ask check()".
  bool matches(PyObject* value, const TlsKeys& tls) const;
  uint64_t dynamic_sizes() const { return dyn_sizes_; }
  uint64_t dynamic_strides() const { return dyn_strides_; }
  // "dynamic sizes [0, 2], dynamic strides [1]" (the parts with bits set; empty when both masks are 0).
  std::string describe_dynamic() const;

 private:
  TensorMatch() = default;
  PyTypeObject* cls_ = nullptr;  // owned: the exact class (keeps its identity alive)
  uint64_t keys_ = 0;            // raw DispatchKeySet, TLS applied
  int8_t dtype_ = 0;             // ScalarType
  int8_t device_type_ = 0;       // DeviceType
  int8_t device_index_ = -1;     // DeviceIndex
  bool requires_grad_ = false;
  size_t ndim_ = 0;
  uint64_t dyn_sizes_ = 0;       // bit d: size d not checked
  uint64_t dyn_strides_ = 0;     // bit d: stride d not checked
  // ndim_ sizes, then ndim_ strides (one flat array): inline up to kInlineDims dimensions, so a check reads the
  // match's own lines, not another allocation per tensor (a model's parameters are 1-4 dimensional).
  static constexpr size_t kInlineDims = 4;
  int64_t inline_dims_[2 * kInlineDims] = {};
  std::vector<int64_t> heap_dims_;
  const int64_t* dims() const { return ndim_ <= kInlineDims ? inline_dims_ : heap_dims_.data(); }
};

// One TENSOR_MATCH whose source has a fast form (see FastRef).
struct FastTensorCheck {
  FastRef ref;
  const TensorMatch* match;  // borrowed from the owning Guard
};
// Runs the fast test of checks[0..n) against `fv`, reading TLS once. Returns the index of the first
// check whose fast test fails (its guard must then be evaluated in full), or n if all pass.
size_t first_fast_tensor_failure(const FrameView& fv, const FastTensorCheck* checks, size_t n);

bool is_tensor(PyObject* obj);  // isinstance(obj, torch.Tensor), fast path in C++
// Size and stride of dimension `dim` (0 <= dim < ndim) of `obj` (borrowed), without LibTorch types, Python calls
// or allocation: false for a non-tensor, a dim out of range, or a tensor whose sizes / strides cannot be read
// as integers (sparse, nested, symbolic).
bool tensor_geometry(PyObject* obj, int dim, int64_t* size, int64_t* stride);
// The storage offset of `obj` (borrowed) in elements; false as tensor_geometry.
bool tensor_storage_offset(PyObject* obj, int64_t* offset);
// The version counter of a tensor (borrowed; bumped by every in-place write to its storage) into *out;
// false for a non-tensor or an inference tensor (which has no counter).
bool tensor_version(PyObject* obj, int64_t* out);
// The storage a tensor (borrowed) views, as an identity; nullptr for a tensor without one.
const void* storage_key(PyObject* tensor);
// New reference: a meta tensor with the sizes, strides, dtype and requires_grad of `tensor` (borrowed); a non-leaf
// when `tensor` is one that requires grad (and not a view of a leaf), so shape propagation allows what autograd
// allows on it (in-place changes).
PyObject* make_meta(PyObject* tensor);
// True if `obj` is a tensor on the meta device.
bool is_meta_tensor(PyObject* obj);
bool grad_mode_enabled();
// Sets this thread's grad mode (what torch._C._set_grad_enabled does, without a Python call).
void set_grad_mode_enabled(bool enabled);
// torch's default dtype as an int ScalarType code.
int default_dtype_code();
// Autocast enabled on CPU (bit 0) and CUDA (bit 1), and its dtypes (CPU bits 8-15, CUDA bits 16-23).
int autocast_state();
// The rest of the global state a graph depends on: inference mode (bit 0), deterministic algorithms
// (bit 1), torch function disabled state (bits 2-3), torch function mode stack depth (bits 4-11), torch
// dispatch mode stack depth (bits 12-19, infra modes included).
int global_state_code();
// How many TorchDispatchModes are active (what torch.utils._python_dispatch._get_current_dispatch_mode_stack lists).
int64_t dispatch_mode_stack_len();
// True while a TorchFunctionMode is active (torch functions then dispatch to it, which a graph skips).
bool torch_function_mode_active();
// True while torch.jit.trace records this thread's ops: its frames are never captured.
bool jit_tracing();

}  // namespace cdynamo::guards
