// value.h — owns the symbolic values of the interpreter: what the trace knows about each stack/local slot.
#pragma once

#include <pybind11/pybind11.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "graph/graph.h"
#include "guards/source.h"

namespace cdynamo::guards {
struct Guard;
}

namespace cdynamo::interp {

namespace py = pybind11;
using guards::SourcePtr;

// Thrown when the trace meets something it cannot represent soundly; carries a user-facing reason.
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Thrown where an op raised during shape propagation on fake tensors with an error of its own (a size check that
// fails for the sizes the frame has now): eager raises there too, so the instruction is not run again on
// specialised sizes (that would only add guards, one compile per failing size).
struct OpRaised : Unsupported {
  using Unsupported::Unsupported;
};

// Thrown by `raise` of a builtin exception in an inlined function, outside any handler of the functions
// being inlined: `exc` is the exception Python raises there (made at trace time; builtin exceptions with
// constant arguments have no side effects). A caller that models the handler (iteration of a
// collections.abc.Sequence stops at IndexError) catches it; anywhere else it is Unsupported.
struct TracedRaise : Unsupported {
  TracedRaise(const std::string& why, py::object e) : Unsupported(why), exc(std::move(e)) {}
  py::object exc;
};

enum class VKind {
  Tensor,  // a graph value (TensorOf: node + meta example value + real device)
  Const,   // an immutable Python constant (int, float, bool, None, str, slice, dtype, device, Size, ...)
  Object,  // a known Python object with identity (module, function, class, user object)
  Tuple,   // tuple of values (TupleOf: a namedtuple's / struct sequence's class)
  List,    // list of values (ListOf: the frame's own list, for one read from the frame)
  Null,    // the NULL pushed by PUSH_NULL / LOAD_GLOBAL / LOAD_METHOD
  Method,  // bound method `self.name` run by the trace (BoundOf): self a Tensor, container, Record, ...
  Iter,    // an iterator over values known at trace time (IterOf); loops unroll over it
  Dict,    // a dict: constant keys (`keys`) and values (`items`), insertion ordered (DictOf: the frame's own dict,
           // an Instance's `__dict__`, a defaultdict's factory)
  Instance,  // an object of a plain Python class made in the trace (InstanceOf: its class), its attributes in
             // `keys` (names) / `items` (values), insertion ordered
  Record,  // a transformers ModelOutput (dataclass and dict) made in the trace, read-only (InstanceOf: its class),
           // its dataclass fields in `keys` (names, field order) / `items` (values, None included);
           // as a dict it holds the fields that are not None (records.cpp)
  Cell,    // a closure cell shared by a frame of the trace and the functions made in it (CellOf)
  Set,     // a set of constants (`keys`, insertion ordered); SetOf: the frame's own set, or a frozenset result
  DictView,  // d.keys() / d.values() / d.items() of a Dict value: live (reads see later changes of the dict);
             // DictViewOf
  SymNum,    // a symbolic int / bool / float of a trace with dynamic shapes (SymOf): a size, arithmetic on sizes,
             // a dynamic int argument; computed by a graph node
  Slice,     // a slice with a symbolic bound (SliceOf): x[: x.shape[0] // 2] in a trace with dynamic shapes; a slice
             // of constants is a Const
};

struct Value;
using ValuePtr = std::shared_ptr<Value>;

// What a DictView value shows of its dict.
enum class ViewPart { Keys, Values, Items };

// The payload of a DictView value: the Dict value it reads (shared, so changes made after the view was taken
// show through it, as in Python) and which part it shows.
struct DictViewOf {
  ValuePtr dict;
  ViewPart part = ViewPart::Keys;
};

// Python iterates a dict (or a view of one) lazily; the trace takes its items when the iterator is made.
// An Iter over a dict or view (directly, or through enumerate / zip / reversed) keeps what it took of the
// dict, so FOR_ITER can refuse when the dict changed in a way Python's iteration would see.
struct IterWatch {
  ValuePtr dict;
  ViewPart part = ViewPart::Keys;
  bool reversed = false;
  std::vector<py::object> keys;   // the dict's keys when the iterator was made
  std::vector<ValuePtr> values;   // and its values
};

// Payloads: what a value of one kind holds, one struct per kind. Value::payload holds at most one of them, read
// through accessors that check the kind. The contents of containers (Tuple, List, Dict, Set, Instance, Record) are
// in the shared fields `items` / `keys` of Value below, the object of a Const / Object in `obj`; everything else a
// container is (its class, the frame's object it stands for) is in its payload.

// A tuple (VKind::Tuple; every Tuple holds one): the class of a namedtuple, a struct sequence
// (torch.return_types.max) or torch.Size it is an instance of, rebuilt as tuple_maker(cls)((items...)); none for a
// plain tuple.
struct TupleOf {
  py::object cls;
};

// A list (VKind::List; every List holds one): the frame's own list it was read as (Tracer::wrap_container, with a
// Source): its identity kept by codegen, its final contents written back after the graph; none for a list made in
// the trace.
struct ListOf {
  py::object real;
};

// A set (VKind::Set; every Set holds one), its elements in `keys`.
struct SetOf {
  py::object real;       // the frame's own set it was read as (with a Source), as ListOf::real; none otherwise
  py::object frozenset;  // a frozenset result of a set operation: the immutable constant itself; none otherwise
};

// A dict (VKind::Dict; every Dict holds one), its keys in `keys` and values in `items`.
struct DictOf {
  py::object real;       // the frame's own dict it was read as (with a Source), as ListOf::real; none otherwise
  bool frozen = false;   // an Instance's `__dict__` (InstanceOf::dict_view): changing it in place is unsupported
  // A collections.defaultdict made in the trace, or read from a variable of the frame (Tracer::wrap_default_dict):
  // the factory a read of a missing key calls (an Object or Const value; a Const None: missing keys raise KeyError
  // as in a dict). Null for a plain dict.
  ValuePtr factory;
};

// A graph value (VKind::Tensor).
struct TensorOf {
  graph::Node* node = nullptr;  // the graph node (a placeholder for a tensor of the frame)
  py::object example;           // its meta example value (shapes, dtype, strides)
  py::object device;            // the torch.device it has at run time (meta examples live on "meta")
};

// A symbolic number (VKind::SymNum): the graph node that computes it (x.size(0), operator.add(size, 1), an int
// placeholder) and its example, a torch.SymInt / SymBool / SymFloat of the trace's ShapeEnv. Where the trace
// needs a plain Python number (a fold, a branch, a graph break), it asks the example for one: the ShapeEnv then
// records the guard that keeps the answer true (Tracer::specialize).
struct SymOf {
  graph::Node* node = nullptr;
  py::object example;
};

// A slice with a symbolic bound (VKind::Slice): its bounds, each a SymNum or a Const (None when left out).
struct SliceOf {
  ValuePtr start, stop, step;
};

// An iterator over values known at trace time (VKind::Iter); loops unroll over it.
struct IterOf {
  std::vector<ValuePtr> items;     // everything it yields, in order
  size_t pos = 0;                  // the next item
  std::vector<IterWatch> watches;  // the dicts it reads lazily in Python (ops_iter.cpp), if any
};

// A bound method: a Method value (a method of a Tensor, a container, a Record, os.environ or the autograd ctx,
// run by the trace), or an Object whose `obj` is the function (a method of an object the trace knows, a
// classmethod bound to its class), called with `self` first.
struct BoundOf {
  ValuePtr self;     // the receiver
  std::string name;  // the attribute name it was read as
};

// An object of a Python class made in the trace (VKind::Instance, VKind::Record); its attributes (Instance) or
// fields (Record) are the value's `keys` (names) / `items` (values), insertion or field ordered.
struct InstanceOf {
  ValuePtr cls;        // an Object value holding its class
  ValuePtr dict_view;  // Instance: the Dict its `__dict__` read gave, kept equal to its attributes (null until read)
};

// A closure cell shared by a frame of the trace and the functions made in it (VKind::Cell).
struct CellOf {
  ValuePtr content;  // null: an empty cell (assigned later)
};

// A function made by MAKE_FUNCTION during the trace (an Object; made_in_trace()): rebuilt after the graph
// from its code and new cells (codegen/rebuild.cpp), inlined with these cells.
struct FunctionOf {
  std::vector<ValuePtr> closure;  // the Cell values it captured, in co_freevars order
};

// The __exit__ of a traced `with` block (an Object: a bound __exit__, or the process-lifetime
// grad_exit_callable(mode)): leaving a `with torch.no_grad()/enable_grad()` block sets grad mode back to `mode`
// (0/1); for kNoopExit (a profiler record_function or contextlib.nullcontext block) it does nothing.
struct GradExitOf {
  int mode = 0;
};

// A torch context whose state the graph records (interp/torch_contexts.cpp): torch.autocast and its device
// forms, torch.inference_mode, torch.nn.attention.sdpa_kernel, made in the trace from constant arguments.
enum class TorchCtxKind { Autocast, Inference, SdpaKernel };
struct TorchCtxSpec {
  TorchCtxKind kind = TorchCtxKind::Autocast;
  py::object make;        // functools.partial(factory, *args, **kwargs): a fresh, unentered context object
  py::tuple enter_args;   // Autocast: _enter_autocast's arguments; Inference: (mode,); SdpaKernel: (backends, prio)
  py::tuple exit_args;    // SdpaKernel: (the backends before the block, prio); empty for the others
};
// The context object itself (an Object; `obj` is the object made at trace time, never handed out: rebuilt from
// `spec->make`).
struct TorchCtxOf {
  std::shared_ptr<const TorchCtxSpec> spec;
};
// The __exit__ of a `with` on a TorchCtxOf value (an Object whose `obj` is a stand-in): the graph node the block
// entered with (its result is what the exit node takes) and the real context entered while tracing. At a graph
// break the continuation enters `spec->make()` again in its prologue (codegen/graph_break.cpp).
struct CtxExitOf {
  std::shared_ptr<const TorchCtxSpec> spec;
  graph::Node* enter_node = nullptr;
  py::object real;  // what the trace-time enter returned (the real context entered now)
};

// What an Object value stands for when the trace models it itself rather than through a plain Python object
// (its `obj` is then only a stand-in: functools.partial, a super object or None, a slot wrapper, ...).

// functools.partial(fn, *args, **kwargs): made in the trace (rebuilt at a graph break by calling
// functools.partial again, codegen/rebuild.cpp), or read through the sources of a partial of the frame.
struct PartialOf {
  ValuePtr fn;
  std::vector<ValuePtr> args;
  std::vector<py::object> kw_names;  // str, parallel to kw_values
  std::vector<ValuePtr> kw_values;
  bool made_in_trace = false;  // functools.partial(...) called in the trace (not a partial of the frame)
};

// super(cls, obj) in a method: attribute reads look past `cls` in type(obj).__mro__ (Tracer::super_attr).
struct SuperOf {
  ValuePtr cls;  // an Object value holding the class
  ValuePtr obj;  // the receiver: an Object with a source, or an Instance made in the trace
};

// A callable found through super() that the trace runs itself (Tracer::call).
enum class Slot : uint8_t {
  Noop,               // object.__init__(self): does nothing (a Const None value)
  SuperSetattr,       // object.__setattr__ past a class's own override, on an Instance made in the trace
  SuperGetattribute,  // object.__getattribute__ past a class's own override
  SuperDictGet,       // dict.get / dict.__getitem__ / dict.__contains__ on a dict subclass that overrides them
  SuperDictGetitem,
  SuperDictContains,
};
struct SlotOf {
  Slot slot = Slot::Noop;
  ValuePtr self;  // the receiver (none for Noop)
};
const char* slot_method_name(Slot s);  // "get", "__getitem__", "__contains__" for the SuperDict slots

// A torch.nn module made by the trace (`nn.Softmax(dim=-1)` inside forward): an Object whose `obj` is the real
// instance, built while tracing from constant arguments, holding no parameters, buffers or submodules, and seen by
// nothing but the trace (its attributes are read without guards). Its class and arguments say how to make it again.
struct ModuleMadeOf {
  ValuePtr cls;  // an Object: the module class (with a source, or a constant of torch's namespace)
  std::vector<ValuePtr> args;
  std::vector<std::pair<std::string, ValuePtr>> kwargs;
};

// The exception object a handler of an inlined function is running for (what a TracedRaise carried; made in
// the trace, never passed back to Python).
struct ExceptionOf {};

using Payload = std::variant<std::monostate, TensorOf, IterOf, CellOf, InstanceOf, DictViewOf, BoundOf, FunctionOf,
                             GradExitOf, PartialOf, SuperOf, SlotOf, ExceptionOf, SymOf, SliceOf, ModuleMadeOf,
                             TorchCtxOf, CtxExitOf, TupleOf, ListOf, SetOf, DictOf>;

struct Value {
  VKind kind = VKind::Const;
  SourcePtr source;                 // how to fetch it again from the frame (may be null)
  py::object obj;                   // Const / Object: the object (a stand-in for a modelled Object); none for
                                    // any other kind
  std::vector<ValuePtr> items;      // Tuple / List / Dict values; Instance attributes / Record fields
  std::vector<py::object> keys;     // Dict keys, parallel to `items`: hashable constants, or a tensor key's meta
                                    // example standing for the tensor (Trace::tensor_keys; compared by identity);
                                    // Set elements; Instance attribute / Record field names
  // Object read from the frame (a plain instance): its identity guard, not yet installed. Moving the value
  // (locals, stack, tuples, a continuation, the return) needs only its type (TYPE_MATCH, installed at
  // once); the first use that may depend on which object it is installs this (Tracer::realize).
  std::shared_ptr<guards::Guard> pending_id;
  // Tensor: TensorOf; SymNum: SymOf; Iter: IterOf; Cell: CellOf; Instance / Record: InstanceOf; DictView: DictViewOf;
  // Method: BoundOf; Tuple: TupleOf; List: ListOf; Set: SetOf; Dict: DictOf; Object: BoundOf for a bound method,
  // FunctionOf for a function made in the trace, ModuleMadeOf, TorchCtxOf / CtxExitOf, else (a Const for Slot::Noop)
  // what the trace models in place of `obj`, if anything (GradExitOf, PartialOf, SuperOf, SlotOf, ExceptionOf);
  // monostate otherwise.
  Payload payload;

  // A Method's or bound-method Object's receiver and attribute name (BoundOf); nullptr / "" for any other value.
  const ValuePtr& bound_self() const;
  const std::string& bound_name() const;
  // A Tensor's payload; throws std::logic_error for any other kind.
  const TensorOf& tensor() const;
  // A DictView's payload; throws std::logic_error for any other kind.
  const DictViewOf& view_of() const;
  // A SymNum's payload; throws std::logic_error for any other kind.
  const SymOf& sym() const;
  // A Slice's payload; throws std::logic_error for any other kind.
  const SliceOf& slice() const;
  // An Iter's payload; throws std::logic_error for any other kind.
  IterOf& iter();
  const IterOf& iter() const;
  // An Instance's or Record's payload; throws std::logic_error for any other kind.
  InstanceOf& instance();
  const InstanceOf& instance() const;
  // An Object made in the trace that is never passed back to Python as it is: a function made by MAKE_FUNCTION
  // (FunctionOf), a functools.partial called in the trace, a slot found through super() (not Slot::Noop).
  bool made_in_trace() const;
  // A function made in the trace: its payload; throws std::logic_error for any other value.
  FunctionOf& function();
  const FunctionOf& function() const;
  // A Cell's payload; throws std::logic_error for any other kind.
  CellOf& cell();
  const CellOf& cell() const;
  // The __exit__ of a traced with block, or nullptr.
  const GradExitOf* grad_exit() const { return kind == VKind::Object ? std::get_if<GradExitOf>(&payload) : nullptr; }
  // A torch context made in the trace, and the __exit__ of a `with` on one (torch_contexts.cpp), or nullptr.
  const TorchCtxOf* torch_ctx() const { return kind == VKind::Object ? std::get_if<TorchCtxOf>(&payload) : nullptr; }
  const CtxExitOf* ctx_exit() const { return kind == VKind::Object ? std::get_if<CtxExitOf>(&payload) : nullptr; }
  // The modelled payload, or nullptr when the value is not one.
  const PartialOf* partial() const { return kind == VKind::Object ? std::get_if<PartialOf>(&payload) : nullptr; }
  const SuperOf* super_of() const { return kind == VKind::Object ? std::get_if<SuperOf>(&payload) : nullptr; }
  const SlotOf* slot() const { return std::get_if<SlotOf>(&payload); }
  const ModuleMadeOf* made_module() const {
    return kind == VKind::Object ? std::get_if<ModuleMadeOf>(&payload) : nullptr;
  }
  // A Dict's payload; throws std::logic_error for any other kind.
  DictOf& dict_of();
  const DictOf& dict_of() const;
  // A defaultdict made in the trace or read from the frame: its payload (`factory` set); nullptr for any other value
  // (a plain dict included).
  const DictOf* default_dict() const {
    const DictOf* d = kind == VKind::Dict ? std::get_if<DictOf>(&payload) : nullptr;
    return d && d->factory ? d : nullptr;
  }
  // A Dict that is an Instance's `__dict__` (DictOf::frozen); false for any other value.
  bool frozen_dict() const {
    const DictOf* d = kind == VKind::Dict ? std::get_if<DictOf>(&payload) : nullptr;
    return d && d->frozen;
  }
  // A Tuple's class (TupleOf::cls): a namedtuple's, a struct sequence's or torch.Size; a null handle for a plain
  // tuple; throws std::logic_error for any other kind.
  py::handle tuple_class() const;
  // A List, Dict or Set read from the frame: the real container (ListOf / DictOf / SetOf::real); a null handle for
  // one made in the trace and for any other kind.
  py::handle frame_container() const;
  // Sets it (List, Dict, Set only; throws std::logic_error for any other kind).
  void set_frame_container(py::object real);
  // A Set made as a frozenset by a set operation: the frozenset (SetOf::frozenset); a null handle otherwise.
  py::handle frozenset_result() const;
  bool is_traced_exception() const { return kind == VKind::Object && std::holds_alternative<ExceptionOf>(payload); }
  // A partial, super object, slot or traced exception: a value Python has no plain object for.
  bool is_modelled() const {
    return std::holds_alternative<PartialOf>(payload) || std::holds_alternative<SuperOf>(payload) ||
           std::holds_alternative<SlotOf>(payload) || std::holds_alternative<ExceptionOf>(payload);
  }
  // Short name of what a modelled value stands for ("partial", "super", ...) for messages; "" for other values.
  std::string modelled_name() const;
  // The receiver a bound value carries and is rebuilt with: a Method's or bound method's `self`, a super
  // object's obj, a slot's receiver; nullptr otherwise (a partial's function is not a receiver).
  ValuePtr receiver() const;

  static ValuePtr tensor(graph::Node* n, py::object example, py::object device, SourcePtr src = nullptr);
  static ValuePtr sym_num(graph::Node* n, py::object example, SourcePtr src = nullptr);
  static ValuePtr slice_value(SliceOf s);
  static ValuePtr constant(py::object o, SourcePtr src = nullptr);
  static ValuePtr object(py::object o, SourcePtr src = nullptr);
  static ValuePtr tuple(std::vector<ValuePtr> items, py::object cls = py::object());  // cls: TupleOf::cls
  static ValuePtr list(std::vector<ValuePtr> items);
  static ValuePtr iterator(std::vector<ValuePtr> items);  // at its first item, watching no dict
  static ValuePtr new_cell(ValuePtr content);             // content null: an empty cell
  static ValuePtr new_instance(VKind kind, ValuePtr cls);  // an Instance or Record without attributes yet
  static ValuePtr null();
  static ValuePtr dict(std::vector<py::object> keys, std::vector<ValuePtr> values);
  // collections.defaultdict(factory) made in the trace, holding `keys` / `values`.
  static ValuePtr default_dict_of(ValuePtr factory, std::vector<py::object> keys, std::vector<ValuePtr> values);
  static ValuePtr set(std::vector<py::object> elements);  // elements: distinct hashable constants
  // The Set value of a frozenset result (SetOf::frozenset): its elements, in the order it iterates in.
  static ValuePtr frozenset_value(py::object fs);
  // Dict / Set: index of `key` (Python equality; a tensor key's example: identity) or -1.
  int find_key(py::handle key) const;
  static ValuePtr method(ValuePtr self, std::string name);
  // An Object value for function `f` bound to `self` (called with it first), read as attribute `name`.
  static ValuePtr bound_method(py::object f, SourcePtr src, ValuePtr self, std::string name);
  static ValuePtr dict_view_of(ValuePtr dict, ViewPart part);
  // Object values standing for what the trace models itself (`stand_in`: the Python object in `obj`).
  static ValuePtr partial_of(py::object stand_in, PartialOf p);
  static ValuePtr super_value(py::object stand_in, ValuePtr cls, ValuePtr obj);
  static ValuePtr slot_value(py::object stand_in, Slot s, ValuePtr self);  // Noop: a Const None
  static ValuePtr traced_exception(py::object exc);
  static ValuePtr grad_exit_value(py::object exit, int mode, SourcePtr src = nullptr);
  // DictView: the values it shows now (keys, values, or (key, value) tuples), in dict order; `key_value` makes a
  // key's value (Tracer::key_value: a constant, or the tensor a tensor key stands for).
  std::vector<ValuePtr> view_items(const std::function<ValuePtr(const py::object&)>& key_value) const;

  // A Dict holding a tensor key (its example in `keys`): no Python value of it can be made from `keys` alone.
  bool tensor_keyed() const;

  bool is_tensor() const { return kind == VKind::Tensor; }
  bool is_sym() const { return kind == VKind::SymNum; }
  bool is_const() const { return kind == VKind::Const; }
  // A list, dict or set (an object whose contents can change in place).
  bool is_container() const { return kind == VKind::List || kind == VKind::Dict || kind == VKind::Set; }
  // Const, or a Tuple/List made only of constants (recursively).
  bool is_constant_like() const;
  // The Python value of a constant-like value (tuples/lists rebuilt); throws Unsupported otherwise.
  py::object as_python() const;
  std::string describe() const;  // short text for break reasons: "Tensor(sin)", "const 3", "function foo"
};

// True for Python objects treated as immutable constants.
bool is_constant_object(py::handle o);
// A numpy scalar (np.float64(2.5), np.int64(3), np.bool_(True)): an immutable constant; a graph argument only through
// a node that makes it (Tracer::to_arg), since FX code cannot spell it as a literal.
bool is_numpy_scalar(py::handle o);
// True for typing's special forms and aliases (Union, Optional[int], Literal[...], int | None): constants
// that are guarded by identity (Union[int, str] == Union[str, int], but their get_args differ).
bool is_typing_form(py::handle o);

// A struct sequence class whose fields are all sequence items (torch.return_types.max, ...): a Tuple value
// with this class (TupleOf::cls) is rebuilt as cls((items...)).
bool is_structseq_class(py::handle cls);
// Field names of a Tuple value's class (a namedtuple's _fields, a struct sequence's __match_args__).
py::tuple tuple_field_names(py::handle cls);
// The callable that makes an instance of a Tuple value's class from one tuple: a namedtuple's cls._make, else cls
// itself (a struct sequence, torch.Size).
py::object tuple_maker(py::handle cls);

}  // namespace cdynamo::interp
