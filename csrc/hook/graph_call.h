// graph_call.h — owns GraphCall, the callable rewritten code calls to run a backend's compiled graph, and
// the record a graph leaves when it raises without having changed anything (its frame may then rerun).
#pragma once

#include <Python.h>

#include <cstdint>
#include <vector>

namespace cdynamo::hook {

// What a graph call that raises may have changed, decided once per graph at compile time.
enum class GraphErrorPolicy : int {
  Propagate = 0,      // unknown (an explicit generator, an opaque callee): the error propagates as it is
  Clean = 1,          // the graph writes no input: a failed call changed nothing
  CheckVersions = 2,  // the graph may write inputs: the call changed nothing when no tensor argument's
                      // version counter moved
};

extern PyTypeObject GraphCallType;

// Python helpers a GraphCall may need (all borrowed; nullptr when unused).
struct GraphCallHooks {
  // Graphs with random ops: rng_save() returns a state before each call, rng_restore(state) after one
  // that raised, so a failed call draws no random numbers.
  PyObject* rng_save = nullptr;
  PyObject* rng_restore = nullptr;
  // Graphs that may write inputs in a frame with Python side effects: snap_mask (bytes, one per argument)
  // names the arguments snap_save(mask, args) copies before each call, and snap_restore(args, copies)
  // writes back after a call that raised having written them.
  PyObject* snap_mask = nullptr;
  PyObject* snap_save = nullptr;
  PyObject* snap_restore = nullptr;
  // Graphs with Python `random` draws as inputs (interp/random_calls.cpp): draws_restore(draws) after a call that
  // failed cleanly puts the generators back as they were before the rewritten code drew those inputs, so the frame's
  // rerun as Python draws them once, as eager does (cdynamo._random_values.restore).
  PyObject* draws = nullptr;
  PyObject* draws_restore = nullptr;
  // Graphs whose inputs read through the frame's objects (self._modules['fc']._parameters['weight']) are not
  // loaded by the rewritten code: the guard check fetched them (hand_inputs). One entry per graph input: -1, the
  // next argument of the call; k >= 0, the k-th handed input. Empty: every input is an argument.
  std::vector<int32_t> plan;
};

// New reference: a GraphCall running `fn` (borrowed) with this thread's capture off and, if it raises, the
// grad mode it was called with put back.
PyObject* make_graph_call(PyObject* fn, GraphErrorPolicy policy, const GraphCallHooks& hooks);
// True if this thread's last GraphCall that raised an Exception was `graph` (borrowed, compared by identity)
// and that call left its inputs and the RNG as they were. Clears the record either way.
bool take_clean_failure(PyObject* graph);
// Forgets this thread's record (before running compiled code).
void clear_clean_failure();
// Hands `values` (new references, taken over) to the next call of `graph` (borrowed, compared by identity) on this
// thread: the lifted inputs its entry's passing guard check fetched. Releases any earlier hand-off.
void hand_inputs(PyObject* graph, std::vector<PyObject*>&& values);
// Releases a hand-off that no graph call took (the frame ran another way).
void drop_handed_inputs();
// Readies the type; call once at module init. Returns -1 with an error set on failure.
int init_graph_call();

}  // namespace cdynamo::hook
