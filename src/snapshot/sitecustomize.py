# llm-oom's hook for `llm-oom watch` (src/snapshot/sitecustomize.py; docs/watch-torch.md).
#
# Python imports this at startup because `watch` put its folder first on PYTHONPATH. It:
#  1. waits for the program itself to import torch (a meta-path finder: torch is never imported
#     by us), then queues, with torch.cuda._lazy_call, a call that runs once CUDA is initialised:
#     it turns on torch.cuda.memory._record_memory_history and attaches an OOM observer that
#     pickles torch.cuda.memory._snapshot() into $LLM_OOM_SNAPSHOT_DIR at the first OOM (and at
#     exit when LLM_OOM_SNAPSHOT=always);
#  2. writes status-<pid>.json there (on, torch version, CUDA initialised, history, dumps and
#     their time);
#  3. runs the sitecustomize Python would have found without us (the next one on sys.path).
#     Nothing here raises into the program: errors go to hook.log in that folder.
import os
import sys


def _llm_oom_hook():
    out = os.environ.get("LLM_OOM_SNAPSHOT_DIR")
    mode = os.environ.get("LLM_OOM_SNAPSHOT", "oom")
    if not out or mode not in ("oom", "always"):
        return
    pid = os.getpid()
    state = {
        "hook": "on",
        "pid": pid,
        "mode": mode,
        "argv": list(sys.argv),
        "torch_imported": False,
        "torch": None,
        "cuda_initialised": False,
        "history": False,
        "max_entries": int(os.environ.get("LLM_OOM_SNAPSHOT_MAX_ENTRIES", "100000") or 100000),
        "stacks": os.environ.get("LLM_OOM_SNAPSHOT_STACKS", "python"),
        "oom": None,
        "dumps": [],
        "errors": 0,
    }
    def note(what):
        state["errors"] += 1
        try:
            import traceback

            with open(os.path.join(out, "hook.log"), "a") as f:
                f.write("pid %d: %s: %s\n" % (pid, what, traceback.format_exc(limit=3).strip().replace("\n", " | ")))
        except Exception:
            pass

    def write_status():
        try:
            import json

            path = os.path.join(out, "status-%d.json" % pid)
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(state, f)
            os.replace(tmp, path)
        except Exception:
            note("status")

    def dump(torch, reason):
        try:
            import pickle
            import time

            t0 = time.perf_counter()
            snap = torch.cuda.memory._snapshot()
            path = os.path.join(out, "snapshot-%d-%s.pickle" % (pid, reason))
            with open(path + ".tmp", "wb") as f:
                pickle.dump(snap, f)
            os.replace(path + ".tmp", path)
            state["dumps"].append(
                {
                    "reason": reason,
                    "path": path,
                    "bytes": os.path.getsize(path),
                    "seconds": round(time.perf_counter() - t0, 4),
                }
            )
        except Exception:
            note("dump at " + reason)
        write_status()

    def on_oom(device, alloc, device_allocated, device_free):
        try:
            if state["oom"] is not None:
                return
            state["oom"] = {
                "device": int(device),
                "alloc": int(alloc),
                "device_allocated": int(device_allocated),
                "device_free": int(device_free),
            }
            dump(sys.modules["torch"], "oom")
        except Exception:
            note("observer")

    def on_cuda_init():
        try:
            torch = sys.modules["torch"]
            state["cuda_initialised"] = True
            torch.cuda.memory._record_memory_history(
                max_entries=state["max_entries"], stacks=state["stacks"]
            )
            state["history"] = True
            torch._C._cuda_attach_out_of_memory_observer(on_oom)
        except Exception:
            note("enable")
        write_status()

    def on_torch(torch):
        try:
            state["torch_imported"] = True
            state["torch"] = str(getattr(torch, "__version__", "?"))
            if getattr(torch.version, "cuda", None) is None:
                state["note"] = "torch has no CUDA build"
            # Runs right away if CUDA is up already, else inside torch.cuda._lazy_init.
            torch.cuda._lazy_call(on_cuda_init)
        except Exception:
            note("torch import")
        write_status()

    def at_exit():
        try:
            torch = sys.modules.get("torch")
            if torch is not None:
                cuda = getattr(torch, "cuda", None)
                state["cuda_initialised"] = bool(cuda is not None and cuda.is_initialized())
                if mode == "always" and state["history"] and state["oom"] is None:
                    dump(torch, "exit")
        except Exception:
            note("exit")
        write_status()

    class _Loader:
        def __init__(self, inner):
            self._inner = inner

        def create_module(self, spec):
            return self._inner.create_module(spec)

        def exec_module(self, module):
            self._inner.exec_module(module)
            on_torch(module)

        def __getattr__(self, name):
            return getattr(self._inner, name)

    class _TorchFinder:
        """Finds nothing itself: when `torch` is imported, wraps the real loader to act after it."""

        def find_spec(self, name, path=None, target=None):
            if name != "torch":
                return None
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
            try:
                for finder in sys.meta_path:
                    find = getattr(finder, "find_spec", None)
                    spec = find(name, path, target) if find else None
                    if spec is not None:
                        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                            spec.loader = _Loader(spec.loader)
                        return spec
            except Exception:
                note("find torch")
            return None

    import atexit

    atexit.register(at_exit)
    sys.meta_path.insert(0, _TorchFinder())
    write_status()


def _llm_oom_chain():
    """Runs the sitecustomize that the rest of sys.path holds, as Python would have."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import importlib.machinery
        import importlib.util

        rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as e:  # what Python itself does with a failing sitecustomize: say so, go on
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n" % (type(e).__name__, e))


try:
    _llm_oom_hook()
except Exception:
    pass
_llm_oom_chain()
