// restart.h — owns `Restart`, the one typed request to trace a frame again with one thing changed, and
// `RestartTrace`, the exception the tracer raises it with; hook/translate.cpp's translate loop is the one place that
// decides whether to honour a request and how the next attempt differs.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace cdynamo::interp {

enum class RestartKind {
  // Trace with fake tensors under a ShapeEnv: a static trace met an input that is dynamic now, Tensor.item() under
  // capture_scalar_outputs, an op with a data-dependent output shape under capture_dynamic_output_shape_ops, or an
  // enabled torch.autocast block (autocast casts fake CPU tensors, never meta ones).
  FakeTensors,
  // Stop with a graph break before instruction `at` of the traced frame at once: the instruction that stopped the
  // trace added guards before it failed (a callee inlined part way), which the entry must not keep.
  BreakAt,
  // Keep tensor operations out of the frame's try blocks: the graph holding them could fail in a way that skips the
  // handler (its error policy is not clean).
  NoOpsInTry,
};

struct Restart {
  RestartKind kind = RestartKind::FakeTensors;
  std::string reason;      // why, as the stop reason of the attempt it ends
  bool remember = false;   // FakeTensors: later compiles of the traced frame start with fake tensors too
  int at = -1;             // BreakAt: index into the traced frame's instructions

  // `remember`: what asked for it is not in the frame's dynamic-shape state (scalar outputs, data-dependent shapes),
  // so that state records it for the traced frame's code (cdynamo._dynamic.need_fake_tensors).
  static Restart fake_tensors(std::string why, bool remember) {
    Restart r;
    r.reason = std::move(why);
    r.remember = remember;
    return r;
  }
  static Restart break_at(int index, std::string why) {
    Restart r;
    r.kind = RestartKind::BreakAt;
    r.reason = std::move(why);
    r.at = index;
    return r;
  }
  static Restart no_ops_in_try() {
    Restart r;
    r.kind = RestartKind::NoOpsInTry;
    r.reason = "a graph with tensor operations inside a try block could fail without reaching the handler";
    return r;
  }
};

// Thrown by the tracer (Tracer::request_restart) to end an attempt with a request. It is no Unsupported: no rule that
// falls back on a construct it cannot trace catches it; the run loop records it in Output::restart and stops the
// trace there as an Unsupported would.
struct RestartTrace : std::runtime_error {
  explicit RestartTrace(Restart r) : std::runtime_error(r.reason), request(std::move(r)) {}
  Restart request;
};

// The kind's name in logs ("fake_tensors", "break_at", "no_ops_in_try").
inline const char* restart_kind_name(RestartKind k) {
  switch (k) {
    case RestartKind::FakeTensors: return "fake_tensors";
    case RestartKind::BreakAt: return "break_at";
    case RestartKind::NoOpsInTry: return "no_ops_in_try";
  }
  return "?";
}

}  // namespace cdynamo::interp
