// straight_line.cpp — owns codegen for frames traced to RETURN_VALUE: one compiled call and the rebuilt result.
#include "codegen/codegen.h"
#include "codegen/emitter.h"
#include "codegen/rebuild.h"

namespace cdynamo::codegen {

py::object straight_line(const interp::Tracer& t, const std::string& compiled_name,
                         const std::vector<graph::Node*>& outputs) {
  Emitter e(t.frame().code);
  e.copy_prefix(t.frame().bc);
  e.load_global(compiled_name, true);
  e.call(e.load_graph_inputs(t.trace()));
  const interp::ValuePtr& ret = t.frame().return_value;
  bool effects = Rebuilder::has_effects(t.trace());
  if (!effects && ret->is_tensor() && !ret->source && outputs.size() == 1 && outputs[0] == ret->tensor().node) {
    e.emit("UNPACK_SEQUENCE", 1);
  } else {
    Rebuilder r(e, outputs, -1);
    std::vector<interp::ValuePtr> roots = effect_values(t.trace());
    roots.push_back(ret);
    r.share(roots);
    if (effects) {  // read everything, then write the side effects
      r.stage_effects(t.trace());
      r.pin(ret);
      r.commit_effects();
    }
    r.push(ret, 0);
    e.emit("SWAP", 2);
    e.emit("POP_TOP");
  }
  e.emit("RETURN_VALUE");
  return e.finish(true);
}

}  // namespace cdynamo::codegen
