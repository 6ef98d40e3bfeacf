// aten_meta.cpp — owns running ATen's C++ Meta kernels that torch shadows with Python meta kernels (see
// aten_meta.h); the one place that reads the dispatcher's kernel lists (private to c10, read through an
// explicit template instantiation, which the standard exempts from access checking).
//
// Why: `import torch` registers a Python Meta kernel (torch/_meta_registrations.py: a reference from torch._refs
// or torch._decomp) over ATen's own C++ Meta kernel for ~640 aten ops (sin, mul, add, ...). Those Python
// kernels call torch._check (which imports sympy) and torch._disable_dynamo wrappers (which import
// torch._dynamo and torch._inductor): a second of imports before cdynamo's first graph. ATen's C++ kernel is
// the structured kernel's meta function, the same code that computes the CPU kernel's output metadata.
#include "interp/aten_meta.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <list>
#include <optional>
#include <string>
#include <unordered_map>

namespace cdynamo::interp {

namespace {

// Access to two private members: OperatorHandle::operatorDef_ and OperatorEntry::kernels_ (read only).
template <typename Tag, auto Member>
struct Expose {
  friend auto member_of(Tag) { return Member; }
};
struct HandleDefTag {
  friend auto member_of(HandleDefTag);
};
struct EntryKernelsTag {
  friend auto member_of(EntryKernelsTag);
};
template struct Expose<HandleDefTag, &c10::OperatorHandle::operatorDef_>;
template struct Expose<EntryKernelsTag, &c10::impl::OperatorEntry::kernels_>;

struct Entry {
  py::object op;  // the OpOverload, kept alive so its address is never reused as a key
  std::optional<c10::OperatorHandle> handle;
  std::optional<c10::KernelFunction> kernel;  // ATen's C++ kernel for Meta; empty: dispatch as usual
  bool composite = false;                     // a composite kernel: its own aten calls dispatch again
};

std::unordered_map<PyObject*, Entry>& entries() {
  static auto* m = new std::unordered_map<PyObject*, Entry>();  // process lifetime, guarded by the GIL
  return *m;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The kernel the dispatcher would run for Meta if torch's Python meta registration were absent, when that
// registration shadows it: ATen's C++ Meta kernel registered before it, else (the dispatcher's own order for a
// backend without a kernel of its own) the CompositeExplicitAutogradNonFunctional, then the
// CompositeExplicitAutograd kernel, which compute with other aten ops. `composite` tells which.
std::optional<c10::KernelFunction> shadowed_kernel(const c10::OperatorHandle& handle, bool& composite) {
  const c10::impl::OperatorEntry& entry = (handle.*member_of(HandleDefTag{}))->op;
  const auto& kernels = entry.*member_of(EntryKernelsTag{});
  auto it = kernels.find(c10::DispatchKey::Meta);
  if (it == kernels.end() || it->second.empty()) return std::nullopt;
  const auto& list = it->second;  // newest registration first; the front one is active
  if (!contains(list.front().debug, "torch/_meta_registrations.py")) return std::nullopt;  // a user's: respected
  for (auto k = std::next(list.begin()); k != list.end(); ++k)
    if (contains(k->debug, "ATen/RegisterMeta") && k->kernel.isValid()) return k->kernel;
  if (list.size() > 1) return std::nullopt;  // another registration behind it: not ATen's, left alone
  for (c10::DispatchKey alias :
       {c10::DispatchKey::CompositeExplicitAutogradNonFunctional, c10::DispatchKey::CompositeExplicitAutograd}) {
    auto a = kernels.find(alias);
    if (a == kernels.end() || a->second.size() != 1) continue;
    const auto& k = a->second.front();
    if (!contains(k.debug, "ATen/RegisterComposite") || !k.kernel.isValid()) return std::nullopt;
    composite = true;
    return k.kernel;
  }
  return std::nullopt;
}

Entry& entry_for(py::handle op) {
  auto& m = entries();
  auto it = m.find(op.ptr());
  if (it != m.end()) return it->second;
  Entry e;
  e.op = py::reinterpret_borrow<py::object>(op);
  py::object schema = py::getattr(op, "_schema", py::none());
  if (!schema.is_none()) {
    std::string name = py::str(schema.attr("name")).cast<std::string>();
    std::string overload = py::str(schema.attr("overload_name")).cast<std::string>();
    e.handle = c10::Dispatcher::singleton().findOp(c10::OperatorName(name, overload));
    if (e.handle && e.handle->hasSchema()) e.kernel = shadowed_kernel(*e.handle, e.composite);
  }
  return m.emplace(op.ptr(), std::move(e)).first->second;
}

bool all_meta(const torch::jit::Stack& stack, size_t n) {
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined() || t.unsafeGetTensorImpl()->is_wrapped_number()) continue;  // a Python number's tensor
      if (!t.is_meta()) return false;
      any = true;
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec()) {
        if (!t.is_meta()) return false;
        any = true;
      }
    } else if (v.isList()) {
      for (const c10::IValue& x : v.toListRef()) {
        if (x.isTensor() && x.toTensor().defined()) {
          if (!x.toTensor().is_meta()) return false;
          any = true;
        } else if (!x.isNone() && !x.isInt() && !x.isDouble() && !x.isBool() && !x.isSymInt()) {
          return false;  // nested structures: left to the usual dispatch
        }
      }
    }
  }
  return any;
}

}  // namespace

int aten_meta_kind(py::handle op) {
  const Entry& e = entry_for(op);
  return !e.kernel ? 0 : e.composite ? 2 : 1;
}

py::object call_aten_meta(py::handle op, py::handle args, py::handle kwargs) {
  py::object not_implemented = py::reinterpret_borrow<py::object>(Py_NotImplemented);
  Entry& e = entry_for(op);
  if (!e.kernel || !PyTuple_Check(args.ptr()) || !PyDict_Check(kwargs.ptr())) return not_implemented;
  const c10::FunctionSchema& schema = e.handle->schema();
  torch::jit::Stack stack;
  try {
    // A Python number where the schema has a Tensor is a wrapped-number tensor, as the binding made it.
    torch::jit::ToIValueAllowNumbersAsTensors numbers(true);
    stack = torch::jit::createStackForSchema(schema, torch::jit::tuple_slice(py::reinterpret_borrow<py::tuple>(args)),
                                             py::reinterpret_borrow<py::kwargs>(kwargs), std::nullopt);
  } catch (py::error_already_set&) {
    PyErr_Clear();
    return not_implemented;
  } catch (const std::exception&) {
    return not_implemented;  // arguments this conversion does not take: the usual dispatch
  }
  if (!all_meta(stack, stack.size())) return not_implemented;
  try {
    e.kernel->callBoxed(*e.handle, c10::DispatchKeySet(c10::DispatchKey::Meta), &stack);
  } catch (py::error_already_set&) {
    if (schema.is_mutable()) throw;
    return not_implemented;  // a functional op: the usual dispatch raises the error it always raised
  } catch (const std::exception&) {
    if (!schema.is_mutable()) {
      PyErr_Clear();  // a Python error of a nested dispatch may be left set
      return not_implemented;
    }
    HANDLE_TH_ERRORS
    throw;
    END_HANDLE_TH_ERRORS_PYBIND
  }
  HANDLE_TH_ERRORS
  return torch::jit::createPyObjectForStack(std::move(stack));
  END_HANDLE_TH_ERRORS_PYBIND
}

}  // namespace cdynamo::interp
