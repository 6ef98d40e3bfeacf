# Entry point: runs every cdynamo-vs-torch._dynamo benchmark in one process and prints all tables.
import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common as C  # noqa: E402
import bench_aliased_inputs  # noqa: E402
import bench_call_overhead  # noqa: E402
import bench_first_call  # noqa: E402
import bench_gpu  # noqa: E402
import bench_graph_breaks  # noqa: E402
import bench_hf_zoo  # noqa: E402
import bench_modules  # noqa: E402
import bench_optim  # noqa: E402
import bench_random_calls  # noqa: E402
import bench_timm_zoo  # noqa: E402

BENCHES = {"first_call": bench_first_call, "call_overhead": bench_call_overhead,
           "graph_breaks": bench_graph_breaks, "modules": bench_modules, "hf_zoo": bench_hf_zoo,
           "timm_zoo": bench_timm_zoo, "optim": bench_optim, "aliased_inputs": bench_aliased_inputs,
           "gpu": bench_gpu, "random_calls": bench_random_calls}


def main():
    ap = argparse.ArgumentParser(description="cdynamo vs torch._dynamo benchmarks")
    ap.add_argument("--quick", action="store_true", help="fewer repeats/iterations (noisier)")
    ap.add_argument("--only", choices=sorted(BENCHES), action="append", help="run only this benchmark")
    ap.add_argument("--json", metavar="PATH", help="also write the raw results as JSON")
    ap.add_argument("--watchdog", type=float, default=3600,
                    help="abort (dumping all stacks) if the whole run takes longer than this many seconds")
    a = ap.parse_args()

    import faulthandler
    faulthandler.dump_traceback_later(a.watchdog, exit=True)  # a hang in a frontend must not run forever
    C.setup()
    print(f"# cdynamo benchmarks  {datetime.datetime.now().isoformat(timespec='seconds')}"
          f"{'  (--quick)' if a.quick else ''}")
    print(f"# {C.machine_info()}", flush=True)
    mod, err = C.load_cdynamo()
    print(f"# cdynamo: {'loaded from ' + os.path.dirname(mod.__file__) if mod else err}")
    print(flush=True)

    raw = {}
    for name in a.only or BENCHES:
        try:
            tables, res = BENCHES[name].run(quick=a.quick)
        except Exception as e:  # noqa: BLE001 - one benchmark crashing must not hide the others
            print(f"## {name}: CRASHED: {C.short_error(e)}\n{C.format_exc_tail()}\n", flush=True)
            continue
        raw[name] = res
        for t in tables:
            t.print()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(raw, f, indent=1, default=str)


if __name__ == "__main__":
    main()
