// guard_kinds.h — owns GuardKind and the typed payload of each kind of guard (one struct per family of kinds).
#pragma once

#include <Python.h>

#include <memory>
#include <variant>
#include <vector>

#include "guards/source.h"
#include "guards/tensor_match.h"

namespace cdynamo::guards {

enum class GuardKind {
  TensorMatch,   // TENSOR_MATCH on the source's tensor                                       (TensorCheck)
  TypeMatch,     // type(value) is T                                                          (TypeCheck)
  IdMatch,       // value is O (printed FUNCTION_MATCH for functions, modules and classes)    (IdentityCheck)
  EqualsMatch,   // type(value) is type(C) and value == C                                     (ConstantCheck)
  LengthMatch,   // type(value) is T and len(value) == n                                      (LengthCheck)
  DictKeys,      // value is an exact dict whose keys are K, in that order                    (KeysCheck)
  HasAttr,       // hasattr(value, name) == present                                           (AttrCheck)
  DictContains,  // (key in the dict value, by dict's own C-level lookup) == present          (KeyCheck)
  NoModuleHooks, // the nn.Module's forward / backward (pre-)hook dicts are all empty         (HooksCheck)
  GradMode,      // torch.is_grad_enabled() as at compile time                                (GradModeCheck)
  DefaultDtype,  // torch.get_default_dtype() as at compile time                              (DefaultDtypeCheck)
  Autocast,      // the CPU / CUDA autocast switches and dtypes as at compile time            (AutocastCheck)
  GlobalState,   // inference mode, deterministic algorithms, torch function state and modes  (GlobalStateCheck)
  NoAliasing,    // the listed sources are pairwise distinct objects (or storages)            (DistinctCheck)
  StorageOverlap,  // the listed tensors share storages exactly as at compile time            (OverlapCheck)
  SameObject,    // the two listed sources hold the same object (a duplicated tensor input)   (SameCheck)
  ShapeEnv,      // integer relations between sizes / strides / ints of frame values hold     (ShapeCheck)
};

// One strong reference (or nothing), released on destruction; moves, never copies. What a payload owns.
class OwnedRef {
 public:
  OwnedRef() = default;
  explicit OwnedRef(PyObject* owned) : p_(owned) {}  // steals `owned` (a new reference, or nullptr)
  ~OwnedRef() { Py_XDECREF(p_); }
  OwnedRef(const OwnedRef&) = delete;
  OwnedRef& operator=(const OwnedRef&) = delete;
  OwnedRef(OwnedRef&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  OwnedRef& operator=(OwnedRef&& o) noexcept {
    if (this != &o) {
      Py_XDECREF(p_);
      p_ = o.p_;
      o.p_ = nullptr;
    }
    return *this;
  }
  PyObject* get() const { return p_; }  // borrowed from this holder
  explicit operator bool() const { return p_ != nullptr; }

 private:
  PyObject* p_ = nullptr;
};

class ShapeProgram;  // shape_guard.h

// Each field below has one meaning, for the one family of kinds its struct serves.

// TENSOR_MATCH.
struct TensorCheck {
  std::unique_ptr<TensorMatch> match;  // owned; on the heap, so its address survives moves (GuardSet::plan keeps it)
};
// TYPE_MATCH.
struct TypeCheck {
  OwnedRef type;  // owned: the exact class the value must have
};
// ID_MATCH / FUNCTION_MATCH.
struct IdentityCheck {
  PyObject* object = nullptr;  // the identity compared against; borrowed: kept alive by `strong`, or (when `weak`
                               // is set) possibly dead, so never dereferenced, only compared
  OwnedRef weak;    // owned weak reference to `object` (user objects: the guard does not keep them alive and fails
                    // once the object has died), or empty
  OwnedRef strong;  // owned strong reference to `object` where it is not weakly held (modules, objects without
                    // weak reference support), or empty; exactly one of `weak` / `strong` is set
};
// EQUALS_MATCH.
struct ConstantCheck {
  OwnedRef value;  // owned: the constant seen at compile time
};
// LIST_LENGTH / TUPLE_LENGTH (any sized value of an exact class).
struct LengthCheck {
  OwnedRef type;          // owned: the exact class the value must have
  Py_ssize_t length = 0;  // its len() at compile time
};
// DICT_KEYS.
struct KeysCheck {
  OwnedRef keys;  // owned tuple: the dict's keys at compile time, in order
};
// HASATTR / NO_HASATTR.
struct AttrCheck {
  OwnedRef name;         // owned interned str: the attribute's name
  bool present = false;  // whether the value has it
};
// DICT_CONTAINS / DICT_LACKS.
struct KeyCheck {
  OwnedRef key;          // owned, hashable: the key looked up
  bool present = false;  // whether the dict holds it
};
// NO_HOOKS.
struct HooksCheck {
  OwnedRef names;  // owned tuple of the four interned hook-dict attribute names read from the instance __dict__
};
// GRAD_MODE.
struct GradModeCheck {
  bool enabled = false;  // grad mode at compile time
};
// DEFAULT_DTYPE.
struct DefaultDtypeCheck {
  int code = 0;  // default_dtype_code() at compile time
};
// AUTOCAST.
struct AutocastCheck {
  int code = 0;  // autocast_state() at compile time
};
// GLOBAL_STATE.
struct GlobalStateCheck {
  int code = 0;  // global_state_code() at compile time (bit fields: tensor_match.h)
};
// NO_TENSOR_ALIASING / NO_STORAGE_ALIASING.
struct DistinctCheck {
  std::vector<SourcePtr> sources;  // the values that must be pairwise distinct
  bool storages = false;           // tensors are compared by storage (NO_STORAGE_ALIASING), not only by identity
};
// STORAGE_OVERLAP.
struct OverlapCheck {
  std::vector<SourcePtr> sources;  // the tensors compared
  std::vector<int> groups;         // per source, the first source sharing its storage at compile time
};
// DUPLICATE_INPUT.
struct SameCheck {
  std::vector<SourcePtr> sources;  // exactly two: the sources that must hold one object
};
// SHAPE_ENV.
struct ShapeCheck {
  std::unique_ptr<ShapeProgram> program;  // owned: its slots, compiled programs, fallback and texts
  // Defined in guard.cpp, where ShapeProgram is complete, so any file may build or destroy a payload.
  ShapeCheck();
  explicit ShapeCheck(std::unique_ptr<ShapeProgram> p);
  ShapeCheck(ShapeCheck&&) noexcept;
  ShapeCheck& operator=(ShapeCheck&&) noexcept;
  ~ShapeCheck();
};

using GuardPayload = std::variant<TensorCheck, TypeCheck, IdentityCheck, ConstantCheck, LengthCheck, KeysCheck,
                                  AttrCheck, KeyCheck, HooksCheck, GradModeCheck, DefaultDtypeCheck, AutocastCheck,
                                  GlobalStateCheck, DistinctCheck, OverlapCheck, SameCheck, ShapeCheck>;

}  // namespace cdynamo::guards
