# Rows for scripts/hostile-inputs.sh (sourced): the stream readers — explain on binary data, a corrupt
# GGUF under RUST_BACKTRACE, MPS's binary "GB", allocator snapshots large and without an OOM, and
# watch around a program that leaves a process holding its output.

head -c 5000000 /dev/zero >"$T/readers-nul.log"
head -c 3000 /dev/urandom >"$T/readers-random.bin"
printf 'GGUF\x09\x00\x00\x00garbagegarbagegarbage' >"$T/readers-bad.gguf"
printf 'RuntimeError: MPS backend out of memory (MPS allocated: 1.00 GB, other allocations: 512.00 MB, max allowed: 9.07 GB). Tried to allocate 56.25 MB on private pool.\n' >"$T/readers-mps.log"
python3 - "$T" <<'PY'
import pickle, sys
T = sys.argv[1]
open(T + "/readers-utf16.log", "wb").write(
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n".encode("utf-16"))
frames = [{"filename": "model.py", "line": 10, "name": "forward"}]
def snap(path, n, oom):
    segs = [{"device": 0, "address": i * 2097152, "total_size": 2097152, "allocated_size": 1048576,
             "active_size": 1048576, "requested_size": 1048576, "stream": 0, "segment_type": "large",
             "is_expandable": False,
             "blocks": [{"address": i * 2097152, "size": 1048576, "requested_size": 1048576,
                         "state": "active_allocated", "frames": frames},
                        {"address": i * 2097152 + 1048576, "size": 1048576, "requested_size": 0,
                         "state": "inactive", "frames": []}]} for i in range(n)]
    trace = [{"action": "alloc", "addr": 0, "size": 1048576, "stream": 0, "time_us": 1, "frames": frames}]
    if oom:
        trace.append({"action": "oom", "addr": 0, "size": 1 << 30, "stream": 0, "time_us": 2,
                      "device_free": 1 << 20, "frames": frames})
    with open(path, "wb") as f:
        pickle.dump({"segments": segs, "device_traces": [trace], "allocator_settings": {}}, f, protocol=4)
snap(T + "/readers-none.pickle", 3, False)
snap(T + "/readers-oom.pickle", 3, True)
snap(T + "/readers-big.pickle", 200000, False)
PY

group "Stream readers (explain, snapshots, watch)"
row "2" "explain /dev/zero (refused at the first 64 KiB)" -- explain /dev/zero
row "2" "explain 5 MB of NUL bytes" -- explain "$T/readers-nul.log"
row "2" "explain /bin/ls (an ELF binary)" -- explain /bin/ls
row "2" "explain 3 KB of random bytes" -- explain "$T/readers-random.bin"
row "1" "explain a UTF-16 log with an OOM (text, not binary)" -- explain "$T/readers-utf16.log"
row "1" "explain MPS 'MPS allocated: 1.00 GB' (GB read as GiB)" -- explain "$T/readers-mps.log"
export RUST_BACKTRACE=1
row "2" "RUST_BACKTRACE=1 plan -m corrupt.gguf (one line, no backtrace)" -- plan -m "$T/readers-bad.gguf"
[ "$(wc -l <"$T/err")" -eq 1 ] || { WRONG=$((WRONG + 1)); echo '| (the GGUF error is not one line) | | **expected one line** |' >>"$ROWS"; }
unset RUST_BACKTRACE
row "0" "explain snapshot: a trace with no oom entry (NO OOM)" -- explain "$T/readers-none.pickle"
row "1" "explain snapshot: a trace with an oom entry" -- explain "$T/readers-oom.pickle"
row "0" "explain snapshot: 200,000 segments, no OOM" -- explain "$T/readers-big.pickle"
row "0" "watch -- bash -c 'setsid sleep 2 & echo done' (a leftover holds the output)" -- watch -- bash -c 'setsid sleep 2 & echo done'
